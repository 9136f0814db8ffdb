"""The ledger's database handle and collections, with the look-ups every part of the ledger shares."""
from __future__ import annotations

import time
from typing import Any, Optional, Sequence

from pymongo import ASCENDING, InsertOne, errors
from pymongo.collection import Collection
from pymongo.database import Database

from MSUnmerged.config import EVENTS_KEPT
from MSUnmerged.ledger import fences
from MSUnmerged.ledger.retry import with_retry
from MSUnmerged.statemachine import RSEState

BATCH = 10_000
BUCKET_BATCH = 500  # buckets per write or window (each up to PACK_NAMES files, or a job's files of one directory)
# Files per insert of a plan's buckets: serve builds the next batch while the database holds this one whole.
RECORD_BATCH_FILES = 100_000


def span(first: str, last: str) -> list[str]:
    """A job's `span`: every _id of its records (its files, and its buckets for a round-1 job) lies in
    [first, last], so the job's pages read only that range."""
    return [first, last]


def write_ignoring_duplicates(coll: Collection, ops: list[Any]) -> int:
    """Documents inserted, upserted or modified; duplicate keys (a record already there) are skipped."""
    def write() -> int:
        try:
            res = coll.bulk_write(ops, ordered=False).bulk_api_result
        except errors.BulkWriteError as exc:
            other = [e for e in exc.details.get("writeErrors", []) if e.get("code") != 11000]
            if other or exc.details.get("writeConcernErrors"):
                raise
            res = exc.details
        return sum(int(res.get(k) or 0) for k in ("nInserted", "nUpserted", "nModified"))
    return with_retry(write, f"write to {coll.name}") if ops else 0


def state_update(state: str, reason: str = "", detail: str = "", **fields: Any) -> dict[str, Any]:
    """The update (upserting) of an RSE document that sets its state with the reason, `fields` with it; a skip or
    failure is also kept in `events`."""
    now = time.time()
    update: dict[str, Any] = {"$set": {"state": state, "reason": reason, "detail": detail, "updated": now, **fields},
                              "$setOnInsert": {"created": now}}
    if reason:
        event = {"at": now, "state": state, "reason": reason, "detail": detail[:2000]}
        update["$push"] = {"events": {"$each": [event], "$slice": -EVENTS_KEPT}}
    return update


def with_state(fields: dict[str, Any], state: Optional[dict[str, Any]]) -> tuple[dict[str, Any], bool]:
    """An update that `$set`s `fields` of an RSE document, with `state` (a `state_update`) in the same write when
    given; and whether it upserts (a state does)."""
    if state is None:
        return {"$set": fields}, False
    return {**state, "$set": {**state["$set"], **fields}}, True


def insert_ignoring_duplicates(coll: Collection, docs: list[dict[str, Any]]) -> None:
    if docs:
        write_ignoring_duplicates(coll, [InsertOne(d) for d in docs])


class LedgerBase:
    """The database, its collections (see store.py) and the look-ups every part shares (each part holds this one
    object): an RSE's document and state, a generation's entry, a job and the jobs in some states."""

    def __init__(self, db: Database, generations_kept: int = 3, cycles_kept_days: float = 30.0) -> None:
        self.db = db
        self.generations_kept = generations_kept
        self.cycles_kept_days = cycles_kept_days
        self.rses: Collection = db["rses"]
        self.buckets: Collection = db["buckets"]
        self.files: Collection = db["files"]  # rows
        self.dirs: Collection = db["dirs"]
        self.jobs: Collection = db["jobs"]
        self.cycles: Collection = db["cycles"]
        self.meta: Collection = db["meta"]
        self.fences = fences.FenceCache(db["fences"])

    def rse(self, rse: str) -> dict[str, Any]:
        return with_retry(lambda: self.rses.find_one({"_id": rse}), f"read rse {rse}") or {}

    def set_rse_state(self, rse: str, state: str, reason: str = "", detail: str = "",
                      **fields: Any) -> None:
        """Set the RSE's state with the reason; a skip or failure is also kept in `events`."""
        update = state_update(state, reason, detail, **fields)
        with_retry(lambda: self.rses.update_one({"_id": rse}, update, upsert=True), f"set state {rse}")

    def set_jobs_state(self, rse: str, live: int, detail: str) -> None:
        """An RSE working through its jobs (running or planned) after the top-up between cycles: `running` while
        `live` jobs are in the batch system, `planned` once none is (as a cycle leaves it), `detail` saying so."""
        state = RSEState.RUNNING if live else RSEState.PLANNED
        with_retry(lambda: self.rses.update_one(
            {"_id": rse, "state": {"$in": [RSEState.RUNNING.value, RSEState.PLANNED.value]}},
            {"$set": {"state": state.value, "detail": detail, "updated": time.time()}}), f"state of {rse}")

    def trim_events(self) -> int:
        """RSE documents written with more than EVENTS_KEPT events (older code kept 50) cut to their last EVENTS_KEPT
        (at start-up); returns how many."""
        more = {f"events.{EVENTS_KEPT}": {"$exists": True}}
        cut = {"$push": {"events": {"$each": [], "$slice": -EVENTS_KEPT}}}
        return with_retry(lambda: self.rses.update_many(more, cut), "trim events").modified_count

    def generation_entry(self, rse: str, generation: float) -> dict[str, Any]:
        """The kept generation's entry of the RSE document ({} when there is none)."""
        return next((g for g in self.rse(rse).get("generations", []) if g["gen"] == generation), {})

    def jobs_in(self, rse: str, states: Sequence[str], generation: Optional[float] = None) -> list[dict[str, Any]]:
        flt: dict[str, Any] = {"rse": rse, "state": {"$in": list(states)}}
        if generation is not None:
            flt["gen"] = generation
        return with_retry(lambda: list(self.jobs.find(flt).sort("_id", ASCENDING)), f"jobs of {rse}")

    def next_round(self, rse: str, generation: float) -> int:
        """The round a new job of the generation takes: one after the highest of its jobs (1 when it has none)."""
        rounds = with_retry(lambda: list(self.jobs.find({"rse": rse, "gen": generation}, {"round": 1})), "rounds")
        return 1 + max((j.get("round", 1) for j in rounds), default=0)

    def rses_with_jobs(self, states: Sequence[str]) -> set[str]:
        """The RSEs that have jobs in these states (any generation)."""
        flt = {"state": {"$in": list(states)}}
        return set(with_retry(lambda: self.jobs.distinct("rse", flt), "RSEs with jobs"))

    def job(self, job_id_: str) -> dict[str, Any]:
        return with_retry(lambda: self.jobs.find_one({"_id": job_id_}), f"job {job_id_}") or {}
