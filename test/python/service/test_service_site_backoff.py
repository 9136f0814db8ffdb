"""A site whose configuration is unusable (its jobs end config_error, nothing touched) is backed off: one try
however many jobs said so, nothing submitted while it waits (its files wait in one round, not one a cycle), the wait doubling up to
jobs.config_error_backoff_max_h, one job as the next try, its alert raised; a fixed site ends it.

run_once against a real SecantusDB and the real LocalBackend running the worker on a POSIX site.
"""
from __future__ import annotations

import time
from pathlib import Path

import pytest
from pymongo.database import Database

from MSUnmerged.alerts.rules import AlertKind, rse_alerts
from MSUnmerged.ledger import sitebackoff
from MSUnmerged.ledger import Ledger
from MSUnmerged.statemachine import SITE_CONFIG_BACKOFF
from service_kit import write_sources
from test_service_run import RSE, make_service

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def wait_out(db: Database, rse: str) -> None:
    """The RSE's back-off wait is over: its end moved to now (the waits are checked as set, not slept through)."""
    db.rses.update_one({"_id": rse}, {"$set": {f"{sitebackoff.FIELD}.until": time.time()}})


def test_an_unusable_site_backs_off_then_recovers(tmp_path: Path, mongo_db: Database) -> None:
    src = write_sources(tmp_path / "src", [RSE], files=600)
    svc = make_service(tmp_path, mongo_db, src, interval_s=60)
    config = svc.config
    config.planner.files_per_job = 40  # many jobs: one try all the same
    config.jobs.config_error_backoff_max_h = 150 / 3600  # 60 s, 120 s, then 150 s: the bound
    site = config.jobs.sites[RSE]
    good, site.siteconfig = site.siteconfig, str(tmp_path / "no-such-siteconf")
    backend = svc.runner.jobs.backend

    first = svc.runner.run_once(RSE, wait_s=60)
    sent = len(backend.submissions())
    assert first.submitted > 1 and sent == first.submitted
    hold = sitebackoff.current(svc.ledger.base.rse(RSE))
    assert hold is not None and hold["tries"] == 1, hold  # one try, not one per job
    assert hold["until"] - hold["tried_at"] == pytest.approx(60.0) and hold["until"] > time.time()  # a cycle
    failed = mongo_db.files.count_documents({"rse": RSE, "error_class": "config_error"})
    assert failed > 0

    # Cycles while it waits: nothing submitted, the files' tries unspent, the reason and the alert shown.
    for _ in range(2):
        again = svc.runner.run_once(RSE)
        assert again.submitted == 0 and again.reason == SITE_CONFIG_BACKOFF, again
    assert len(backend.submissions()) == sent
    doc = svc.ledger.base.rse(RSE)
    assert (doc["state"], doc["reason"]) == ("planned", SITE_CONFIG_BACKOFF)
    assert "no-such-siteconf" in doc["detail"] or "config" in doc["detail"]
    rse = next(r for r in Ledger(mongo_db).view().rses() if r["name"] == RSE)
    assert AlertKind.RSE_SITE_CONFIG_UNUSABLE in {a.kind for a in rse_alerts(rse, config.alerts, time.time())}
    # Its files wait in one retry round (assigned their second try once), not one round a cycle.
    assert mongo_db.files.count_documents({"rse": RSE, "attempts": {"$gt": 2}}) == 0

    # The wait is over: one job tries again, fails: the wait doubles (120 s), then the bound (150 s).
    for tries, wait in ((2, 120.0), (3, 150.0)):
        wait_out(mongo_db, RSE)
        probe = svc.runner.run_once(RSE, wait_s=60)
        assert probe.submitted == 1, probe
        hold = sitebackoff.current(svc.ledger.base.rse(RSE))
        assert hold["tries"] == tries and hold["until"] - hold["tried_at"] == pytest.approx(wait), hold
    assert len(backend.submissions()) == sent + 2

    # The site is fixed: the next try gets past it, the back-off ends and every file goes.
    site.siteconfig = good
    wait_out(mongo_db, RSE)
    svc.runner.run_once(RSE, wait_s=90)
    assert sitebackoff.current(svc.ledger.base.rse(RSE)) is None
    for _ in range(5):
        if svc.runner.run_once(RSE, wait_s=90).state == "clean":
            break
    doc = svc.ledger.base.rse(RSE)
    assert doc["state"] == "clean" and doc["counters"]["deleted"] == doc["counters"]["to_delete"], doc["counters"]
