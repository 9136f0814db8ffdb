"""When the ledger first saw each dataset directory of an RSE in a throttled plan: the throttle's order
(oldest first, throttle.py). A dataset directory absent from a newer plan is forgotten (seen anew later)."""
from __future__ import annotations

from typing import Iterable

from pymongo import UpdateOne

from MSUnmerged.ledger.base import LedgerBase
from MSUnmerged.ledger.retry import with_retry

COLLECTION = "dataset_ages"
BATCH = 5000


class Ages:
    """The RSEs' dataset directories as their throttled plans first held them."""

    def __init__(self, base: LedgerBase) -> None:
        self.coll = base.db[COLLECTION]

    def first_seen(self, rse: str) -> dict[bytes, float]:
        """Dataset directory (bytes, as the planner keys it) -> the generation it was first planned in."""
        docs = with_retry(lambda: list(self.coll.find({"rse": rse}, {"_id": 0, "dataset": 1, "first_seen": 1})),
                          f"dataset ages of {rse}")
        return {d["dataset"].encode("utf-8", "surrogateescape"): d["first_seen"] for d in docs}

    def record(self, rse: str, generation: float, datasets: Iterable[str]) -> None:
        """The plan of `generation` holds these dataset directories: new ones are first seen now; those it no
        longer holds are forgotten. Repeating it changes nothing."""
        coll = self.coll
        ops = [UpdateOne({"_id": f"{rse}|{d}"}, {"$set": {"rse": rse, "dataset": d, "last_seen": generation},
                                               "$min": {"first_seen": generation}}, upsert=True)
               for d in sorted(datasets)]
        for start in range(0, len(ops), BATCH):
            chunk = ops[start:start + BATCH]
            with_retry(lambda: coll.bulk_write(chunk, ordered=False), "record dataset ages")
        with_retry(lambda: coll.delete_many({"rse": rse, "last_seen": {"$lt": generation}}), "forget dataset ages")
