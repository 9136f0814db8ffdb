"""The ledger: every planned file's fate, every job, every RSE's state and every cycle, in MongoDB.

Collections (see docs/ledger.md):
  rses    one document per RSE: state, reason, current generation, counters, last events
  files   one per (RSE, generation, LFN); _id "<rse>|<generation>|<lfn>" makes re-recording idempotent
          and serves generation and directory-prefix queries as _id ranges without extra indexes
  dirs    one per (RSE, generation, directory) a job reported on; _id "<rse>|<generation>|<dir>"
  jobs    one per cleanup job; _id "<rse>:<generation>:<round>-<n>"
  cycles  one per polling cycle of an instance
  leases  see leases.py

A file's `state` changes when its job's outcome is known; whether the job is submitted is on the
job document. That is one write per job instead of one per file (1M single-file updates take
minutes on the embedded server).
"""
from __future__ import annotations

import os
import time
import uuid
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping, Optional, Sequence

from pymongo import ASCENDING, DESCENDING, InsertOne, ReturnDocument, UpdateMany, UpdateOne, errors
from pymongo.collection import Collection
from pymongo.database import Database

from MSUnmerged.config import PlannerConfig
from MSUnmerged.guards import check_plan_lines, split_lines
from MSUnmerged.jobs.backend import JobState
from MSUnmerged.jobs.spec import CleanupJob
from MSUnmerged.ledger import history
from MSUnmerged.ledger.retry import LedgerError, with_retry
from MSUnmerged.lfn import PrefixSet
from MSUnmerged.planner import Plan
from MSUnmerged.seal import DIRS_NAME, JOBS_DIR, Seal
from MSUnmerged.statemachine import RSEState
from MSUnmerged.worker.report import DIR_OUTCOMES, EXPECTED_DIR_REASONS

# File states.
PLANNED = "planned"  # in a job, outcome not known yet (see the job's state)
DELETED = "deleted"
WOULD_DELETE = "would_delete"  # dry run: the job found the file and left it
MISSING = "missing"  # already gone at the site
FAILED = "failed"  # see error_class / error; retried up to the attempt limit
UNKNOWN = "unknown"  # the job ended without reporting on this file; retried
SKIPPED_PROTECTED = "skipped_protected"  # became protected after planning: dropped, never deleted
FILE_STATES = (PLANNED, DELETED, WOULD_DELETE, MISSING, FAILED, UNKNOWN, SKIPPED_PROTECTED)
OUTCOME_STATES = frozenset(FILE_STATES) - {PLANNED}
RETRIABLE = (FAILED, UNKNOWN)
NOT_DELETED = (PLANNED, *RETRIABLE, WOULD_DELETE)  # may still be deleted: dropped when they become protected

# Directory states are the worker's directory outcomes. Several jobs may report on one directory (a
# shared parent): its record keeps the outcome of highest rank, so collection order does not matter
# (removed outranks missing: a job running beside the one that removed it finds it gone).
DIR_REMOVED = "removed"
DIR_REFUSED = "refused"
DIR_RANK = {"dry_run": 0, "not_attempted": 1, "not_empty": 2, "timeout": 3, "storage_error": 3,
            "permission_denied": 3, "auth_failed": 3, DIR_REFUSED: 4, "missing": 5, DIR_REMOVED: 6}
assert set(DIR_RANK) == set(DIR_OUTCOMES)
DIR_ERRORS = ("permission_denied", "timeout", "storage_error", "auth_failed")

# Job states: "planned" before intent, then jobs.backend.JobState values.
JOB_PLANNED = "planned"
JOB_SUBMITTING = "submitting"
LIVE_JOB_STATES = ("submitting", "queued", "running", "held")
BACKEND_JOB_STATES = ("queued", "running", "held")

EVENTS_KEPT = 50
BATCH = 10_000


def gen_key(generation: float) -> str:
    """The generation (ConMon end_time) as it appears in ids."""
    return f"{float(generation):.3f}"


def file_id(rse: str, generation: float, lfn: str) -> str:
    return f"{rse}|{gen_key(generation)}|{lfn}"


def job_id(rse: str, generation: float, round_: int, n: int) -> str:
    return f"{rse}:{gen_key(generation)}:{round_}-{n:06d}"


def _prefix_range(prefix: str) -> dict[str, str]:
    # Every id starting with `prefix` sorts between it and prefix + U+10FFFF.
    return {"$gte": prefix, "$lt": prefix + "\U0010ffff"}


