"""Polling-cycle records on a real SecantusDB: the latest cycles and the last good one read by _id through the
`meta` document (same answers as sorting every cycle), ledgers from before it, and pruning by age."""
from __future__ import annotations

import time

import pytest
from pymongo.database import Database

from MSUnmerged.ledger import Ledger
from MSUnmerged.ledger.cycles import CYCLES_META, RECENT_CYCLES

pytestmark = pytest.mark.integration
FAILED = [{"source": "rucio", "reason": "timeout", "detail": "", "rse": ""}]


def run_cycles(ledger: Ledger, n: int, bad: set[int] = frozenset()) -> list[str]:
    ids = []
    for i in range(n):
        ids.append(ledger.cycles.start_cycle(f"inst-{i % 2}", i, ["T2_XX_A"]))
        ledger.cycles.end_cycle(ids[-1], FAILED if i in bad else [])
    return ids


def sorted_on_server(db: Database, flt: dict) -> list[str]:
    return [d["_id"] for d in db.cycles.find(flt).sort("started", -1)]


def test_latest_and_last_good_cycles_match_a_sort_of_all(mongo_db: Database) -> None:
    ledger = Ledger(mongo_db)
    ledger.ensure_indexes()
    run_cycles(ledger, RECENT_CYCLES + 7, bad={RECENT_CYCLES + 4, RECENT_CYCLES + 5, RECENT_CYCLES + 6})
    everything = sorted_on_server(mongo_db, {})
    for limit in (1, 5, RECENT_CYCLES, RECENT_CYCLES + 3):  # the last one: more than `meta` names
        assert [d["_id"] for d in ledger.cycles.query_cycles(limit)] == everything[:limit]
    assert len(mongo_db.meta.find_one({"_id": CYCLES_META})["recent"]) == RECENT_CYCLES
    good = ledger.cycles.last_good_cycle()
    assert good["_id"] == sorted_on_server(mongo_db, {"ok": True})[0] == everything[3] and good["ok"]
    assert "results" in good  # the whole cycle document


def test_a_ledger_without_the_meta_document_is_read_as_before(mongo_db: Database) -> None:
    ledger = Ledger(mongo_db)
    ids = run_cycles(ledger, 6, bad={5})
    mongo_db.meta.delete_one({"_id": CYCLES_META})
    assert [d["_id"] for d in ledger.cycles.query_cycles(3)] == ids[::-1][:3]
    assert ledger.cycles.last_good_cycle()["_id"] == ids[4]
    assert Ledger(mongo_db.client[mongo_db.name + "_empty"]).cycles.last_good_cycle() == {}
    mongo_db.client.drop_database(mongo_db.name + "_empty")


def test_old_cycles_are_pruned_and_the_last_good_one_is_still_known(mongo_db: Database) -> None:
    ledger = Ledger(mongo_db, cycles_kept_days=1)
    good = run_cycles(ledger, 3, bad={1, 2})[0]
    mongo_db.cycles.update_many({}, {"$inc": {"started": -2 * 86400}})  # as if they ran two days ago
    mongo_db.meta.update_one({"_id": CYCLES_META}, {"$inc": {"last_good.started": -2 * 86400,
                                                             "last_good.finished": -2 * 86400}})
    later = run_cycles(ledger, 2, bad={0, 1})
    assert sorted(d["_id"] for d in mongo_db.cycles.find()) == sorted(later)  # the old ones pruned
    kept = ledger.cycles.last_good_cycle()
    assert kept["_id"] == good and kept["ok"] and kept["finished"] < time.time() - 86400
    assert [d["_id"] for d in ledger.cycles.query_cycles(2)] == later[::-1]
