"""The polling cycle as operators follow it: each RSE's result is on the cycle document as soon as that RSE
finishes (not in name order at the end), the log has one INFO line per cycle start and end, per RSE
result and per submission batch; its RSEs start largest first (by their ConMon scan's files, in name order when ConMon
cannot say), from one read of ConMon's stats a cycle that every run uses, its failure too; after each cycle the
alerts are pushed to a real AlertManager."""
from __future__ import annotations

import json
import logging
import threading
import time
from pathlib import Path
from typing import Sequence

import pytest
from pymongo.database import Database

from MSUnmerged.alerts import Notifier
from MSUnmerged.service import Service
from MSUnmerged.service.result import Hook
from MSUnmerged.sources.offline import RSES_FILE, STATS_FILE
from servers.alertmanager import AlertManagerServer
from servers.http_fakes import FakeCMSWeb
from service_kit import ConMonStatsSources, make_site, write_sources
from test_service_run import RSE, make_service

pytestmark = pytest.mark.integration

SLOW, FAST = "T2_AA_Slow", "T2_ZZ_Fast"  # the slow one first in name order


def planned_until_recorded(mongo_db: Database, held: str, others: Sequence[str], release: threading.Event,
                           seen: list[list[str]]) -> Hook:
    """A hook that keeps `held`'s run at its `planned` step until every one of `others` has its result on the cycle
    document (then the RSEs there go to `seen`), `release` is set, or 120 s passed (a hang's bound, not a speed)."""
    def hook(step: str, rse: str) -> None:
        if rse == held and step == "planned":
            deadline = time.monotonic() + 120
            while not release.is_set() and time.monotonic() < deadline:
                doc = mongo_db.cycles.find_one({}, {"results": 1}) or {}
                if all(other in (doc.get("results") or {}) for other in others):
                    seen.append(sorted(doc["results"]))
                    return
                time.sleep(0.1)
    return hook


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
    # the slow RSE waits until the fast one is on the cycle document
    svc.runner.hook = planned_until_recorded(mongo_db, SLOW, [FAST], release, seen_while_blocked)
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


SIZES = {"T2_AA_Small": 20, "T2_MM_Large": 120, "T2_ZZ_Mid": 60}  # name order is not size order
UNSCANNED = "T2_BB_Unscanned"  # no ConMon scan: of unknown size


def started_in_order(svc: Service) -> list[str]:
    """The RSEs in the order their runs start (with parallel_rses 1, the order the cycle gives them to its pool)."""
    started: list[str] = []
    svc.runner.hook = lambda step, rse: started.append(rse) if step == "reconciled" else None
    return started


def stats_reads(web: FakeCMSWeb) -> int:
    return sum(1 for endpoint, _, _ in web.requests if endpoint == "stats")


