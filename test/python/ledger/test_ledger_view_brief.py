"""LedgerView.health(brief=True), what each /metrics scrape reads, on a real SecantusDB: the same answer as the
full one but for the last cycle's per-RSE `results` and `rses`, also on a ledger from before the `meta` document;
finished cycles kept between scrapes without missing a change; documents cleaned and redacted in one pass."""
from __future__ import annotations

import datetime
import time

import pytest
from bson import Int64, ObjectId
from pymongo.database import Database

from MSUnmerged.ledger import Ledger
from MSUnmerged.ledger.cycles import CYCLES_META
from MSUnmerged.ledger import view as view_module
from MSUnmerged.ledger.view import CYCLE_BRIEF
from MSUnmerged.redact import redact_all

pytestmark = pytest.mark.integration
RSES = [f"T2_XX_{i:03d}" for i in range(30)]


def cycles(ledger: Ledger, bad: set[int]) -> None:
    for i in range(8):
        cid = ledger.cycles.start_cycle(f"inst-{i % 2}", i, RSES)
        for rse in RSES:
            ledger.cycles.record_cycle_result(cid, rse, {"outcome": "submitted", "jobs": i, "detail": "x" * 50})
        failures = [{"source": "rucio", "reason": "rucio_unavailable", "detail": "d", "rse": ""}] if i in bad else []
        ledger.cycles.end_cycle(cid, failures)
    ledger.cycles.start_cycle("inst-0", 9, RSES)  # one still running: the newest finished one is the last cycle


def same_but_bulk(full: dict, brief: dict) -> None:
    last = full["last_cycle"]
    assert last["results"] and last["rses"] == RSES  # there was a bulk to leave out
    assert brief["last_cycle"] == {k: v for k, v in last.items() if k not in CYCLE_BRIEF}
    assert {k: v for k, v in brief.items() if k not in ("last_cycle", "last_good_age_s")} == \
        {k: v for k, v in full.items() if k not in ("last_cycle", "last_good_age_s")}
    assert abs(brief["last_good_age_s"] - full["last_good_age_s"]) < 60


@pytest.mark.parametrize("bad", [set(), {6, 7}, set(range(8))])
def test_brief_health_is_the_full_one_without_the_bulk(mongo_db: Database, bad: set[int]) -> None:
    ledger = Ledger(mongo_db)
    ledger.ensure_indexes()
    cycles(ledger, bad)
    view = Ledger(mongo_db).view()
    full, brief = view.health(3600.0), view.health(3600.0, brief=True)
    same_but_bulk(full, brief)
    assert brief["never_good"] == (bad == set(range(8)))
    assert brief["sources"]["rucio"] == (0 if 7 in bad else 1)


def test_brief_health_on_a_ledger_from_before_meta(mongo_db: Database) -> None:
    ledger = Ledger(mongo_db)
    cycles(ledger, {7})
    mongo_db.meta.delete_one({"_id": CYCLES_META})
    view = Ledger(mongo_db).view()
    same_but_bulk(view.health(3600.0), view.health(3600.0, brief=True))
    assert view.health(3600.0, brief=True)["last_good_cycle_at"] <= time.time()


def test_brief_health_keeps_finished_cycles_and_follows_changes(mongo_db: Database) -> None:
    ledger = Ledger(mongo_db)
    cycles(ledger, {7})
    view = Ledger(mongo_db).view()
    first = view.health(3600.0, brief=True)
    assert view.cycles(5, brief=True) == view.cycles(5, brief=True)  # a caller's changes do not reach the cache
    running = mongo_db.cycles.find_one({"finished": {"$exists": False}})["_id"]
    assert running not in view._finished and len(view._finished) == 8  # the 8 finished ones kept, not the running one
    ledger.cycles.end_cycle(running)  # good: the running cycle is now the last one and the last good one
    then = view.health(3600.0, brief=True)
    assert then["last_cycle"]["id"] == running and then["last_good_cycle_at"] == then["last_cycle"]["finished"]
    assert first["last_cycle"]["id"] != running and first["sources"]["rucio"] == 0 and then["sources"]["rucio"] == 1
    full = view.health(3600.0)
    assert then["last_cycle"] == {k: v for k, v in full["last_cycle"].items() if k not in CYCLE_BRIEF}
    for i in range(12):  # older cycles leave the cache with the meta document's recent list
        ledger.cycles.end_cycle(ledger.cycles.start_cycle("inst-0", 20 + i, RSES))
    view.health(3600.0, brief=True)
    assert set(view._finished) <= set(mongo_db.meta.find_one({"_id": CYCLES_META})["recent"][-10:])


def test_shown_is_clean_then_redact_all() -> None:
    doc = {"_id": ObjectId(), "at": datetime.datetime(2026, 1, 2, 3, 4, 5), "n": Int64(5), "f": 1.5, "b": True,
           "none": None, "url": "https://user:pw@host/x?token=abc", "plain": "no secret",
           "nested": {"detail": "Max retries exceeded with url: /files?access_token=zzz", "k": [1, "a=b@c"]},
           "events": [{"at": 1.0, "detail": "bearer abc.def"}, "x?sig=1", ObjectId(), [1, 2]]}
    assert view_module._shown(doc) == redact_all(view_module._clean(doc))


def test_sources_of_a_cycle_leave_out_the_ones_not_called() -> None:
    """msunmerged_source_up: 0 failed, 1 answered, no sample for a source the cycle never called; a cycle recorded
    by an older version (no `answered`) counts every source not failed as up, as that version did."""
    failed = {"failures": [{"source": "rucio", "reason": "rucio_http_status"}]}
    assert view_module.sources_of({**failed, "answered": ["internal", "ledger"]}) == \
        {"rucio": 0, "ledger": 1, "internal": 1}
    assert view_module.sources_of({"failures": [], "answered": ["conmon", "ledger", "rucio", "wmstats"]}) == \
        {"rucio": 1, "conmon": 1, "wmstats": 1, "ledger": 1}
    assert view_module.sources_of(failed) == {"rucio": 0, "conmon": 1, "wmstats": 1, "ledger": 1, "backend": 1,
                                              "disk": 1, "internal": 1}
