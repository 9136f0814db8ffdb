"""Polling cycles: their documents, the `meta` document naming the latest and the last good one, pruning."""
from __future__ import annotations

import time
from typing import Any, Mapping, Optional, Sequence

from pymongo import ASCENDING, DESCENDING

from MSUnmerged.ledger.base import LedgerBase
from MSUnmerged.ledger.history import History
from MSUnmerged.ledger.retry import with_retry

# The `meta` document naming the latest cycles and the last good one, so that the status page reads a few
# cycles by _id instead of sorting them all (SecantusDB reads every match before a limit).
CYCLES_META, RECENT_CYCLES = "cycles", 50


class Cycles:
    """A cycle started, its RSEs' results, its end; the latest cycles, the last good one and the first."""

    def __init__(self, base: LedgerBase, history: History) -> None:
        self.base = base
        self.history = history

    def start_cycle(self, instance: str, slot: int, rses: Sequence[str]) -> str:
        cid = f"{instance}:{slot}:{time.time():.3f}"
        with_retry(lambda: self.base.cycles.update_one({"_id": cid}, {"$setOnInsert": {
            "instance": instance, "slot": slot, "started": time.time(), "rses": list(rses), "results": {}}},
            upsert=True), "start cycle")
        with_retry(lambda: self.base.meta.update_one(
            {"_id": CYCLES_META}, {"$push": {"recent": {"$each": [cid], "$slice": -RECENT_CYCLES}},
                                   "$min": {"first_started": time.time()}}, upsert=True),
            "recent cycles")
        return cid

    def record_cycle_result(self, cycle_id: str, rse: str, result: Mapping[str, Any]) -> None:
        # RSE names hold no dots (Rucio naming), so they are safe as field names.
        with_retry(lambda: self.base.cycles.update_one({"_id": cycle_id}, {"$set": {f"results.{rse}": dict(result)}}),
                   "cycle result")

    def end_cycle(self, cycle_id: str, failures: Sequence[Mapping[str, Any]] = (), **fields: Any) -> None:
        """The cycle is over; `failures` ({source, reason, detail, rse}) say what went wrong. A cycle is `ok`
        when nothing failed; its day's aggregate counts it (history)."""
        ok, finished = not failures, time.time()
        doc = with_retry(lambda: self.base.cycles.find_one_and_update(
            {"_id": cycle_id}, {"$set": {"finished": finished, "failures": list(failures), "ok": ok, **fields}}),
            "end cycle") or {}
        started = doc.get("started") or finished
        self.history.record_cycle(cycle_id, started, ok, failures)
        if ok:
            good = {"_id": cycle_id, "started": started, "finished": finished, "ok": True}
            newer = {"$or": [{"last_good": {"$exists": False}}, {"last_good.started": {"$lt": started}}]}
            with_retry(lambda: self.base.meta.update_one({"_id": CYCLES_META, **newer}, {"$set": {"last_good": good}}),
                       "last good cycle")
        oldest = finished - self.base.cycles_kept_days * 86400
        with_retry(lambda: self.base.cycles.delete_many({"started": {"$lt": oldest}}), "prune cycles")

    def cycles_meta(self) -> dict[str, Any]:
        """The `meta` document of the cycles ({} before any): read once, it can be handed to the reads below."""
        return with_retry(lambda: self.base.meta.find_one({"_id": CYCLES_META}), "cycles meta") or {}

    def last_good_cycle(self, fields: Optional[Mapping[str, Any]] = None,
                        meta: Optional[Mapping[str, Any]] = None) -> dict[str, Any]:
        """The most recent cycle that finished with no failure ({} when none); once pruned, what `meta` kept of
        it (_id, started, finished). `fields`: a projection (the fields a caller reads); when `meta` keeps them
        all, its copy is the answer (end_cycle writes the same values in both). `meta`: cycles_meta if read."""
        good = (self.cycles_meta() if meta is None else meta).get("last_good")
        if good:
            if fields is not None and set(fields) <= set(good):
                return {"_id": good["_id"], **{k: good[k] for k in fields}}
            return with_retry(lambda: self.base.cycles.find_one({"_id": good["_id"]}, fields),
                              "last good cycle") or good
        # A ledger from before the meta document: sorted on the server.
        docs = with_retry(lambda: list(self.base.cycles.find({"ok": True}, fields).sort("started", DESCENDING)
                                       .limit(1)), "last good cycle")
        return docs[0] if docs else {}

    def first_cycle_started(self, meta: Optional[Mapping[str, Any]] = None) -> Optional[float]:
        """When the ledger's first polling cycle started (None before any): the failing-cycles alert counts its
        delay from there until a cycle succeeds. `meta`: cycles_meta if read."""
        first = (self.cycles_meta() if meta is None else meta).get("first_started")
        if first is None:  # a ledger from before the meta field: its oldest kept cycle
            docs = with_retry(lambda: list(self.base.cycles.find({}, {"started": 1}).sort("started", ASCENDING)
                                           .limit(1)), "first cycle")
            first = docs[0].get("started") if docs else None
        return first

    def query_cycles(self, limit: int = 20, fields: Optional[Mapping[str, Any]] = None,
                     meta: Optional[Mapping[str, Any]] = None,
                     finished: Optional[dict[str, dict[str, Any]]] = None) -> list[dict[str, Any]]:
        """The latest `limit` cycles, newest first; `fields`: a projection (the fields a caller reads); `meta`:
        cycles_meta if read. `finished`: the caller's cache of finished cycles by _id (with these `fields`, none of
        them `results`: what end_cycle wrote never changes after), read from and filled; it keeps the recent ones."""
        recent = (self.cycles_meta() if meta is None else meta).get("recent")
        if recent and limit <= len(recent):
            # A few more than asked: instances starting together may have pushed out of order.
            ids = recent[-(limit + 5):]
            cache = {} if finished is None else finished
            known = {i: dict(d) for i in ids if (d := cache.get(i)) is not None}  # copies: callers change theirs
            rest = [i for i in ids if i not in known]
            docs = list(known.values())
            if rest:
                docs += with_retry(lambda: list(self.base.cycles.find({"_id": {"$in": rest}}, fields)), "recent cycles")
            # Single dict operations only: request threads may share the cache.
            cache.update({d["_id"]: dict(d) for d in docs if d.get("finished") is not None})
            for old in set(cache) - set(ids):
                cache.pop(old, None)
            if len(docs) >= limit:
                return sorted(docs, key=lambda d: d["started"], reverse=True)[:limit]
        # Fewer recorded (pruned, or a ledger from before the meta document): sorted on the server.
        return with_retry(lambda: list(self.base.cycles.find({}, fields).sort("started", DESCENDING).limit(limit)),
                          "cycles")
