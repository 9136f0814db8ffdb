"""Per-RSE leases shared by every instance on one database: owner, expiry, heartbeat renewal.

A lease is taken with one `find_one_and_update` whose filter only matches a free, expired or
already-owned lease, so two instances can never both hold it. `slot` (the polling cycle number,
now // interval) is recorded on release, so an RSE is worked on once per cycle across instances.
"""
from __future__ import annotations

import logging
import threading
import time
from typing import Any, Optional

from pymongo import ReturnDocument, errors
from pymongo.database import Database

from MSUnmerged.ledger.retry import with_retry

log = logging.getLogger(__name__)


class LeaseLost(Exception):
    """Another instance took this RSE over (our lease expired): stop working on it."""


class Leases:
    """The leases this instance (`owner`) holds; `heartbeat()` keeps them alive."""

    def __init__(self, db: Database, owner: str, ttl_s: float) -> None:
        self.coll = db["leases"]
        self.owner = owner
        self.ttl_s = ttl_s
        self._held: dict[str, int] = {}  # rse -> epoch of our tenure
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def acquire(self, rse: str, slot: Optional[int] = None) -> bool:
        """Take the RSE's lease if free, expired or ours (and, with `slot`, not done in that slot)."""
        now = time.time()
        flt: dict[str, Any] = {"_id": rse, "$or": [{"owner": self.owner}, {"owner": None},
                                                   {"expires": {"$lt": now}}]}
        if slot is not None:
            flt["done_slot"] = {"$ne": slot}
        update = {"$set": {"owner": self.owner, "expires": now + self.ttl_s, "renewed": now, "acquired": now},
                  "$inc": {"epoch": 1}}

        def take() -> Optional[dict[str, Any]]:
            try:
                return self.coll.find_one_and_update(flt, update, upsert=True,
                                                     return_document=ReturnDocument.AFTER)
            except errors.DuplicateKeyError:  # the lease exists and is not ours to take
                return None

        doc = with_retry(take, f"lease {rse}")
        if doc is None:
            return False
        with self._lock:
            self._held[rse] = doc["epoch"]
        return True

    def describe(self, rse: str) -> dict[str, Any]:
        return self.coll.find_one({"_id": rse}) or {}

    def renew(self, rse: str) -> bool:
        """Extend our lease; False (and forgotten) when another instance took it."""
        with self._lock:
            epoch = self._held.get(rse)
        if epoch is None:
            return False
        now = time.time()
        res = with_retry(lambda: self.coll.update_one({"_id": rse, "owner": self.owner, "epoch": epoch},
                                                      {"$set": {"expires": now + self.ttl_s, "renewed": now}}),
                         f"renew lease {rse}")
        if res.matched_count == 0:
            log.error("lease on %s lost to another instance", rse)
            with self._lock:
                self._held.pop(rse, None)
            return False
        return True

    def check(self, rse: str) -> None:
        """Fencing before an irreversible step: renew now, or raise LeaseLost."""
        if not self.renew(rse):
            raise LeaseLost(f"lease on {rse} is no longer held by {self.owner}")

    def release(self, rse: str, done_slot: Optional[int] = None) -> None:
        """Give the lease back; `done_slot` marks the RSE done for that cycle."""
        with self._lock:
            epoch = self._held.pop(rse, None)
        if epoch is None:
            return
        update: dict[str, Any] = {"owner": None, "expires": 0.0, "released": time.time()}
        if done_slot is not None:
            update["done_slot"] = done_slot
        with_retry(lambda: self.coll.update_one({"_id": rse, "owner": self.owner, "epoch": epoch},
                                                {"$set": update}), f"release lease {rse}")

    def held(self) -> list[str]:
        with self._lock:
            return sorted(self._held)

    def start_heartbeat(self) -> None:
        """Renew every held lease each ttl/3 seconds in a daemon thread."""
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._beat, name="lease-heartbeat", daemon=True)
        self._thread.start()

    def stop_heartbeat(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
            self._thread = None

    def _beat(self) -> None:
        while not self._stop.wait(self.ttl_s / 3):
            for rse in self.held():
                try:
                    self.renew(rse)
                except Exception:  # a failed renewal is retried next beat; expiry is the safety net
                    log.exception("renewing lease on %s", rse)
