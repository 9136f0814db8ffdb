"""The ledger: every planned file's fate, every job, every RSE's state and every cycle, in MongoDB.

Collections (see docs/ledger.md):
  rses     one document per RSE: state, reason, current generation, counters, last events
  buckets  one per (RSE, generation, directory, round-1 job): its files' names and outcome codes
  fences   a generation's bucket ids in order, a few documents per generation: they bound the pages' reads
  files    a row per file that needs one (failures, unknown, protected since planning, retries);
           _id "<rse>|<generation>|<lfn>". A file's record is its row, else its bucket entry (records.py)
  dirs     one per (RSE, generation, directory) a job reported on; _id "<rse>|<generation>|<dir>"
  jobs     one per cleanup job; _id "<rse>:<generation>:<round>-<n>"
  cycles   one per polling cycle of an instance
  leases   see leases.py

A file's `state` changes when its job's outcome is known; whether the job is submitted is on the
job document.
"""
from __future__ import annotations

import os
import re
import time
import uuid
from pathlib import Path
from typing import Any, Iterable, Mapping, Optional, Protocol, Sequence

from pymongo import (ASCENDING, DESCENDING, InsertOne, ReplaceOne, ReturnDocument, UpdateMany, UpdateOne,
                     errors)
from pymongo.collection import Collection
from pymongo.database import Database

from MSUnmerged.config import PlannerConfig
from MSUnmerged.guards import check_plan_lines, split_lines
from MSUnmerged.jobs.backend import JobState
from MSUnmerged.ledger import ages, fences, history, pending_dirs, records, slices
from MSUnmerged.ledger import buckets as bk
from MSUnmerged.ledger.retry import LedgerError, with_retry
from MSUnmerged.ledger.states import (BACKEND_JOB_STATES, DIR_RANK, LIVE_JOB_STATES, NOT_DELETED, OUTCOME_STATES,
                                      RETRIABLE, SUBMITTED, DirState, FileState, dir_failed)
from MSUnmerged.seal import DIRS_NAME, JOBS_DIR, Seal
from MSUnmerged.statemachine import RSEState
from MSUnmerged.throttle import dataset_of
from MSUnmerged.worker.ids import file_id, gen_key, job_id

EVENTS_KEPT = 50
BATCH = 10_000
BUCKET_BATCH = 500  # buckets per insert (each up to a job's files)
COUNT_JOBS = 50  # round-1 jobs whose buckets are read per query when counting
# The `meta` document naming the latest cycles and the last good one, so that the status page reads a few
# cycles by _id instead of sorting them all (SecantusDB reads every match before a limit).
CYCLES_META, RECENT_CYCLES = "cycles", 50
PROTECTED_SINCE_PLANNING = "protected_since_planning"
# Failures by the storage's message (storage_message): at most this many messages a job, the rest together.
MESSAGES_KEPT, MESSAGE_CHARS, OTHER_MESSAGES = 50, 200, "other messages"
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://\S+")
_PATH = re.compile(r"(?<![\w.])/[^\s'\"]+")
# Files with a final outcome: more of them than at the last count is progress.
PROGRESS_STATES = (FileState.DELETED, FileState.MISSING, FileState.WOULD_DELETE, FileState.SKIPPED_PROTECTED)


class PlanSummary(Protocol):
    """What record_plan reads of a plan (planner.Plan)."""

    rse: str
    guard: Optional[str]
    created: float
    files_total: int
    files_to_delete: int
    files_protected: int
    files_excluded: int
    files_invalid: Any
    dirs_removable: int
    jobs: int
    protected_count: int
    job_files: Sequence[str]
    job_sizes: Sequence[int]
    # Optional, read with getattr: a throttled plan's `job_slices` (each job's slice) and `slice_sizes`.


class StepFiles(Protocol):
    lfns: Sequence[str]
    dry_run: bool


class JobIntent(Protocol):
    """What record_job_intent reads of a job about to be submitted (jobs.spec.CleanupJob)."""

    job_id: str
    site: str
    step: StepFiles


class Protection(Protocol):
    """The current protected list (lfn.PrefixSet)."""

    def holds_below(self, path: bytes) -> bool: ...


def storage_message(error: str) -> str:
    """A failure's message as the storage gave it, without what names the file (URLs, absolute paths), so that
    failures tally by message (WMCore's gfalErrors): "Permission denied: /pnfs/x/f.root" -> "Permission denied:
    <path>"."""
    text = _URL.sub("<url>", error)
    text = " ".join(_PATH.sub("<path>", text).split())
    return text[:MESSAGE_CHARS] or "no message"


def message_tally(by_message: Mapping[str, int]) -> list[dict[str, Any]]:
    """Counts by message as stored: [{message, n}], most frequent first (a message may hold dots and "$",
    which field names may not)."""
    return [{"message": m, "n": n} for m, n in sorted(by_message.items(), key=lambda kv: (-kv[1], kv[0]))]


def span(first: str, last: str) -> list[str]:
    """A job's `span`: every _id of its records (its files, and its buckets for a round-1 job) lies in
    [first, last], so the job's pages read only that range."""
    return [first, last]


def _first_try_matches(extra: Mapping[str, Any]) -> bool:
    """Whether a bucket entry (attempts 1) matches count_files' extra filter; only `attempts` is known."""
    ops = {"$lt": lambda a, b: a < b, "$lte": lambda a, b: a <= b, "$gt": lambda a, b: a > b,
           "$gte": lambda a, b: a >= b, "$eq": lambda a, b: a == b, "$ne": lambda a, b: a != b}
    for key, cond in extra.items():
        if key != "attempts":
            raise ValueError(f"count_files filters bucket entries on attempts only, not {key}")
        if not all(ops[op](1, v) for op, v in (cond if isinstance(cond, dict) else {"$eq": cond}).items()):
            return False
    return True


