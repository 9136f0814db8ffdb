"""An RSE's kept events (skips and failures) on a real SecantusDB: the document keeps the last EVENTS_KEPT, every
reader's answer (LedgerView.rses/rse, the alerts decided from them) is what it was when documents kept 50, and a
ledger written by that older code is readable as it is and cut to EVENTS_KEPT at start-up (ensure_indexes)."""
from __future__ import annotations

import time
from typing import Any

import pytest
from pymongo.database import Database

from MSUnmerged.alerts.rules import AlertKind, evaluate
from MSUnmerged.config import AlertsConfig
from MSUnmerged.ledger import Ledger
from MSUnmerged.ledger.base import EVENTS_KEPT, state_update
from MSUnmerged.statemachine import RSEState

pytestmark = pytest.mark.integration
OLD_KEPT = 50  # what documents written before kept
GUARD = "delete_count_exceeded"


def event(i: int, state: str = RSEState.GUARDED, reason: str = GUARD) -> dict[str, Any]:
    return {"at": 1_000_000.0 + i, "state": state, "reason": reason, "detail": f"refusal {i}"}


def old_ledger(db: Database) -> dict[str, list[dict[str, Any]]]:
    """RSE documents as the older code left them: 50 events, 7, none; the events written by name."""
    written = {"T2_OLD_Full": [event(i) for i in range(OLD_KEPT)],
               "T2_OLD_Few": [event(i, RSEState.SKIPPED, "scan_running") for i in range(7)],
               "T2_OLD_None": []}
    for name, events in written.items():
        state = events[-1]["state"] if events else RSEState.CLEAN
        reason = events[-1]["reason"] if events else ""
        db.rses.insert_one({"_id": name, "state": state, "reason": reason, "detail": "-", "updated": 2.0e6,
                            "created": 1.0e6, **({"events": events} if events else {})})
    return written


def test_an_rse_keeps_its_last_events_newest_last(mongo_db: Database) -> None:
    ledger = Ledger(mongo_db)
    ledger.ensure_indexes()
    for i in range(EVENTS_KEPT + 5):
        ledger.base.set_rse_state("T2_XX_Skip", RSEState.SKIPPED, "scan_running", f"skip {i}")
    ledger.counters.refresh_job_counts("T2_XX_Skip", state_update(RSEState.SKIPPED, "scan_failed", "the last one"))
    ledger.base.set_rse_state("T2_XX_Skip", RSEState.RUNNING)  # no reason: no event
    kept = mongo_db.rses.find_one({"_id": "T2_XX_Skip"})["events"]
    assert [e["detail"] for e in kept] == [f"skip {i}" for i in range(6, EVENTS_KEPT + 5)] + ["the last one"]
    shown = Ledger(mongo_db).view().rse("T2_XX_Skip")
    assert shown is not None and shown["events"] == kept and shown["state"] == RSEState.RUNNING


def test_a_ledger_of_the_older_code_reads_the_same_and_is_cut_at_start_up(mongo_db: Database) -> None:
    written = old_ledger(mongo_db)
    view = Ledger(mongo_db).view()
    before = view.rses()  # read as it is: the last EVENTS_KEPT shown, as the older code showed them
    assert {r["name"]: r["events"] for r in before} == {n: e[-EVENTS_KEPT:] for n, e in written.items()}
    cfg, now = AlertsConfig(), time.time()
    alerts_before = evaluate({}, before, cfg, now)
    assert [(a.kind, a.rse) for a in alerts_before] == [(AlertKind.RSE_GUARDED, "T2_OLD_Full")]
    assert f"refused {EVENTS_KEPT} times in a row" in alerts_before[0].summary

    ledger = Ledger(mongo_db)
    ledger.ensure_indexes()  # start-up
    docs = {d["_id"]: d.get("events", []) for d in mongo_db.rses.find()}
    assert docs == {n: e[-EVENTS_KEPT:] for n, e in written.items()}  # the newest kept, in order; others untouched
    assert ledger.base.trim_events() == 0  # nothing left to cut
    assert view.rses() == before and view.rse("T2_OLD_Full") == next(r for r in before if r["name"] == "T2_OLD_Full")
    assert evaluate({}, view.rses(), cfg, now) == alerts_before

    ledger.base.set_rse_state("T2_OLD_Full", RSEState.GUARDED, GUARD, "one more")  # the next event joins the kept ones
    assert [e["detail"] for e in view.rse("T2_OLD_Full")["events"]] == \
        [f"refusal {i}" for i in range(OLD_KEPT - EVENTS_KEPT + 1, OLD_KEPT)] + ["one more"]
