"""Trigger request ids, each accepted once within the replay window, by every instance on the ledger.

The CMSWEB front end's signature carries nothing per request, so a copied trigger stays valid; its fresh
`request_id` is what tells a new trigger from a replay. Ids live in the ledger (collection
`request_ids`), so a restart or another instance does not forget them; a TTL index on `expires` removes
them once the window has passed. Only an accepted trigger claims its id (rest/triggers.py).
"""
from __future__ import annotations

import datetime
import time
import uuid
from typing import Optional

from pymongo import ASCENDING, WriteConcern, errors
from pymongo.database import Database

from MSUnmerged.ledger.retry import with_retry

COLLECTION = "request_ids"


def _date(epoch_s: float) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(epoch_s, datetime.timezone.utc)


class RequestIds:
    """claim(request_id): True the first time within `window_s` across every instance and restart."""

    def __init__(self, db: Database, window_s: float) -> None:
        # Journaled: an id acknowledged as used stays used through a crash of the database server (SecantusDB
        # lost unjournaled writes acknowledged just before a SIGKILL, 3 times in 3).
        self.coll = db.get_collection(COLLECTION, write_concern=WriteConcern(j=True))
        self.window_s = window_s

    def ensure_index(self) -> None:
        """The TTL index: each id is removed at its own `expires` (so a changed window needs no new index)."""
        with_retry(lambda: self.coll.create_index([("expires", ASCENDING)], expireAfterSeconds=0),
                   "request_ids index")

    def claim(self, request_id: str, now: Optional[float] = None) -> bool:
        """Record `request_id` as used; False when it was used within the window. Safe to retry: the
        claim carries its own token, so a repeated write after a lost answer still says True.
        An entry past its window that the TTL monitor has not removed yet is taken over."""
        now = time.time() if now is None else now
        doc = {"expires": _date(now + self.window_s), "claimed": now, "claim": uuid.uuid4().hex}

        def attempt() -> bool:
            try:
                self.coll.insert_one({"_id": request_id, **doc})
                return True
            except errors.DuplicateKeyError:
                mine_or_stale = {"_id": request_id, "$or": [{"claim": doc["claim"]}, {"expires": {"$lte": _date(now)}}]}
                return self.coll.find_one_and_update(mine_or_stale, {"$set": doc}) is not None

        return with_retry(attempt, "claim trigger request_id")