class Ledger:
    """All reads and writes of the ledger; writes are idempotent and retried on transient errors."""

    def __init__(self, db: Database, generations_kept: int = 3) -> None:
        self.db = db
        self.generations_kept = generations_kept
        self.rses: Collection = db["rses"]
        self.files: Collection = db["files"]
        self.dirs: Collection = db["dirs"]
        self.jobs: Collection = db["jobs"]
        self.cycles: Collection = db["cycles"]

    def instance_id(self) -> str:
        """This ledger's id, made once and kept in the database: batch jobs carry it, so that services with
        different ledgers sharing a batch system never take each other's jobs (job ids repeat across ledgers)."""
        doc = with_retry(lambda: self.db["meta"].find_one_and_update(
            {"_id": "ledger"}, {"$setOnInsert": {"instance_id": uuid.uuid4().hex, "created": time.time()}},
            upsert=True, return_document=ReturnDocument.AFTER), "ledger id")
        return str(doc["instance_id"])

    def ensure_indexes(self) -> None:
        """Indexes for the operators' questions; each costs ingest time, so only these.

        Every per-file page is one of these indexes' leading fields plus a range on its trailing
        `_id`, so a page is an index range scan in `_id` order (see query_files). (rse, gen, _id)
        serves directory prefixes: SecantusDB does not use the `_id` index for ranges.
        """
        def make() -> None:
            for old in ("rse_1_gen_1_state_1", "job_1"):  # prefixes of the indexes below
                if old in self.files.index_information():
                    self.files.drop_index(old)
            for coll in (self.files, self.dirs):  # both are queried by query_records
                coll.create_index([("rse", ASCENDING), ("gen", ASCENDING), ("state", ASCENDING), ("_id", ASCENDING)])
                coll.create_index([("rse", ASCENDING), ("gen", ASCENDING), ("state", ASCENDING),
                                   ("error_class", ASCENDING), ("_id", ASCENDING)])
                coll.create_index([("rse", ASCENDING), ("gen", ASCENDING), ("_id", ASCENDING)])
                coll.create_index([("job", ASCENDING), ("_id", ASCENDING)])
            self.jobs.create_index([("rse", ASCENDING), ("gen", ASCENDING), ("state", ASCENDING)])
            self.jobs.create_index([("state", ASCENDING)])
            self.cycles.create_index([("started", DESCENDING)])
        with_retry(make, "create indexes")

    # -- RSE documents ---------------------------------------------------------------------------

    def rse(self, rse: str) -> dict[str, Any]:
        return with_retry(lambda: self.rses.find_one({"_id": rse}), f"read rse {rse}") or {}

    def set_rse_state(self, rse: str, state: str, reason: str = "", detail: str = "",
                      **fields: Any) -> None:
        """Set the RSE's state with the reason; a skip or failure is also kept in `events`."""
        now = time.time()
        update: dict[str, Any] = {"$set": {"state": state, "reason": reason, "detail": detail,
                                           "updated": now, **fields},
                                  "$setOnInsert": {"created": now}}
        if reason:
            event = {"at": now, "state": state, "reason": reason, "detail": detail[:2000]}
            update["$push"] = {"events": {"$each": [event], "$slice": -EVENTS_KEPT}}
        with_retry(lambda: self.rses.update_one({"_id": rse}, update, upsert=True), f"set state {rse}")

    # -- plans -------------------------------------------------------------------------------------

    def record_plan(self, plan_dir: os.PathLike | str, plan: Plan, generation: float,
                    baseline_count: Optional[int] = None, sealed: Optional[Seal] = None,
                    max_lfn_length: int = PlannerConfig.max_lfn_length, scan_started: Optional[float] = None) -> int:
        """Record a plan's files (state planned, each in its job) and jobs; returns files recorded.
        `scan_started` (the scan's start_time) is kept on the generation entry for the jobs' workers.

        `baseline_count` is what this generation contributes to the shrink guard's baseline
        (protected_baseline); `sealed` the plan's seal, kept on the generation's entry so that the
        same plan is recognised and dirs.txt is checked before each use.
        Safe to repeat after a crash: the same ids are inserted again and duplicates are ignored,
        so existing records (which may have moved on) are kept. Repeat it with the SAME plan
        directory: `recording` on the RSE document says which generation was being recorded.
        """
        if plan.guard:
            raise ValueError(f"plan for {plan.rse} was refused by guard {plan.guard}: nothing to record")
        rse, plan_dir = plan.rse, Path(plan_dir)
        now = time.time()
        entry = {"gen": generation, "plan_dir": str(plan_dir), "planned": plan.created or now,
                 "files_total": plan.files_total, "to_delete": plan.files_to_delete,
                 "protected": plan.files_protected, "excluded": plan.files_excluded,
                 "invalid": plan.files_invalid, "dirs_removable": plan.dirs_removable, "jobs": plan.jobs,
                 "protected_count": plan.protected_count, "dropped_protected": 0, "scan_started": scan_started,
                 "baseline_count": plan.protected_count if baseline_count is None else baseline_count}
        if sealed is not None:
            entry.update(seal=sealed.digest, dirs_sha256=sealed.files[DIRS_NAME]["sha256"])
        with_retry(lambda: self.rses.update_one(
            {"_id": rse}, {"$set": {"recording": generation, "updated": now},
                           "$setOnInsert": {"created": now, "state": RSEState.NEW}}, upsert=True), "mark recording")
        with_retry(lambda: self.rses.update_one({"_id": rse, "generations.gen": {"$ne": generation}},
                                                {"$push": {"generations": entry}}), "add generation")
        n = self._insert_files(rse, generation, plan_dir, plan.job_files, max_lfn_length, sealed)
        jobs = [{"_id": job_id(rse, generation, 1, i), "rse": rse, "gen": generation, "round": 1, "n": i,
                 "state": JOB_PLANNED, "files": size, "plan_file": name, "created": now}
                for i, (name, size) in enumerate(zip(plan.job_files, plan.job_sizes), 1)]
        self._insert_ignoring_duplicates(self.jobs, jobs)
        with_retry(lambda: self.rses.update_one(
            {"_id": rse}, {"$set": {"generation": generation, "state": RSEState.PLANNED,
                                    "reason": "", "detail": "", "updated": time.time()},
                           "$unset": {"recording": ""}}), "finish recording")
        self.prune_generations(rse)
        baseline = self.protected_baseline(rse)
        with_retry(lambda: self.rses.update_one({"_id": rse}, {"$set": {"protected_count": baseline}}), "baseline")
        return n

    def protected_baseline(self, rse: str) -> Optional[int]:
        """The shrink guard's baseline: the largest protected-list size among the RSE's kept generations
        (None before the first plan). Only the ledger's own records count, never a plan's summary."""
        counts = [g.get("baseline_count", g.get("protected_count")) for g in self.rse(rse).get("generations", [])]
        return max((c for c in counts if isinstance(c, int) and not isinstance(c, bool)), default=None)

    def generation_entry(self, rse: str, generation: float) -> dict[str, Any]:
        """The kept generation's entry of the RSE document ({} when there is none)."""
        return next((g for g in self.rse(rse).get("generations", []) if g["gen"] == generation), {})

    def _insert_files(self, rse: str, generation: float, plan_dir: Path, job_files: Sequence[str],
                      max_lfn_length: int, sealed: Optional[Seal]) -> int:
        """Every line of the jobs files, read as bytes and split on b"\\n" only. A file that differs from
        its seal, or holds a line that is not exactly a canonical LFN below /store/unmerged, is refused
        (GuardTripped) before any of it is recorded."""
        prefix = f"{rse}|{gen_key(generation)}|"
        now = time.time()
        batch: list[dict[str, Any]] = []
        n = 0
        for i, name in enumerate(job_files, 1):
            jid = job_id(rse, generation, 1, i)
            data = (plan_dir / JOBS_DIR / name).read_bytes()
            if sealed is not None:
                sealed.check_file(f"{JOBS_DIR}/{name}", data)
            check_plan_lines(data, max_lfn_length, f"{JOBS_DIR}/{name}")
            for raw in split_lines(data):
                lfn = raw.decode("utf-8", errors="surrogateescape")
                batch.append({"_id": prefix + lfn, "rse": rse, "gen": generation, "lfn": lfn,
                              "dir": lfn[:lfn.rfind("/")], "state": PLANNED, "job": jid, "attempts": 1,
                              "t": now})
                if len(batch) >= BATCH:
                    n += len(batch)
                    self._insert_ignoring_duplicates(self.files, batch)
                    batch = []
        if batch:
            n += len(batch)
            self._insert_ignoring_duplicates(self.files, batch)
        return n

    @classmethod
    def _insert_ignoring_duplicates(cls, coll: Collection, docs: list[dict[str, Any]]) -> None:
        if docs:
            cls._write_ignoring_duplicates(coll, [InsertOne(d) for d in docs])

    @staticmethod
    def _write_ignoring_duplicates(coll: Collection, ops: list[Any]) -> None:
        def write() -> None:
            try:
                coll.bulk_write(ops, ordered=False)
            except errors.BulkWriteError as exc:
                other = [e for e in exc.details.get("writeErrors", []) if e.get("code") != 11000]
                if other or exc.details.get("writeConcernErrors"):
                    raise
        with_retry(write, f"write to {coll.name}")

    def drop_protected(self, rse: str, generation: float, protection: PrefixSet, job: Optional[str] = None) -> int:
        """Files not yet deleted (of one job, if given) that the current protected list covers become
        skipped_protected."""
        flt: dict[str, Any] = {"rse": rse, "gen": generation, "state": {"$in": list(NOT_DELETED)}}
        if job is not None:
            flt["job"] = job
        ids = [d["_id"] for d in with_retry(lambda: list(self.files.find(flt, {"lfn": 1})), "scan protection")
               if protection.covers(d["lfn"].encode("utf-8", "surrogateescape"))]
        for start in range(0, len(ids), BATCH):
            chunk = ids[start:start + BATCH]
            with_retry(lambda: self.files.update_many(
                {"_id": {"$in": chunk}, "state": {"$in": list(NOT_DELETED)}},
                {"$set": {"state": SKIPPED_PROTECTED, "error_class": "protected_since_planning",
                          "t": time.time()}}), "drop protected")
        if ids:
            with_retry(lambda: self.rses.update_one({"_id": rse, "generations.gen": generation},
                                                    {"$inc": {"generations.$.dropped_protected": len(ids)}}),
                       "count dropped")
        return len(ids)

    def prune_generations(self, rse: str) -> list[float]:
        """Delete file and job records of generations older than the last `generations_kept`."""
        doc = self.rse(rse)
        gens = sorted(g["gen"] for g in doc.get("generations", []))
        old = gens[:-self.generations_kept]
        if not old:
            return []
        with_retry(lambda: self.files.delete_many({"rse": rse, "gen": {"$in": old}}), "prune files")
        with_retry(lambda: self.dirs.delete_many({"rse": rse, "gen": {"$in": old}}), "prune dirs")
        with_retry(lambda: self.jobs.delete_many({"rse": rse, "gen": {"$in": old},
                                                  "state": {"$nin": list(LIVE_JOB_STATES)}}), "prune jobs")
        with_retry(lambda: self.rses.update_one({"_id": rse}, {"$pull": {"generations": {"gen": {"$in": old}}}}),
                   "prune generations")
        return old

    # -- jobs --------------------------------------------------------------------------------------

    def jobs_in(self, rse: str, states: Sequence[str], generation: Optional[float] = None) -> list[dict[str, Any]]:
        flt: dict[str, Any] = {"rse": rse, "state": {"$in": list(states)}}
        if generation is not None:
            flt["gen"] = generation
        return with_retry(lambda: list(self.jobs.find(flt).sort("_id", ASCENDING)), f"jobs of {rse}")

    def job(self, job_id_: str) -> dict[str, Any]:
        return with_retry(lambda: self.jobs.find_one({"_id": job_id_}), f"job {job_id_}") or {}

    def job_lfns(self, job_id_: str, states: Optional[Sequence[str]] = (PLANNED,)) -> list[str]:
        """The files of a job in these states (default: still to work on; None: all), sorted."""
        flt: dict[str, Any] = {"job": job_id_}
        if states is not None:
            flt["state"] = {"$in": list(states)}
        docs = with_retry(lambda: list(self.files.find(flt, {"lfn": 1})), f"files of {job_id_}")
        return sorted(d["lfn"] for d in docs)

    def record_job_intent(self, jobs: Sequence[CleanupJob], backend: str = "") -> None:
        """Before submitting: the jobs go from planned to submitting (with site and backend)."""
        now = time.time()
        ops = [UpdateOne({"_id": j.job_id, "state": JOB_PLANNED},
                         {"$set": {"state": JOB_SUBMITTING, "site": j.site, "backend": backend,
                                   "files": len(j.step.lfns), "dry_run": j.step.dry_run, "intent_at": now}})
               for j in jobs]
        if ops:
            with_retry(lambda: self.jobs.bulk_write(ops, ordered=False), "record intent")

    def mark_submitted(self, job_id_: str, batch_id: str) -> None:
        """The batch system accepted the job (or reconciliation found it there)."""
        with_retry(lambda: self.jobs.update_one(
            {"_id": job_id_, "state": JOB_SUBMITTING},
            {"$set": {"state": "queued", "batch_id": batch_id, "submitted_at": time.time()}}), "mark submitted")

    def set_job_state(self, job_id_: str, state: str, reason: str = "") -> None:
        """A live job's state as the backend reports it (queued, running, held)."""
        with_retry(lambda: self.jobs.update_one({"_id": job_id_, "state": {"$in": list(BACKEND_JOB_STATES)}},
                                                {"$set": {"state": state, "reason": reason,
                                                          "polled_at": time.time()}}), "set job state")

    def record_outcomes(self, job_id_: str, outcomes: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
        """Sink for the collector: per-file outcomes of one job, as
        {"lfn", "state" (one of OUTCOME_STATES), "error_class"?, "error"?, "size"?}.

        Only files still assigned to this job change (a late report never overwrites a retry);
        repeating the call gives the same records. Returns the job's outcome summary.
        """
        job = self.job(job_id_)
        if not job:
            raise LedgerError("unknown_job", f"no job {job_id_} in the ledger")
        prefix = f"{job['rse']}|{gen_key(job['gen'])}|"
        now = time.time()
        grouped: dict[tuple[str, str, str], list[str]] = {}
        ops: list[Any] = []
        summary: dict[str, Any] = {"states": {}, "failed_by_class": {}, "bytes_freed": 0}
        for o in outcomes:
            state = o.get("state")
            if state not in OUTCOME_STATES:
                raise LedgerError("bad_outcome", f"job {job_id_}: unknown file state {state!r} for {o.get('lfn')}")
            cls, err = str(o.get("error_class") or ""), str(o.get("error") or "")[:1000]
            summary["states"][state] = summary["states"].get(state, 0) + 1
            if state == FAILED:
                summary["failed_by_class"][cls] = summary["failed_by_class"].get(cls, 0) + 1
            size = o.get("size")
            if isinstance(size, int) and not isinstance(size, bool) and size >= 0:
                if state == DELETED:
                    summary["bytes_freed"] += size
                ops.append(UpdateOne({"_id": prefix + o["lfn"], "job": job_id_},
                                     {"$set": {"state": state, "error_class": cls, "error": err, "size": size,
                                               "t": now}}))
            else:
                grouped.setdefault((state, cls, err), []).append(prefix + o["lfn"])
        for (state, cls, err), ids in grouped.items():
            for start in range(0, len(ids), BATCH):
                ops.append(UpdateMany({"_id": {"$in": ids[start:start + BATCH]}, "job": job_id_},
                                      {"$set": {"state": state, "error_class": cls, "error": err, "t": now}}))
        if ops:
            with_retry(lambda: self.files.bulk_write(ops, ordered=False), f"outcomes of {job_id_}")
        day = job.get("day") or history.day_of(now)  # a repeated call counts on the first call's day
        with_retry(lambda: self.jobs.update_one({"_id": job_id_}, {"$set": {"summary": summary, "day": day}}),
                   "job summary")
        history.record_job(self.db, job["rse"], job_id_, day, summary)
        return summary

    def record_dirs(self, job_id_: str, outcomes: Iterable[Mapping[str, Any]]) -> int:
        """Sink for the collector: directory outcomes of one job, as {"dir", "state" (a DIR_RANK key),
        "error_class"?, "error"?, "pfn"?}. A directory keeps the outcome of highest rank any job reported
        (equal rank: the latest); repeating the call gives the same records. Returns how many were given."""
        job = self.job(job_id_)
        if not job:
            raise LedgerError("unknown_job", f"no job {job_id_} in the ledger")
        prefix = f"{job['rse']}|{gen_key(job['gen'])}|"
        now = time.time()
        ops = []
        for o in outcomes:
            state = o.get("state")
            if state not in DIR_RANK:
                raise LedgerError("bad_outcome", f"job {job_id_}: unknown directory state {state!r} for {o.get('dir')}")
            doc = {"rse": job["rse"], "gen": job["gen"], "dir": o["dir"], "state": state, "rank": DIR_RANK[state],
                   "error_class": str(o.get("error_class") or ""), "error": str(o.get("error") or "")[:1000],
                   "pfn": o.get("pfn"), "job": job_id_, "t": now}
            # A higher-ranked record makes the upsert's insert collide: a duplicate key, ignored below.
            ops.append(UpdateOne({"_id": prefix + o["dir"], "rank": {"$lte": doc["rank"]}}, {"$set": doc}, upsert=True))
        if ops:
            self._write_ignoring_duplicates(self.dirs, ops)
        return len(ops)

    def close_job(self, job_id_: str, state: str, reason: str = "", error_class: str = "no_report",
                  **facts: Any) -> int:
        """The job is over: files it did not report on become unknown (retried) with `error_class`;
        returns how many. `facts`: the batch system's own words (exit_code, batch_reason) kept on the job."""
        now = time.time()
        res = with_retry(lambda: self.files.update_many(
            {"job": job_id_, "state": PLANNED},
            {"$set": {"state": UNKNOWN, "error_class": error_class, "error": reason[:1000], "t": now}}),
            f"close {job_id_}")
        job = with_retry(lambda: self.jobs.find_one_and_update({"_id": job_id_}, {"$set": {
            "state": state, "reason": reason, "finished_at": now, **facts}}), f"close {job_id_}") or {}
        if job and res.modified_count and state != JobState.REMOVED.value:  # our own removal (revalidation) is no failure
            history.record_unreported(self.db, job["rse"], job_id_, job.get("day") or history.day_of(now),
                                      error_class, res.modified_count)
        return res.modified_count

    def new_round(self, rse: str, generation: float, max_attempts: int, files_per_job: int,
                  redo_dry_run: bool = False) -> list[str]:
        """Put retriable files (failed, unknown, fewer than `max_attempts` tries), and with `redo_dry_run` the
        files a dry run left (would_delete), into new planned jobs."""
        # A crash between creating a job and assigning its files leaves an empty planned job: drop it.
        for job in self.jobs_in(rse, [JOB_PLANNED], generation):
            if not with_retry(lambda: self.files.count_documents({"job": job["_id"]}, limit=1), "count"):
                with_retry(lambda: self.jobs.delete_one({"_id": job["_id"], "state": JOB_PLANNED}), "drop job")
        rounds = [j.get("round", 1) for j in with_retry(
            lambda: list(self.jobs.find({"rse": rse, "gen": generation}, {"round": 1})), "rounds")]
        round_ = max(rounds, default=0) + 1
        queries = [{"rse": rse, "gen": generation, "state": {"$in": list(RETRIABLE)}, "attempts": {"$lt": max_attempts}}]
        if redo_dry_run:
            queries.append({"rse": rse, "gen": generation, "state": WOULD_DELETE})
        ids = sorted(d["_id"] for q in queries
                     for d in with_retry(lambda: list(self.files.find(q, {"_id": 1})), "files for a new round"))
        states = [*RETRIABLE, WOULD_DELETE] if redo_dry_run else list(RETRIABLE)
        created = []
        for n, start in enumerate(range(0, len(ids), files_per_job), 1):
            chunk = ids[start:start + files_per_job]
            jid = job_id(rse, generation, round_, n)
            self._insert_ignoring_duplicates(self.jobs, [{
                "_id": jid, "rse": rse, "gen": generation, "round": round_, "n": n, "state": JOB_PLANNED,
                "files": len(chunk), "created": time.time()}])
            with_retry(lambda: self.files.update_many(
                {"_id": {"$in": chunk}, "state": {"$in": states}},
                {"$set": {"state": PLANNED, "job": jid, "attempts": round_, "t": time.time()}}), "assign retry")
            created.append(jid)
        return created

    # -- progress and counters -------------------------------------------------------------------

    def count_files(self, rse: str, generation: float, states: Sequence[str], **extra: Any) -> int:
        flt = {"rse": rse, "gen": generation, "state": {"$in": list(states)}, **extra}
        return with_retry(lambda: self.files.count_documents(flt), "count files")

    def refresh_counters(self, rse: str) -> dict[str, Any]:
        """Recompute the RSE's counters for its current generation from the records (idempotent)."""
        doc = self.rse(rse)
        gen = doc.get("generation")
        if gen is None:
            return {}
        entry = next((g for g in doc.get("generations", []) if g["gen"] == gen), {})
        by_state = {s: self.count_files(rse, gen, [s]) for s in FILE_STATES}
        failed_by_class = {r["_id"] or "unclassified": r["n"] for r in with_retry(lambda: list(self.files.aggregate([
            {"$match": {"rse": rse, "gen": gen, "state": FAILED}},
            {"$group": {"_id": "$error_class", "n": {"$sum": 1}}}])), "failed by class")}
        dirs = with_retry(lambda: list(self.dirs.aggregate([
            {"$match": {"rse": rse, "gen": gen}},
            {"$group": {"_id": {"state": "$state", "cls": "$error_class"}, "n": {"$sum": 1}}}])), "dirs by state")
        dirs_by_state: dict[str, int] = {}
        refused_by_reason: dict[str, int] = {}
        dirs_failed = 0  # not removed for a storage error or an unexpected refusal (not the plan's keep rules)
        for r in dirs:
            state, reason = r["_id"]["state"], r["_id"].get("cls") or ""
            dirs_by_state[state] = dirs_by_state.get(state, 0) + r["n"]
            if state == DIR_REFUSED:
                refused_by_reason[reason or "unclassified"] = refused_by_reason.get(reason or "unclassified", 0) + r["n"]
            if state in DIR_ERRORS or state == DIR_REFUSED and reason not in EXPECTED_DIR_REASONS:
                dirs_failed += r["n"]
        bytes_freed = sum(j.get("summary", {}).get("bytes_freed", 0) for j in with_retry(
            lambda: list(self.jobs.find({"rse": rse, "gen": gen}, {"summary.bytes_freed": 1})), "bytes"))
        counters = {"to_delete": entry.get("to_delete", 0), "pending": by_state[PLANNED],
                    "deleted": by_state[DELETED], "would_delete": by_state[WOULD_DELETE],
                    "missing": by_state[MISSING], "failed": by_state[FAILED], "unknown": by_state[UNKNOWN],
                    "failed_by_class": failed_by_class, "skipped_protected": by_state[SKIPPED_PROTECTED],
                    "protected": entry.get("protected", 0), "excluded": entry.get("excluded", 0),
                    "invalid": entry.get("invalid", {}), "dirs_removable": entry.get("dirs_removable", 0),
                    "bytes_freed": bytes_freed, "protected_count": entry.get("protected_count", 0),
                    "dirs_removed": dirs_by_state.get(DIR_REMOVED, 0), "dirs_refused": dirs_by_state.get(DIR_REFUSED, 0),
                    "dirs_failed": dirs_failed,
                    "dirs_by_state": dirs_by_state, "dirs_refused_by_reason": refused_by_reason}
        with_retry(lambda: self.rses.update_one({"_id": rse}, {"$set": {"counters": counters,
                                                                        "counted_at": time.time()}}), "counters")
        return counters

    # -- cycles ------------------------------------------------------------------------------------

    def start_cycle(self, instance: str, slot: int, rses: Sequence[str]) -> str:
        cid = f"{instance}:{slot}:{time.time():.3f}"
        with_retry(lambda: self.cycles.update_one({"_id": cid}, {"$setOnInsert": {
            "instance": instance, "slot": slot, "started": time.time(), "rses": list(rses), "results": {}}},
            upsert=True), "start cycle")
        return cid

    def record_cycle_result(self, cycle_id: str, rse: str, result: Mapping[str, Any]) -> None:
        # RSE names hold no dots (Rucio naming), so they are safe as field names.
        with_retry(lambda: self.cycles.update_one({"_id": cycle_id}, {"$set": {f"results.{rse}": dict(result)}}),
                   "cycle result")

    def end_cycle(self, cycle_id: str, failures: Sequence[Mapping[str, Any]] = (), **fields: Any) -> None:
        """The cycle is over; `failures` ({source, reason, detail, rse}) say what went wrong. A cycle is `ok`
        when nothing failed; its day's aggregate counts it (history)."""
        ok = not failures
        doc = with_retry(lambda: self.cycles.find_one_and_update(
            {"_id": cycle_id}, {"$set": {"finished": time.time(), "failures": list(failures), "ok": ok, **fields}}),
            "end cycle") or {}
        history.record_cycle(self.db, cycle_id, doc.get("started") or time.time(), ok, failures)

    def last_good_cycle(self) -> dict[str, Any]:
        """The most recent cycle that finished with no failure ({} when none)."""
        docs = with_retry(lambda: list(self.cycles.find({"ok": True}).sort("started", DESCENDING).limit(1)),
                          "last good cycle")
        return docs[0] if docs else {}

    # -- queries for the REST API and the CLI ------------------------------------------------------

    def rse_docs(self, rse: Optional[str] = None) -> list[dict[str, Any]]:
        flt = {"_id": rse} if rse else {}
        return with_retry(lambda: list(self.rses.find(flt).sort("_id", ASCENDING)), "rse docs")

    def query_files(self, rse: str, state: Optional[str] = None, job: Optional[str] = None,
                    dir_prefix: Optional[str] = None, generation: Optional[float] = None,
                    after: Optional[str] = None, limit: int = 100,
                    error_class: Optional[str] = None, dirs: bool = False) -> dict[str, Any]:
        """Files (dirs=True: directory records) of one RSE generation (default: current), by state, error
        class, job or path prefix.

        Paginated by _id: pass the answer's `next` as `after`. State "submitted" means planned
        files whose job is live in the batch system; an error class alone means failed files.
        """
        limit = max(1, min(limit, 10_000))
        if generation is None:
            generation = self.rse(rse).get("generation")
            if generation is None:
                return {"items": [], "next": None, "generation": None}
        if error_class is not None and state is None and not dirs:
            state = FAILED
        # Each filter is an index's leading fields (ensure_indexes) plus a range on its trailing _id,
        # with the indexed field first: SecantusDB picks indexes by the filter's exact field set,
        # else by its first indexable clause.
        flt: dict[str, Any]
        if state == "submitted":
            live = [j["_id"] for j in self.jobs_in(rse, LIVE_JOB_STATES, generation) if not job or j["_id"] == job]
            flt = {"job": {"$in": live}, "rse": rse, "gen": generation, "state": PLANNED}
        elif job:
            flt = {"job": job}
        else:
            flt = {"rse": rse, "gen": generation}
        if state and state != "submitted":
            flt["state"] = state
        if error_class is not None:
            flt["error_class"] = error_class
        id_range = _prefix_range(f"{rse}|{gen_key(generation)}|{dir_prefix}") if dir_prefix else {}
        if after:
            id_range["$gt"] = after
        if id_range:
            flt["_id"] = id_range
        coll = self.dirs if dirs else self.files
        docs = with_retry(lambda: list(coll.find(flt).sort("_id", ASCENDING).limit(limit)), "query records")
        return {"items": docs, "next": docs[-1]["_id"] if len(docs) == limit else None, "generation": generation}

    def file_history(self, rse: str, lfn: str) -> list[dict[str, Any]]:
        """One file's records across the kept generations, newest first."""
        gens = [g["gen"] for g in self.rse(rse).get("generations", [])]
        ids = [file_id(rse, g, lfn) for g in gens]
        return with_retry(lambda: list(self.files.find({"_id": {"$in": ids}}).sort("gen", DESCENDING)), "history")

    def query_jobs(self, rse: Optional[str] = None, state: Optional[str] = None,
                   generation: Optional[float] = None, after: Optional[str] = None,
                   limit: int = 100) -> dict[str, Any]:
        flt: dict[str, Any] = {}
        if rse:
            flt["rse"] = rse
        if state:
            flt["state"] = state
        if generation is not None:
            flt["gen"] = generation
        if after:
            flt["_id"] = {"$gt": after}
        limit = max(1, min(limit, 10_000))
        docs = with_retry(lambda: list(self.jobs.find(flt).sort("_id", ASCENDING).limit(limit)), "query jobs")
        return {"items": docs, "next": docs[-1]["_id"] if len(docs) == limit else None}

    def query_cycles(self, limit: int = 20) -> list[dict[str, Any]]:
        return with_retry(lambda: list(self.cycles.find().sort("started", DESCENDING).limit(limit)), "cycles")

    def iter_files(self, rse: str, generation: float) -> Iterator[dict[str, Any]]:
        """Every file record of one generation, in id order (comparisons, exports)."""
        yield from self.files.find({"_id": _prefix_range(f"{rse}|{gen_key(generation)}|")}).sort("_id", ASCENDING)
