"""Daily aggregates on the real SecantusDB: written per job and per cycle, idempotent, kept past pruning."""
from __future__ import annotations

import time

import pytest
from pymongo.database import Database

from MSUnmerged.ledger import Ledger
from MSUnmerged.ledger.history import day_of, totals_by_day

pytestmark = pytest.mark.integration
DAY = 86400


def summary(deleted: int, freed: int, failed: dict[str, int], would: int = 0) -> dict:
    return {"states": {"deleted": deleted, "would_delete": would, "failed": sum(failed.values())},
            "bytes_freed": freed, "failed_by_class": failed}


def test_jobs_sum_per_rse_and_day_and_repeats_change_nothing(mongo_db: Database) -> None:
    history, now = Ledger(mongo_db).history, time.time()
    today, yesterday, old = (day_of(now - k * DAY) for k in (0, 1, 40))
    history.record_job("T2_A", "T2_A:1.000:1-000001", today, summary(10, 1000, {"timeout": 2}))
    history.record_job("T2_A", "T2_A:1.000:1-000002", today, summary(5, 500, {"timeout": 1, "permission_denied": 4}))
    history.record_job("T2_A", "T2_A:1.000:1-000002", today, summary(5, 500, {"timeout": 1, "permission_denied": 4}))
    history.record_unreported("T2_A", "T2_A:1.000:1-000002", today, "no_report", 3)
    history.record_unreported("T2_A", "T2_A:1.000:1-000003", today, "no_report", 0)  # nothing to count
    history.record_job("T2_A", "T2_A:0.500:1-000001", yesterday, summary(0, 0, {}, would=7))
    history.record_job("T2_B", "T2_B:1.000:1-000001", today, summary(1, 1, {}))
    history.record_job("T2_B", "T2_B:0.100:1-000001", old, summary(99, 99, {}))  # outside 30 days

    rows = history.rse_days("T2_A", now=now)
    assert [(r["day"], r["deleted"], r["would_delete"], r["bytes_freed"], r["failed"]) for r in rows] == \
        [(yesterday, 0, 7, 0, 0), (today, 15, 0, 1500, 10)]
    assert rows[1]["failed_by_class"] == {"timeout": 3, "permission_denied": 4, "no_report": 3}
    every = history.rse_days(now=now)
    assert {(r["rse"], r["day"]) for r in every} == {("T2_A", yesterday), ("T2_A", today), ("T2_B", today)}
    totals = totals_by_day(every)
    assert [(t["day"], t["deleted"], t["bytes_freed"]) for t in totals] == [(yesterday, 0, 0), (today, 16, 1501)]
    assert len(history.rse_days("T2_B", days=60, now=now)) == 2


def test_cycle_failures_counted_once_per_cycle(mongo_db: Database) -> None:
    history = Ledger(mongo_db).history
    fail = [{"source": "conmon", "reason": "conmon_timeout", "rse": "T2_A"},
            {"source": "conmon", "reason": "conmon_timeout", "rse": "T2_B"}]
    history.record_cycle("i:1:1.5", time.time(), False, fail)
    history.record_cycle("i:1:1.5", time.time(), False, fail)  # the same cycle again
    history.record_cycle("i:2:2.5", time.time() - DAY, True, [])
    assert history.cycle_failure_totals() == {("conmon", "conmon_timeout"): 2}
    assert history.rse_days() == []  # cycle days are not RSE days
