"""The polling cycle as operators follow it: each RSE's result is on the cycle document as soon as that RSE
finishes (not in name order at the end), the log has one INFO line per cycle start and end, per RSE
result and per submission batch, and after each cycle the alerts are pushed to a real AlertManager."""
from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

import pytest
from pymongo.database import Database

from MSUnmerged.alerts import Notifier
from MSUnmerged.ledger.view import MongoLedgerView
from MSUnmerged.service import Service
from MSUnmerged.sources.offline import RSES_FILE
from servers.alertmanager import AlertManagerServer
from service_kit import make_site, write_sources
from test_service_run import RSE, make_service

pytestmark = pytest.mark.integration

SLOW, FAST = "T2_AA_Slow", "T2_ZZ_Fast"  # the slow one first in name order


def test_results_are_recorded_as_rses_finish_and_logged(tmp_path: Path, mongo_db: Database,
                                                        caplog: pytest.LogCaptureFixture) -> None:
    src = write_sources(tmp_path / "src", [SLOW, FAST, RSE], files=300)  # make_service sets up RSE's site too
    svc = make_service(tmp_path, mongo_db, src, interval_s=300, parallel_rses=2)
    for rse in (SLOW, FAST):
        make_site(tmp_path, src, rse, svc.config)
    svc.config.planner.files_per_job = 100
    svc.config.jobs.submit_batch = 1  # one log line per batch: several for each RSE
    release = threading.Event()
    seen_while_blocked: list[list[str]] = []

    def hold_the_slow_one(step: str, rse: str) -> None:
        if rse == SLOW and step == "planned":  # the slow RSE waits until the fast one is on the cycle document
            deadline = time.monotonic() + 120
            while not release.is_set() and time.monotonic() < deadline:
                doc = mongo_db.cycles.find_one({}, {"results": 1}) or {}
                if (doc.get("results") or {}).get(FAST):
                    seen_while_blocked.append(sorted(doc["results"]))
                    return
                time.sleep(0.1)

    svc.runner.hook = hold_the_slow_one
    caplog.set_level(logging.INFO, logger="MSUnmerged")
    try:
        results = svc.cycle([SLOW, FAST], slot=1)
    finally:
        release.set()
        svc.stop()
    assert seen_while_blocked == [[FAST]]  # recorded while the slow one (first by name) was still at work
    assert set(results) == {SLOW, FAST} and all(r.submitted > 0 for r in results.values())
    doc = mongo_db.cycles.find_one({})
    assert sorted(doc["results"]) == [SLOW, FAST] and doc["unfinished"] == []

    lines = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    cid = doc["_id"]
    assert f"cycle {cid}: start, 2 RSEs (real)" in lines
    ends = [ln for ln in lines if ln.startswith(f"cycle {cid}: end after")]
    assert len(ends) == 1 and "2 of 2 RSEs done, 0 unfinished, 0 failures" in ends[0]
    per_rse = [ln for ln in lines if ln.startswith(f"cycle {cid}: T2_")]
    assert [ln[len(f"cycle {cid}: "):].split(":")[0] for ln in per_rse] == [FAST, SLOW]  # in the order they finished
    assert all("new_generation" in ln and "submitted" in ln for ln in per_rse)
    for rse, res in results.items():
        batches = [ln for ln in lines if ln.startswith(f"{rse}: submitted ") and "jobs (" in ln]
        assert len(batches) == res.submitted > 1  # submit_batch = 1: one line per job
        assert all(f"for site {rse}" in ln and "to local" in ln for ln in batches)


@pytest.mark.integration
@pytest.mark.slow
def test_the_service_loop_pushes_after_its_cycles(tmp_path: Path, mongo_db: Database,
                                                  alertmanager: AlertManagerServer) -> None:
    src = write_sources(tmp_path / "src", [RSE], files=100)
    svc = make_service(tmp_path, mongo_db, src, interval_s=1, alert_after_cycles=1, instance="ms-unmer-loop")
    svc.config.alerts.alertmanager_url = alertmanager.push_url
    svc.notifier = Notifier(svc.config, MongoLedgerView(mongo_db))  # as the constructor builds it from the URL
    (src / RSES_FILE).write_text("<html>Rucio is down</html>")
    loop = threading.Thread(target=svc.serve)
    loop.start()
    try:
        deadline = time.monotonic() + 60
        while not alertmanager.alerts(instance="ms-unmer-loop") and time.monotonic() < deadline:
            time.sleep(0.5)
    finally:
        svc.stop()
        loop.join(30)
    (alert,) = alertmanager.alerts(instance="ms-unmer-loop")
    assert alert["labels"]["alertname"] == "ms-unmerged: cycles_failing"
    assert "rucio_bad_content" in alert["annotations"]["description"]


@pytest.mark.integration
def test_the_service_builds_its_notifier_from_the_url(tmp_path: Path, mongo_db: Database) -> None:
    src = write_sources(tmp_path / "src", [RSE], files=10)
    assert make_service(tmp_path, mongo_db, src).notifier is None
    svc = make_service(tmp_path, mongo_db, src, interval_s=600)
    svc.config.alerts.alertmanager_url = "http://127.0.0.1:9/api/v2/alerts"
    rebuilt = Service(svc.config, svc.ledger, svc.sources, svc.runner.jobs.backend)
    assert rebuilt.notifier is not None and rebuilt.notifier.manager.expire_s == 3 * 600