def test_a_cycle_starts_its_rses_largest_first_from_one_stats_read(tmp_path: Path, mongo_db: Database,
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    src = write_sources(tmp_path / "src", [*SIZES, UNSCANNED, RSE], files={**SIZES, UNSCANNED: 10, RSE: 10})
    with FakeCMSWeb() as web:
        web.stats = json.loads((src / STATS_FILE).read_text())
        del web.stats[UNSCANNED]
        svc = make_service(tmp_path, mongo_db, src, sources=ConMonStatsSources(src, web.conmon_url),
                           interval_s=300, parallel_rses=1)
        for rse in SIZES:
            make_site(tmp_path, src, rse, svc.config)
        started = started_in_order(svc)
        caplog.set_level(logging.INFO, logger="MSUnmerged")
        try:
            results = svc.cycle([*SIZES, UNSCANNED], slot=1)
        finally:
            svc.stop()
        assert stats_reads(web) == 1  # the cycle's read, used by every run
    assert started == [UNSCANNED, "T2_MM_Large", "T2_ZZ_Mid", "T2_AA_Small"]  # unknown first: it may be the largest
    assert results[UNSCANNED].reason == "scan_missing"
    assert all(results[rse].submitted > 0 for rse in SIZES)
    cid = mongo_db.cycles.find_one({})["_id"]
    assert f"cycle {cid}: largest first: {UNSCANNED} (size unknown), T2_MM_Large (120 files), T2_ZZ_Mid (60 files), " \
           "..." in [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]


def test_a_hanging_conmon_is_read_once_a_cycle_and_every_rse_records_it(
        tmp_path: Path, mongo_db: Database, caplog: pytest.LogCaptureFixture) -> None:
    src = write_sources(tmp_path / "src", [*SIZES, RSE], files={**SIZES, RSE: 10})
    with FakeCMSWeb() as web:
        web.stats = json.loads((src / STATS_FILE).read_text())
        web.fault("stats", delay_s=3.0)  # past the client's read timeout
        svc = make_service(tmp_path, mongo_db, src, sources=ConMonStatsSources(src, web.conmon_url, 0.5),
                           interval_s=300, parallel_rses=1)
        started = started_in_order(svc)
        caplog.set_level(logging.INFO, logger="MSUnmerged")
        try:
            results = svc.cycle(list(SIZES), slot=1)
        finally:
            svc.stop()
        assert stats_reads(web) == 1  # one timeout a cycle, not one per RSE
    assert started == sorted(SIZES)
    assert {rse: (r.action, r.source, r.reason) for rse, r in results.items()} == \
        {rse: ("failed", "conmon", "conmon_timeout") for rse in SIZES}
    doc = mongo_db.cycles.find_one({})
    assert sorted(doc["results"]) == sorted(SIZES) and doc["unfinished"] == []
    assert sorted((f["rse"], f["source"], f["reason"]) for f in doc["failures"]) == \
        [(rse, "conmon", "conmon_timeout") for rse in sorted(SIZES)]
    assert all(mongo_db.rses.find_one({"_id": rse})["reason"] == "conmon_timeout" for rse in SIZES)
    assert any(r.levelno == logging.WARNING and r.getMessage().startswith(f"cycle {doc['_id']}: ConMon stats "
                                                                          "unreadable (") for r in caplog.records)


LARGE, SMALLS = "T2_MM_Large", ("T2_AA_Small", "T2_ZZ_Small")  # the large one much larger than the rest
HOLD_SIZES = {LARGE: 240, SMALLS[0]: 20, SMALLS[1]: 20}


def hold_service(tmp_path: Path, mongo_db: Database, bound_s: int) -> Service:
    """Two RSE threads (one during a hold) and a cycle whose largest RSE is held for (service/hold.py)."""
    src = write_sources(tmp_path / "src", [*HOLD_SIZES, RSE], files={**HOLD_SIZES, RSE: 10})
    svc = make_service(tmp_path, mongo_db, src, interval_s=300, parallel_rses=2, largest_first_hold_s=bound_s)
    for rse in HOLD_SIZES:
        make_site(tmp_path, src, rse, svc.config)
    return svc


def test_the_others_start_once_the_largest_rse_submitted_its_first_batch(
        tmp_path: Path, mongo_db: Database, caplog: pytest.LogCaptureFixture) -> None:
    svc = hold_service(tmp_path, mongo_db, bound_s=300)
    steps: list[tuple[str, str]] = []
    svc.runner.hook = lambda step, rse: steps.append((step, rse))
    caplog.set_level(logging.INFO, logger="MSUnmerged")
    try:
        results = svc.cycle(list(HOLD_SIZES), slot=1)
    finally:
        svc.stop()
    assert all(results[rse].submitted > 0 for rse in HOLD_SIZES)
    # Its intent is recorded just before its first batch is submitted, and the small ones start only after that.
    intent = steps.index(("intent", LARGE))
    assert all(steps.index(("reconciled", rse)) > intent for rse in SMALLS)
    cid = mongo_db.cycles.find_one({})["_id"]
    lines = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    assert f"cycle {cid}: 1 of 2 RSE threads until {LARGE}'s first batch (at most 300 s)" in lines
    assert any(ln.startswith(f"cycle {cid}: every RSE thread from now: {LARGE}: first batch submitted after ")
               for ln in lines)


def test_a_hold_is_bounded_and_every_other_rse_still_runs(tmp_path: Path, mongo_db: Database,
                                                          caplog: pytest.LogCaptureFixture) -> None:
    svc = hold_service(tmp_path, mongo_db, bound_s=1)
    release = threading.Event()
    seen_while_stuck: list[list[str]] = []
    # stuck before its first batch until the small ones are done: the hold must not wait for it
    svc.runner.hook = planned_until_recorded(mongo_db, LARGE, SMALLS, release, seen_while_stuck)
    caplog.set_level(logging.INFO, logger="MSUnmerged")
    try:
        results = svc.cycle(list(HOLD_SIZES), slot=1)
    finally:
        release.set()
        svc.stop()
    assert seen_while_stuck == [sorted(SMALLS)]
    assert all(results[rse].submitted > 0 for rse in HOLD_SIZES)
    doc = mongo_db.cycles.find_one({})
    assert sorted(doc["results"]) == sorted(HOLD_SIZES) and doc["unfinished"] == []
    assert any(r.levelno == logging.WARNING and r.getMessage().startswith(
        f"cycle {doc['_id']}: every RSE thread from now: {LARGE}: no first batch within "
        "service.largest_first_hold_s after ") for r in caplog.records)


@pytest.mark.integration
@pytest.mark.slow
def test_the_service_loop_pushes_after_its_cycles(tmp_path: Path, mongo_db: Database,
                                                  alertmanager: AlertManagerServer) -> None:
    src = write_sources(tmp_path / "src", [RSE], files=100)
    svc = make_service(tmp_path, mongo_db, src, interval_s=1, alert_after_cycles=1, instance="ms-unmer-loop")
    svc.config.alerts.alertmanager_url = alertmanager.push_url
    svc.notifier = Notifier(svc.config, svc.ledger.view())  # as the constructor builds it from the URL
    (src / RSES_FILE).write_text("<html>Rucio is down</html>")
    loop = threading.Thread(target=svc.serve)
    loop.start()
    try:
        deadline = time.monotonic() + 60
        while not alertmanager.alerts(partition="ms-unmer-loop") and time.monotonic() < deadline:
            time.sleep(0.5)
    finally:
        svc.stop()
        loop.join(30)
    (alert,) = alertmanager.alerts(partition="ms-unmer-loop")  # no service.partition: the instance's name
    assert alert["labels"]["alertname"] == "MSUnmergedCyclesFailing"
    assert "rucio_bad_content" in alert["annotations"]["description"]


@pytest.mark.integration
def test_the_service_builds_its_notifier_from_the_url(tmp_path: Path, mongo_db: Database) -> None:
    src = write_sources(tmp_path / "src", [RSE], files=10)
    assert make_service(tmp_path, mongo_db, src).notifier is None
    svc = make_service(tmp_path, mongo_db, src, interval_s=600)
    svc.config.alerts.alertmanager_url = "http://127.0.0.1:9/api/v2/alerts"
    rebuilt = Service(svc.config, svc.ledger, svc.sources, svc.runner.jobs.backend)
    assert rebuilt.notifier is not None and rebuilt.notifier.manager.expire_s == 3 * 600