def _needs_row(state: str, error_class: str, error: str) -> bool:
    """Whether an outcome is kept as a row rather than a bucket code."""
    return state not in bk.CODES or bool(error_class or error)


class Ledger:
    """All reads and writes of the ledger; writes are idempotent and retried on transient errors."""

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
        self._meta: Collection = db["meta"]
        self.fences = fences.FenceCache(db["fences"])

    def instance_id(self) -> str:
        """This ledger's id, made once and kept in the database: batch jobs carry it, so that services with
        different ledgers sharing a batch system never take each other's jobs (job ids repeat across ledgers)."""
        doc = with_retry(lambda: self._meta.find_one_and_update(
            {"_id": "ledger"}, {"$setOnInsert": {"instance_id": uuid.uuid4().hex, "created": time.time()}},
            upsert=True, return_document=ReturnDocument.AFTER), "ledger id")
        return str(doc["instance_id"])

    def ensure_indexes(self) -> None:
        """Indexes for the operators' questions; each costs ingest time, so only these.

        Every per-file page is one of these indexes' leading fields plus a range on its trailing
        `_id`, so a page is an index range scan in `_id` order (see query_files). (rse, gen, _id)
        serves directory prefixes: SecantusDB does not use the `_id` index for ranges.
        """
        def bucket_indexes() -> None:
            b = self.buckets
            b.create_index([("rse", ASCENDING), ("gen", ASCENDING), ("states", ASCENDING), ("_id", ASCENDING)])
            b.create_index([("rse", ASCENDING), ("gen", ASCENDING), ("_id", ASCENDING)])
            b.create_index([("job", ASCENDING), ("_id", ASCENDING)])
            b.create_index([("rse", ASCENDING), ("gen", ASCENDING), ("dir", ASCENDING)])
            self.fences.coll.create_index([("rse", ASCENDING), ("gen", ASCENDING)])

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
            self.db[ages.COLLECTION].create_index([("rse", ASCENDING)])
            self.db[pending_dirs.COLLECTION].create_index([("rse", ASCENDING), ("tries", ASCENDING)])
            bucket_indexes()
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

    def record_plan(self, plan_dir: os.PathLike | str, plan: PlanSummary, generation: float,
                    baseline_count: Optional[int] = None, sealed: Optional[Seal] = None,
                    max_lfn_length: int = PlannerConfig.max_lfn_length, scan_started: Optional[float] = None,
                    floor_depth: int = PlannerConfig.dir_floor_depth) -> int:
        """Record a plan's files (state planned, each in its job) and jobs; returns files recorded.
        `scan_started` (the scan's start_time) is kept on the generation entry for the jobs' workers.
        A throttled plan's jobs keep their slice, its generation entry the slice sizes (ledger/slices.py), and
        its dataset directories (`floor_depth` elements) their first plan (ledger/ages.py).

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
        job_slices, slice_sizes = getattr(plan, "job_slices", ()), list(getattr(plan, "slice_sizes", ()))
        if slice_sizes:
            entry.update(slice_sizes=slice_sizes, released=0)
        if sealed is not None:
            entry.update(seal=sealed.digest, dirs_sha256=sealed.files[DIRS_NAME]["sha256"])
        with_retry(lambda: self.rses.update_one(
            {"_id": rse}, {"$set": {"recording": generation, "updated": now},
                           "$setOnInsert": {"created": now, "state": RSEState.NEW}}, upsert=True), "mark recording")
        with_retry(lambda: self.rses.update_one({"_id": rse, "generations.gen": {"$ne": generation}},
                                                {"$push": {"generations": entry}}), "add generation")
        n, spans, dirs = self._insert_buckets(rse, generation, plan_dir, plan.job_files, max_lfn_length, sealed)
        jobs = [{"_id": job_id(rse, generation, 1, i), "rse": rse, "gen": generation, "round": 1, "n": i,
                 "state": JobState.PLANNED, "files": size, "plan_file": name, "created": now, "span": spans[i - 1]}
                for i, (name, size) in enumerate(zip(plan.job_files, plan.job_sizes), 1)]
        for job, slice_ in zip(jobs, job_slices):
            job["slice"] = slice_
        self._insert_ignoring_duplicates(self.jobs, jobs)
        if slice_sizes:
            ages.record(self.db, rse, generation,
                        {dataset_of(d.encode("utf-8", "surrogateescape"), floor_depth).decode("utf-8", "surrogateescape")
                         for d in dirs})
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

    def _insert_buckets(self, rse: str, generation: float, plan_dir: Path, job_files: Sequence[str],
                        max_lfn_length: int, sealed: Optional[Seal]) -> tuple[int, list[list[str]], set[str]]:
        """Every line of the jobs files, read as bytes and split on b"\\n" only, into buckets, then the
        generation's fences. A file that differs from its seal, or holds a line that is not exactly a canonical
        LFN below /store/unmerged, is refused (GuardTripped) before any of it is recorded. Returns the files
        recorded, each job's span and the directories holding them."""
        prefix = f"{rse}|{gen_key(generation)}|"
        now = time.time()
        batch: list[dict[str, Any]] = []
        ids: list[str] = []
        spans: list[list[str]] = []
        dirs: set[str] = set()
        n = 0
        for i, name in enumerate(job_files, 1):
            data = (plan_dir / JOBS_DIR / name).read_bytes()
            if sealed is not None:
                sealed.check_file(f"{JOBS_DIR}/{name}", data)
            check_plan_lines(data, max_lfn_length, f"{JOBS_DIR}/{name}")
            lfns = [raw.decode("utf-8", errors="surrogateescape") for raw in split_lines(data)]
            n += len(lfns)
            built = bk.build(rse, generation, prefix, job_id(rse, generation, 1, i), i, lfns, now)
            ids += [d["_id"] for d in built]
            dirs.update(d["dir"] for d in built)
            spans.append(span(min(d["_id"] for d in built), prefix + max(lfns)) if built else [])
            batch += built
            if len(batch) >= BUCKET_BATCH:
                self._insert_ignoring_duplicates(self.buckets, batch)
                batch = []
        self._insert_ignoring_duplicates(self.buckets, batch)
        # After every bucket: a complete fence list is never short of a bucket (fences.FenceCache).
        fence_docs = fences.documents(rse, generation, ids)
        if fence_docs:
            with_retry(lambda: self.fences.coll.bulk_write(
                [ReplaceOne({"_id": d["_id"]}, d, upsert=True) for d in fence_docs]), "write fences")
        return n, spans, dirs

    @classmethod
    def _insert_ignoring_duplicates(cls, coll: Collection, docs: list[dict[str, Any]]) -> None:
        if docs:
            cls._write_ignoring_duplicates(coll, [InsertOne(d) for d in docs])

    @staticmethod
    def _write_ignoring_duplicates(coll: Collection, ops: list[Any]) -> int:
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

    def _live_entries(self, flt: Mapping[str, Any], codes: str,
                      job_rows: Optional[set[str]] = None) -> list[tuple[dict[str, Any], int, str]]:
        """(bucket, index, name) of the entries of matching buckets whose code is in `codes` and that have no
        row. An entry found with a row (a step cut short after writing the row) gets its code set to ROW.

        Only a row of its bucket's own job can stand for a planned, deleted or missing entry (rows are written
        with the bucket's job, and a row moves to a retry job only after its job was closed, which sets the
        codes of its rows): these are checked against the rows of their buckets' jobs (`job_rows`: the ids of
        those rows when the caller read them already), a look-up by job instead of one per file. A would-delete
        entry may have a retry job's row (new_round) and is checked by its id."""
        found = [(doc, i, name, fid) for doc in with_retry(lambda: list(self.buckets.find(flt)), "read buckets")
                 for fid, i, name in bk.entries(doc, codes)]
        by_id = bk.CODES[FileState.WOULD_DELETE]
        have_rows = records.with_rows(self.files, (fid for d, i, _, fid in found if d["codes"][i] == by_id))
        if any(d["codes"][i] != by_id for d, i, _, _ in found):
            if job_rows is None:
                job_rows = {r["_id"] for job in {d["job"] for d, *_ in found} for r in with_retry(
                    lambda: list(self.files.find({"job": job}, {"_id": 1})), f"rows of {job}")}
            have_rows |= {fid for d, i, _, fid in found if d["codes"][i] != by_id and fid in job_rows}
        if have_rows:
            self._set_row_codes([(d, i, n) for d, i, n, fid in found if fid in have_rows])
        return [(d, i, n) for d, i, n, fid in found if fid not in have_rows]

    def _rewrite_buckets(self, changes: Mapping[str, tuple[dict[str, Any], dict[int, tuple[str, Optional[int]]]]]) -> None:
        """Bucket _id -> (the bucket as read, {index: (code, size or None)}): one $set of each bucket. The
        bucket dicts are updated too, so that a later rewrite of the same bucket in this step starts from it."""
        now = time.time()
        ops = []
        for bid, (doc, ch) in changes.items():
            new = bk.rewrite(doc, ch, now)
            doc.update(new)
            ops.append(UpdateOne({"_id": bid}, {"$set": new}))
        for start in range(0, len(ops), BUCKET_BATCH):
            chunk = ops[start:start + BUCKET_BATCH]
            with_retry(lambda: self.buckets.bulk_write(chunk, ordered=False), "rewrite buckets")

    def _set_row_codes(self, entries: Sequence[tuple[dict[str, Any], int, str]]) -> None:
        changes: dict[str, tuple[dict[str, Any], dict[int, tuple[str, Optional[int]]]]] = {}
        for doc, i, _ in entries:
            changes.setdefault(doc["_id"], (doc, {}))[1][i] = (bk.ROW, None)
        self._rewrite_buckets(changes)

    def _move_to_rows(self, moves: Sequence[tuple[tuple[dict[str, Any], int, str], Mapping[str, Any]]],
                      flt: Mapping[str, Any]) -> int:
        """Bucket entries become rows: (entry, fields) -> an upsert of the entry's record filtered by {_id, **flt}
        and setting `fields` (a row already there that `flt` does not match makes the insert collide: skipped),
        all in one bulk write per BATCH entries, then their codes become ROW. Row first: a crash between the
        two leaves a row, which wins. Returns rows written."""
        now = time.time()
        ops = []
        for (doc, i, name), fields in moves:
            rec = bk.record(doc, i, name)
            on_insert = {k: v for k, v in rec.items() if k not in fields and k not in flt and k not in ("_id", "t")}
            ops.append(UpdateOne({"_id": rec["_id"], **flt}, {"$set": {**fields, "t": now}, "$setOnInsert": on_insert},
                                 upsert=True))
        n = sum(self._write_ignoring_duplicates(self.files, ops[s:s + BATCH]) for s in range(0, len(ops), BATCH))
        self._set_row_codes([entry for entry, _ in moves])
        return n

    def drop_protected(self, rse: str, generation: float, protection: Protection, job: Optional[str] = None) -> int:
        """Files not yet deleted (of one job, if given) that the current protected list covers, or that lie above
        a protected base (a line naming a directory), become skipped_protected."""
        def held(path: str) -> bool:
            return protection.holds_below(path.encode("utf-8", "surrogateescape"))

        flt: dict[str, Any] = {"rse": rse, "gen": generation, "state": {"$in": list(NOT_DELETED)}}
        if job is not None:
            flt["job"] = job
        # Streamed (a whole generation's rows or buckets are never held): only what is dropped is kept.
        ids = with_retry(lambda: [d["_id"] for d in self.files.find(flt, {"lfn": 1}) if held(d["lfn"])],
                         "scan protection")
        dropped = {"state": FileState.SKIPPED_PROTECTED, "error_class": PROTECTED_SINCE_PLANNING}
        for start in range(0, len(ids), BATCH):
            chunk = ids[start:start + BATCH]
            with_retry(lambda: self.files.update_many(
                {"_id": {"$in": chunk}, "state": {"$in": list(NOT_DELETED)}},
                {"$set": {**dropped, "t": time.time()}}), "drop protected")
        bflt = {"rse": rse, "gen": generation,
                "states": {"$in": [FileState.PLANNED.value, FileState.WOULD_DELETE.value]}}
        if job is not None:
            bflt["job"] = job
        codes = bk.CODES[FileState.PLANNED] + bk.CODES[FileState.WOULD_DELETE]
        # A base at or below <dir>/<name> is at or below <dir> (PrefixSet): only the buckets of directories
        # that hold a base below them can have entries to drop, and only those are read whole.
        near = with_retry(lambda: [b["_id"] for b in self.buckets.find(bflt, {"dir": 1}) if held(b["dir"])],
                          "scan protection")
        n = len(ids)
        for start in range(0, len(near), BUCKET_BATCH):
            covered = [e for e in self._live_entries({**bflt, "_id": {"$in": near[start:start + BUCKET_BATCH]}}, codes)
                       if held(f"{e[0]['dir']}/{e[2]}")]
            self._move_to_rows([(e, dropped) for e in covered], {"state": {"$in": list(NOT_DELETED)}})
            n += len(covered)
        if n:
            with_retry(lambda: self.rses.update_one({"_id": rse, "generations.gen": generation},
                                                    {"$inc": {"generations.$.dropped_protected": n}}),
                       "count dropped")
        return n

    def prune_generations(self, rse: str) -> list[float]:
        """Delete file and job records of generations older than the last `generations_kept`."""
        doc = self.rse(rse)
        gens = sorted(g["gen"] for g in doc.get("generations", []))
        old = gens[:-self.generations_kept]
        if not old:
            return []
        with_retry(lambda: self.buckets.delete_many({"rse": rse, "gen": {"$in": old}}), "prune buckets")
        with_retry(lambda: self.fences.coll.delete_many({"rse": rse, "gen": {"$in": old}}), "prune fences")
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

    def job_lfns(self, job_id_: str, states: Optional[Sequence[str]] = (FileState.PLANNED,)) -> list[str]:
        """The files of a job in these states (default: still to work on; None: all), sorted."""
        rows = with_retry(lambda: list(self.files.find({"job": job_id_}, {"lfn": 1, "state": 1})),
                          f"files of {job_id_}")
        codes = "".join(c for s, c in bk.CODES.items() if states is None or s in states)
        entries = self._live_entries({"job": job_id_}, codes, {d["_id"] for d in rows}) if codes else []
        return sorted([d["lfn"] for d in rows if states is None or d["state"] in states]
                      + [f"{doc['dir']}/{name}" for doc, _, name in entries])

    def record_job_intent(self, jobs: Sequence[JobIntent], backend: str = "") -> None:
        """Before submitting: the jobs go from planned to submitting (with site and backend)."""
        now = time.time()
        ops = [UpdateOne({"_id": j.job_id, "state": JobState.PLANNED},
                         {"$set": {"state": JobState.SUBMITTING, "site": j.site, "backend": backend,
                                   "files": len(j.step.lfns), "dry_run": j.step.dry_run, "intent_at": now}})
               for j in jobs]
        if ops:
            with_retry(lambda: self.jobs.bulk_write(ops, ordered=False), "record intent")

    def mark_submitted(self, job_id_: str, batch_id: str) -> None:
        """The batch system accepted the job (or reconciliation found it there)."""
        with_retry(lambda: self.jobs.update_one(
            {"_id": job_id_, "state": JobState.SUBMITTING},
            {"$set": {"state": JobState.QUEUED, "batch_id": batch_id, "submitted_at": time.time()}}), "mark submitted")

    def requeue_job(self, job_id_: str, reason: str) -> None:
        """A job the batch system gave up on before it ever started: back to planned, its files still assigned to
        it with their tries unchanged (a submission that never ran is not a try); `requeued` counts these."""
        with_retry(lambda: self.jobs.update_one(
            {"_id": job_id_, "state": {"$in": list(BACKEND_JOB_STATES)}},
            {"$set": {"state": JobState.PLANNED, "reason": reason, "polled_at": time.time()},
             "$unset": {"batch_id": ""}, "$inc": {"requeued": 1}}), "requeue job")

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
        by_message: dict[str, int] = {}
        summary: dict[str, Any] = {"states": {}, "failed_by_class": {}, "bytes_freed": 0}
        given: dict[str, tuple[str, str, str, Optional[int]]] = {}  # file _id -> (state, class, error, size)
        for o in outcomes:
            state = o.get("state")
            if state not in OUTCOME_STATES:
                raise LedgerError("bad_outcome", f"job {job_id_}: unknown file state {state!r} for {o.get('lfn')}")
            state = FileState(state).value
            cls, err = str(o.get("error_class") or ""), str(o.get("error") or "")[:1000]
            summary["states"][state] = summary["states"].get(state, 0) + 1
            if state == FileState.FAILED:
                summary["failed_by_class"][cls] = summary["failed_by_class"].get(cls, 0) + 1
                key = storage_message(err)
                if key in by_message or len(by_message) < MESSAGES_KEPT:
                    by_message[key] = by_message.get(key, 0) + 1
                else:
                    by_message[OTHER_MESSAGES] = by_message.get(OTHER_MESSAGES, 0) + 1
            size = o.get("size")
            if not (isinstance(size, int) and not isinstance(size, bool) and size >= 0):
                size = None
            elif state == FileState.DELETED:
                summary["bytes_freed"] += size
            given[prefix + o["lfn"]] = (state, cls, err, size)
        summary["failed_by_message"] = message_tally(by_message)
        self._record_file_outcomes(job_id_, given, now)
        day = job.get("day") or history.day_of(now)  # a repeated call counts on the first call's day
        with_retry(lambda: self.jobs.update_one({"_id": job_id_}, {"$set": {"summary": summary, "day": day}}),
                   "job summary")
        history.record_job(self.db, job["rse"], job_id_, day, summary)
        return summary

    def _record_file_outcomes(self, job_id_: str, given: Mapping[str, tuple[str, str, str, Optional[int]]],
                              now: float) -> None:
        """Rows of this job are updated; bucket entries of this job take a code, or become rows when the
        outcome needs one; files with a row of another job, or in none of this job's buckets, are left."""
        rows = {d["_id"]: d["job"] for start in range(0, len(given), BATCH) for d in with_retry(
            lambda: list(self.files.find({"_id": {"$in": list(given)[start:start + BATCH]}}, {"job": 1})),
            f"rows of {job_id_}")}
        entries = {}
        if len(rows) < len(given):
            entries = {fid: (doc, i, name) for doc in with_retry(
                lambda: list(self.buckets.find({"job": job_id_})), f"buckets of {job_id_}")
                for fid, i, name in bk.entries(doc, "".join(bk.CODES.values()))}
        row_ops: list[Any] = []
        to_rows: list[tuple[tuple[dict[str, Any], int, str], dict[str, Any]]] = []  # (entry, its row's fields)
        coded: dict[str, tuple[dict[str, Any], dict[int, tuple[str, Optional[int]]]]] = {}
        grouped: dict[tuple[str, str, str], list[str]] = {}
        for fid, (state, cls, err, size) in given.items():
            if fid in rows:
                if rows[fid] != job_id_:
                    continue
                if size is None:
                    grouped.setdefault((state, cls, err), []).append(fid)
                else:
                    row_ops.append(UpdateOne({"_id": fid, "job": job_id_}, {"$set": {
                        "state": state, "error_class": cls, "error": err, "size": size, "t": now}}))
            elif fid in entries:
                doc, i, name = entries[fid]
                if _needs_row(state, cls, err):
                    to_rows.append((entries[fid], {"state": state, "error_class": cls, "error": err,
                                                   **({} if size is None else {"size": size})}))
                else:
                    coded.setdefault(doc["_id"], (doc, {}))[1][i] = (bk.CODES[FileState(state)], size)
        for (state, cls, err), ids in grouped.items():
            for start in range(0, len(ids), BATCH):
                row_ops.append(UpdateMany({"_id": {"$in": ids[start:start + BATCH]}, "job": job_id_},
                                          {"$set": {"state": state, "error_class": cls, "error": err, "t": now}}))
        if row_ops:
            with_retry(lambda: self.files.bulk_write(row_ops, ordered=False), f"outcomes of {job_id_}")
        self._move_to_rows(to_rows, {"job": job_id_})
        self._rewrite_buckets(coded)

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
        unknown = {"state": FileState.UNKNOWN, "error_class": error_class, "error": reason[:1000]}
        res = with_retry(lambda: self.files.update_many(
            {"job": job_id_, "state": FileState.PLANNED}, {"$set": {**unknown, "t": now}}), f"close {job_id_}")
        n = res.modified_count + self._move_to_rows(
            [(e, unknown) for e in self._live_entries({"job": job_id_, "states": FileState.PLANNED.value},
                                                      bk.CODES[FileState.PLANNED])],
            {"job": job_id_, "state": FileState.PLANNED})
        job = with_retry(lambda: self.jobs.find_one_and_update({"_id": job_id_}, {"$set": {
            "state": state, "reason": reason, "finished_at": now, **facts}}), f"close {job_id_}") or {}
        if job and n and state != JobState.REMOVED:  # our own removal (revalidation) is no failure
            history.record_unreported(self.db, job["rse"], job_id_, job.get("day") or history.day_of(now),
                                      error_class, n)
        return n

    def new_round(self, rse: str, generation: float, max_attempts: int, files_per_job: int,
                  redo_dry_run: bool = False, limit: Optional[int] = None) -> list[str]:
        """Put retriable files (failed, unknown, fewer than `max_attempts` tries), and with `redo_dry_run` the
        files a dry run left (would_delete), into new planned jobs. A throttled generation's round takes at most
        `limit` of them (in path order; the rest wait for the next rounds), and each file's attempts then count
        its own tries (one more than before; a would_delete entry's first real try is its second look)."""
        # A crash between creating a job and assigning its files leaves an empty planned job: drop it.
        for job in self.jobs_in(rse, [JobState.PLANNED], generation):
            if not self._has_files(job["_id"]):
                with_retry(lambda: self.jobs.delete_one({"_id": job["_id"], "state": JobState.PLANNED}), "drop job")
        rounds = [j.get("round", 1) for j in with_retry(
            lambda: list(self.jobs.find({"rse": rse, "gen": generation}, {"round": 1})), "rounds")]
        round_ = max(rounds, default=0) + 1
        queries = [{"rse": rse, "gen": generation, "state": {"$in": list(RETRIABLE)}, "attempts": {"$lt": max_attempts}}]
        entries: dict[str, tuple[dict[str, Any], int, str]] = {}
        if redo_dry_run:
            queries.append({"rse": rse, "gen": generation, "state": FileState.WOULD_DELETE})
            wd = FileState.WOULD_DELETE
            entries = {bk.file_prefix(doc) + name: (doc, i, name) for doc, i, name in self._live_entries(
                {"rse": rse, "gen": generation, "states": wd.value}, bk.CODES[wd])}
        ids = sorted([d["_id"] for q in queries
                      for d in with_retry(lambda: list(self.files.find(q, {"_id": 1})), "files for a new round")]
                     + list(entries))[:limit]
        states = [*RETRIABLE, FileState.WOULD_DELETE] if redo_dry_run else list(RETRIABLE)
        created = []
        for n, start in enumerate(range(0, len(ids), files_per_job), 1):
            chunk = ids[start:start + files_per_job]
            jid = job_id(rse, generation, round_, n)
            self._insert_ignoring_duplicates(self.jobs, [{
                "_id": jid, "rse": rse, "gen": generation, "round": round_, "n": n, "state": JobState.PLANNED,
                "files": len(chunk), "created": time.time(), "span": span(chunk[0], chunk[-1])}])
            assign = {"state": FileState.PLANNED, "job": jid, "attempts": round_}
            rows = {"$set": {**assign, "t": time.time()}}
            if limit is not None:  # rounds no longer take every file: attempts count each file's own tries
                del rows["$set"]["attempts"]
                rows["$inc"], assign = {"attempts": 1}, {**assign, "attempts": 2}
            with_retry(lambda: self.files.update_many(
                {"_id": {"$in": [i for i in chunk if i not in entries]}, "state": {"$in": states}}, rows),
                "assign retry")
            self._move_to_rows([(entries[i], assign) for i in chunk if i in entries], {"state": {"$in": states}})
            created.append(jid)
        return created

    def _has_files(self, job_id_: str) -> bool:
        return bool(with_retry(lambda: self.files.count_documents({"job": job_id_}, limit=1)
                               or self.buckets.count_documents({"job": job_id_}, limit=1), "count"))

    # -- progress and counters -------------------------------------------------------------------

    def count_files(self, rse: str, generation: float, states: Sequence[str], **extra: Any) -> int:
        """Files of a generation in these states; `extra` may filter on `attempts` (bucket entries have 1)."""
        flt = {"rse": rse, "gen": generation, "state": {"$in": list(states)}, **extra}
        rows = with_retry(lambda: self.files.count_documents(flt), "count files")
        if not any(s in bk.CODES for s in states) or not _first_try_matches(extra):
            return rows
        counts = self._bucket_counts(rse, generation, [FileState(s) for s in states if s in bk.CODES])
        return rows + sum(counts.get(FileState(s).value, 0) for s in states)

    def _bucket_counts(self, rse: str, generation: float,
                       states: Optional[Sequence[FileState]] = None) -> dict[str, int]:
        """Bucket entries (not rows) per state, summed from the `counts` of the buckets holding these states
        (default: all)."""
        match: dict[str, Any] = {}
        if states is not None:
            match["states"] = {"$in": [s.value for s in states]}
        # Read by round-1 job, a chunk of jobs at a time: the embedded server fetches every bucket a query
        # matches, whole, before projecting or grouping; over a whole generation that was its peak memory.
        jobs = [job_id(rse, generation, 1, n)
                for n in range(1, self.generation_entry(rse, generation).get("jobs", 0) + 1)]
        totals = {s.value: 0 for s in bk.CODES}
        for start in range(0, len(jobs), COUNT_JOBS):
            flt = {**match, "job": {"$in": jobs[start:start + COUNT_JOBS]}}
            for doc in with_retry(lambda: list(self.buckets.find(flt, {"_id": 0, "counts": 1})), "count buckets"):
                for state, n in doc.get("counts", {}).items():
                    totals[state] += int(n)
        return totals

    def _state_counts(self, rse: str, generation: float) -> dict[str, int]:
        """Files per state (rows and bucket entries)."""
        by_state = {s.value: 0 for s in FileState}
        for r in with_retry(lambda: list(self.files.aggregate([{"$match": {"rse": rse, "gen": generation}},
                                                               {"$group": {"_id": "$state", "n": {"$sum": 1}}}])),
                            "count rows"):
            by_state[r["_id"]] = by_state.get(r["_id"], 0) + r["n"]
        for s, n in self._bucket_counts(rse, generation).items():
            by_state[s] += n
        return by_state

    def _job_counts(self, rse: str) -> dict[str, int]:
        """The RSE's job documents per state (every generation), read through the (rse, ...) index."""
        return {r["_id"]: r["n"] for r in with_retry(lambda: list(self.jobs.aggregate([
            {"$match": {"rse": rse}}, {"$group": {"_id": "$state", "n": {"$sum": 1}}}])), "jobs by state")}

    def refresh_job_counts(self, rse: str) -> None:
        """Recount the RSE's jobs per state into `counters.jobs_by_state` (the `msunmerged_jobs` gauge reads it
        there, not from every job document at each scrape); the service does it at the end of each RSE's run."""
        counts = self._job_counts(rse)
        with_retry(lambda: self.rses.update_one({"_id": rse}, {"$set": {"counters.jobs_by_state": counts}}),
                   "job counts")

    def refresh_counters(self, rse: str) -> dict[str, Any]:
        """Recompute the RSE's counters for its current generation from the records (idempotent)."""
        doc = self.rse(rse)
        gen = doc.get("generation")
        if gen is None:
            return {}
        entry = next((g for g in doc.get("generations", []) if g["gen"] == gen), {})
        by_state = self._state_counts(rse, gen)
        failed_by_class = {r["_id"] or "unclassified": r["n"] for r in with_retry(lambda: list(self.files.aggregate([
            {"$match": {"rse": rse, "gen": gen, "state": FileState.FAILED}},
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
            if state == DirState.REFUSED:
                refused_by_reason[reason or "unclassified"] = refused_by_reason.get(reason or "unclassified", 0) + r["n"]
            if dir_failed(state, reason):
                dirs_failed += r["n"]
        summaries = [j.get("summary") or {} for j in with_retry(lambda: list(self.jobs.find(
            {"rse": rse, "gen": gen}, {"summary.bytes_freed": 1, "summary.failed_by_message": 1})), "job summaries")]
        bytes_freed = sum(j.get("bytes_freed", 0) for j in summaries)
        failed_by_message: dict[str, int] = {}
        for j in summaries:
            for tally in j.get("failed_by_message") or []:
                failed_by_message[tally["message"]] = failed_by_message.get(tally["message"], 0) + int(tally["n"])
        counters = {"to_delete": entry.get("to_delete", 0), "pending": by_state[FileState.PLANNED],
                    **{s.value: by_state[s] for s in FileState if s != FileState.PLANNED},
                    "failed_by_class": failed_by_class,
                    "failed_by_message": message_tally(failed_by_message),
                    "protected": entry.get("protected", 0), "excluded": entry.get("excluded", 0),
                    "invalid": entry.get("invalid", {}), "dirs_removable": entry.get("dirs_removable", 0),
                    "bytes_freed": bytes_freed, "protected_count": entry.get("protected_count", 0),
                    "dirs_removed": dirs_by_state.get(DirState.REMOVED, 0),
                    "dirs_refused": dirs_by_state.get(DirState.REFUSED, 0),
                    "dirs_failed": dirs_failed,
                    "dirs_by_state": dirs_by_state, "dirs_refused_by_reason": refused_by_reason,
                    "jobs_by_state": self._job_counts(rse), **slices.cycle_counters(entry)}
        now = time.time()
        done = sum(counters[s.value] for s in PROGRESS_STATES)
        # Progress: a new generation, or more files done than at the last count (the stall alert reads it).
        progress = {"progress_at": now} if gen != doc.get("counted_gen") or done != doc.get("counted_done") else {}
        with_retry(lambda: self.rses.update_one({"_id": rse}, {"$set": {
            "counters": counters, "counted_at": now, "counted_gen": gen, "counted_done": done, **progress}}),
            "counters")
        return counters

    # -- cycles ------------------------------------------------------------------------------------

    def start_cycle(self, instance: str, slot: int, rses: Sequence[str]) -> str:
        cid = f"{instance}:{slot}:{time.time():.3f}"
        with_retry(lambda: self.cycles.update_one({"_id": cid}, {"$setOnInsert": {
            "instance": instance, "slot": slot, "started": time.time(), "rses": list(rses), "results": {}}},
            upsert=True), "start cycle")
        with_retry(lambda: self._meta.update_one(
            {"_id": CYCLES_META}, {"$push": {"recent": {"$each": [cid], "$slice": -RECENT_CYCLES}},
                                   "$min": {"first_started": time.time()}}, upsert=True),
            "recent cycles")
        return cid

    def record_cycle_result(self, cycle_id: str, rse: str, result: Mapping[str, Any]) -> None:
        # RSE names hold no dots (Rucio naming), so they are safe as field names.
        with_retry(lambda: self.cycles.update_one({"_id": cycle_id}, {"$set": {f"results.{rse}": dict(result)}}),
                   "cycle result")

    def end_cycle(self, cycle_id: str, failures: Sequence[Mapping[str, Any]] = (), **fields: Any) -> None:
        """The cycle is over; `failures` ({source, reason, detail, rse}) say what went wrong. A cycle is `ok`
        when nothing failed; its day's aggregate counts it (history)."""
        ok, finished = not failures, time.time()
        doc = with_retry(lambda: self.cycles.find_one_and_update(
            {"_id": cycle_id}, {"$set": {"finished": finished, "failures": list(failures), "ok": ok, **fields}}),
            "end cycle") or {}
        started = doc.get("started") or finished
        history.record_cycle(self.db, cycle_id, started, ok, failures)
        if ok:
            good = {"_id": cycle_id, "started": started, "finished": finished, "ok": True}
            newer = {"$or": [{"last_good": {"$exists": False}}, {"last_good.started": {"$lt": started}}]}
            with_retry(lambda: self._meta.update_one({"_id": CYCLES_META, **newer}, {"$set": {"last_good": good}}),
                       "last good cycle")
        with_retry(lambda: self.cycles.delete_many({"started": {"$lt": finished - self.cycles_kept_days * 86400}}),
                   "prune cycles")

    def _cycles_meta(self) -> dict[str, Any]:
        return with_retry(lambda: self._meta.find_one({"_id": CYCLES_META}), "cycles meta") or {}

    def last_good_cycle(self) -> dict[str, Any]:
        """The most recent cycle that finished with no failure ({} when none); once pruned, what `meta` kept of
        it (_id, started, finished)."""
        good = self._cycles_meta().get("last_good")
        if good:
            return with_retry(lambda: self.cycles.find_one({"_id": good["_id"]}), "last good cycle") or good
        # A ledger from before the meta document: sorted on the server.
        docs = with_retry(lambda: list(self.cycles.find({"ok": True}).sort("started", DESCENDING).limit(1)),
                          "last good cycle")
        return docs[0] if docs else {}

    def first_cycle_started(self) -> Optional[float]:
        """When the ledger's first polling cycle started (None before any): the failing-cycles alert counts its
        delay from there until a cycle succeeds."""
        first = self._cycles_meta().get("first_started")
        if first is None:  # a ledger from before the meta field: its oldest kept cycle
            docs = with_retry(lambda: list(self.cycles.find({}, {"started": 1}).sort("started", ASCENDING).limit(1)),
                              "first cycle")
            first = docs[0].get("started") if docs else None
        return first

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
            state = FileState.FAILED
        # Each filter is an index's leading fields (ensure_indexes) plus a range on its trailing _id,
        # with the indexed field first: SecantusDB picks indexes by the filter's exact field set,
        # else by its first indexable clause.
        flt: dict[str, Any]
        bucket_flt: dict[str, Any]
        stored = None if state == SUBMITTED else state
        gen_prefix = f"{rse}|{gen_key(generation)}|"
        lo = gen_prefix + (dir_prefix or "")
        hi, inclusive = lo + "\U0010ffff", True
        bucket_floor = ""
        if state == SUBMITTED:
            live = [j["_id"] for j in self.jobs_in(rse, LIVE_JOB_STATES, generation) if not job or j["_id"] == job]
            flt = {"job": {"$in": live}, "rse": rse, "gen": generation, "state": FileState.PLANNED}
            bucket_flt, stored = {"job": {"$in": live}, "states": FileState.PLANNED.value}, FileState.PLANNED
        elif job:
            flt, bucket_flt = {"job": job}, {"job": job}
            job_span = (self.job(job).get("span") or []) if not dirs else []
            if job_span:
                lo, hi, bucket_floor = max(lo, job_span[0]), min(hi, job_span[1] + "\0"), job_span[0]
        else:
            flt, bucket_flt = {"rse": rse, "gen": generation}, {"rse": rse, "gen": generation}
        if stored and state != SUBMITTED:
            flt["state"] = stored
            if "job" not in bucket_flt and not dirs:
                bucket_flt["states"] = str(stored)
        if error_class is not None:
            flt["error_class"] = error_class
        if after and after >= lo:
            lo, inclusive = after, False
        # Bucket entries are planned, or have an outcome without error class (error_class "").
        codes = "" if dirs else "".join(c for s, c in bk.CODES.items() if (stored is None or s == stored) and (
            error_class is None or error_class == "" and s != FileState.PLANNED))
        docs = records.page(self.dirs if dirs else self.files, flt, self.buckets, bucket_flt, codes, lo, inclusive, hi,
                            limit, self.fences.get(rse, generation), all_rows=flt.keys() == {"rse", "gen"},
                            bucket_floor=bucket_floor)
        return {"items": docs, "next": docs[-1]["_id"] if len(docs) == limit else None, "generation": generation}

    def file_history(self, rse: str, lfn: str) -> list[dict[str, Any]]:
        """One file's records across the kept generations, newest first."""
        out = []
        for gen in sorted((g["gen"] for g in self.rse(rse).get("generations", [])), reverse=True):
            doc = with_retry(lambda: self.files.find_one({"_id": file_id(rse, gen, lfn)}), "history") \
                or records.find_entry(self.buckets, rse, gen, lfn)
            if doc:
                out.append(doc)
        return out

    def file_records(self, rse: Optional[str] = None, generation: Optional[float] = None,
                     state: Optional[str] = None, job: Optional[str] = None) -> list[dict[str, Any]]:
        """Every file record matching (rows, and bucket entries without a row), in _id order: the per-file
        documents as they were before buckets, for tests, comparisons and exports."""
        flt: dict[str, Any] = {k: v for k, v in (("rse", rse), ("gen", generation), ("job", job)) if v is not None}
        rows = with_retry(lambda: list(self.files.find({**flt, **({"state": state} if state else {})})), "rows")
        found = [bk.record(doc, i, name) for doc in with_retry(lambda: list(self.buckets.find(flt)), "buckets")
                 for _, i, name in bk.entries(doc, "".join(c for s, c in bk.CODES.items() if not state or s == state))]
        have_rows = records.with_rows(self.files, (r["_id"] for r in found))
        return sorted(rows + [r for r in found if r["_id"] not in have_rows], key=lambda d: d["_id"])

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
        """The latest `limit` cycles, newest first."""
        recent = self._cycles_meta().get("recent")
        if recent and limit <= len(recent):
            # A few more than asked: instances starting together may have pushed out of order.
            ids = recent[-(limit + 5):]
            docs = with_retry(lambda: list(self.cycles.find({"_id": {"$in": ids}})), "recent cycles")
            if len(docs) >= limit:
                return sorted(docs, key=lambda d: d["started"], reverse=True)[:limit]
        # Fewer recorded (pruned, or a ledger from before the meta document): sorted on the server.
        return with_retry(lambda: list(self.cycles.find().sort("started", DESCENDING).limit(limit)), "cycles")
