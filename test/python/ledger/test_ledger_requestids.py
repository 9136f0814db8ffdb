"""Trigger request ids on a real SecantusDB: once per window across instances, a TTL index, safe retries."""
from __future__ import annotations

from typing import Any

import pytest
from pymongo.database import Database

from MSUnmerged.ledger.requestids import COLLECTION, RequestIds

pytestmark = pytest.mark.integration


def test_an_id_is_accepted_once_per_window_by_every_instance(mongo_db: Database) -> None:
    """Before: each process kept the ids it had seen in memory, so another instance or a restart accepted
    them again."""
    one, other = RequestIds(mongo_db, 100.0), RequestIds(mongo_db, 100.0)
    assert one.claim("req-0001", now=1000.0)
    assert not one.claim("req-0001", now=1050.0) and not other.claim("req-0001", now=1099.0)
    assert other.claim("req-0001", now=1100.0)  # its window has passed (not removed by the TTL monitor yet)
    assert not one.claim("req-0001", now=1150.0)  # ... and the new claim holds for a window of its own


def test_ttl_index_removes_ids_at_their_own_expiry(mongo_db: Database) -> None:
    ids = RequestIds(mongo_db, 60.0)
    ids.ensure_index()
    ids.ensure_index()  # idempotent, also with another window: the window is in each document
    RequestIds(mongo_db, 7200.0).ensure_index()
    ttl = [i for i in mongo_db[COLLECTION].index_information().values() if "expireAfterSeconds" in i]
    assert [(i["key"], i["expireAfterSeconds"]) for i in ttl] == [([("expires", 1)], 0)]
    assert ids.claim("req-0002", now=5000.0)
    doc = mongo_db[COLLECTION].find_one({"_id": "req-0002"})
    assert doc["expires"].timestamp() == pytest.approx(5060.0)


class LostAnswer:
    """A collection whose first insert_one is written but its answer lost (as a network cut would)."""

    def __init__(self, coll: Any) -> None:
        self.coll, self.lost = coll, False

    def insert_one(self, doc: dict[str, Any]) -> Any:
        result = self.coll.insert_one(doc)
        if not self.lost:
            self.lost = True
            from pymongo.errors import AutoReconnect
            raise AutoReconnect("connection closed")  # a transient error: with_retry writes it again
        return result

    def __getattr__(self, name: str) -> Any:
        return getattr(self.coll, name)


def test_a_retried_claim_after_a_lost_answer_is_still_the_first(mongo_db: Database) -> None:
    """The retry finds its own claim written, not a replay."""
    ids = RequestIds(mongo_db, 60.0)
    ids.coll = LostAnswer(ids.coll)
    assert ids.claim("req-0003")
    assert not RequestIds(mongo_db, 60.0).claim("req-0003")
