"""Recording a plan: its generation, buckets, fences and jobs; the protected files it drops later; old
generations pruned."""
from __future__ import annotations

import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Mapping, Optional, Protocol, Sequence

from pymongo import ReplaceOne, ReturnDocument, errors
from pymongo.collection import Collection

from MSUnmerged.config import PlannerConfig
from MSUnmerged.guards import PLAN_OUTDATED, GuardTripped
from MSUnmerged.ledger import fences
from MSUnmerged.ledger import buckets as bk
from MSUnmerged.ledger.ages import Ages
from MSUnmerged.ledger.base import (BATCH, BUCKET_BATCH, RECORD_BATCH_FILES, LedgerBase, insert_ignoring_duplicates,
                                    span)
from MSUnmerged.ledger.entries import Entries
from MSUnmerged.ledger.retry import with_retry
from MSUnmerged.ledger.states import LIVE_JOB_STATES, NOT_DELETED, FileState, JobState
from MSUnmerged.statemachine import RSEState
from MSUnmerged.throttle import dataset_of
from MSUnmerged.worker.ids import gen_key, gen_prefix, job_id

if TYPE_CHECKING:  # the plan reader's side: the ledger takes verified lines, it reads no plan file itself
    from MSUnmerged.seal import PlanReader

PROTECTED_SINCE_PLANNING = "protected_since_planning"
# Buckets per window of drop_protected's scan of a generation's rows (rows are sparse: a few percent of the files).
ROW_WINDOW = 100


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


class Protection(Protocol):
    """The current protected list (lfn.PrefixSet)."""

    def holds_below(self, path: bytes) -> bool: ...


def baseline_of(generations: Iterable[Mapping[str, Any]]) -> Optional[int]:
    """The shrink guard's baseline from an RSE's kept generations (its document's entries): the largest
    protected-list size among them (None before the first plan). Only the ledger's own records count, never a
    plan's summary."""
    counts = [g.get("baseline_count", g.get("protected_count")) for g in generations]
    return max((c for c in counts if isinstance(c, int) and not isinstance(c, bool)), default=None)


def prune_of(generations: Iterable[Mapping[str, Any]], kept: int) -> list[float]:
    """The generations (of an RSE document's entries) older than the last `kept`: those pruning deletes."""
    return sorted(g["gen"] for g in generations)[:-kept]


class Plans:
    """A plan's generation recorded (record_plan), the shrink guard's baseline, protection dropped, pruning."""

    def __init__(self, base: LedgerBase, entries: Entries, ages: Ages) -> None:
        self.base = base
        self.entries = entries
        self.ages = ages  # a throttled plan's dataset directories

    def record_plan(self, read: PlanReader, plan: PlanSummary, generation: float,
                    baseline_count: Optional[int] = None, scan_started: Optional[float] = None,
                    floor_depth: int = PlannerConfig.dir_floor_depth) -> int:
        """Record a plan's files (state planned, each in its job) and jobs, its jobs files' lines as `read` yields
        them once checked (a file refused raises before any of its lines is recorded); returns files recorded.
        `scan_started` (the scan's start_time) is kept on the generation entry for the jobs' workers.
        A throttled plan's jobs keep their slice, its generation entry the slice sizes (ledger/slices.py), and
        its dataset directories (`floor_depth` elements) their first plan (ledger/ages.py).

        `baseline_count` is what this generation contributes to the shrink guard's baseline
        (protected_baseline); the plan's seal (`read.sealed`) is kept on the generation's entry so that the
        same plan is recognised and dirs.txt is checked before each use.
        Safe to repeat after a crash: the same ids are inserted again and duplicates are ignored,
        so existing records (which may have moved on) are kept. Repeat it with the SAME plan
        directory: `recording` on the RSE document says which generation was being recorded. A repeat with
        another sealed plan (the directory planned again) first forgets the interrupted one's records.
        """
        if plan.guard:
            raise ValueError(f"plan for {plan.rse} was refused by guard {plan.guard}: nothing to record")
        rse = plan.rse
        now = time.time()
        entry = {"gen": generation, "plan_dir": str(read.plan_dir), "planned": plan.created or now,
                 "files_total": plan.files_total, "to_delete": plan.files_to_delete,
                 "protected": plan.files_protected, "excluded": plan.files_excluded,
                 "invalid": plan.files_invalid, "dirs_removable": plan.dirs_removable, "jobs": plan.jobs,
                 "protected_count": plan.protected_count, "dropped_protected": 0, "scan_started": scan_started,
                 "baseline_count": plan.protected_count if baseline_count is None else baseline_count,
                 "packing": {"floor_depth": floor_depth, "names": bk.PACK_NAMES}}
        job_slices, slice_sizes = getattr(plan, "job_slices", ()), list(getattr(plan, "slice_sizes", ()))
        if slice_sizes:
            entry.update(slice_sizes=slice_sizes, released=0)
        entry.update(read.sealed_fields())
        marked = {"$set": {"recording": generation, "updated": now}}

        def mark_and_add() -> dict[str, Any]:
            """`recording` set and the generation's entry added in one write; the document as it stands after
            serves the pruning and the baseline below (neither reads it again)."""
            try:
                return self.base.rses.find_one_and_update(
                    {"_id": rse, "generations.gen": {"$ne": generation}},
                    {**marked, "$push": {"generations": entry},
                     "$setOnInsert": {"created": now, "state": RSEState.NEW}},
                    upsert=True, return_document=ReturnDocument.AFTER) or {}
            except errors.DuplicateKeyError:  # the entry is there already: a recording a crash interrupted
                return self.base.rses.find_one_and_update({"_id": rse}, marked,
                                                          return_document=ReturnDocument.AFTER) or {}
        doc = with_retry(mark_and_add, "mark recording")
        recorded = next((g for g in doc.get("generations", []) if g.get("gen") == generation), entry)
        if entry.get("seal") is not None and recorded.get("seal") not in (None, entry["seal"]):
            # The interrupted recording was of another plan of this dump (its plan directory planned again): its
            # buckets and jobs would mix with this plan's, same ids kept, so a job could list a file this plan
            # does not. Its records go first; it never got further than planned (jobs go out after recording).
            self._forget_other_plan(rse, generation, recorded)
            doc, recorded = with_retry(mark_and_add, "mark recording"), entry
        # A repeat packs as the interrupted recording did, whatever the floor (or the code's pack size) is now: else
        # a directory could land in two buckets of its job, one from each. An entry without `packing` was written
        # before packing: one directory a bucket.
        packing = recorded.get("packing", bk.BEFORE_PACKING)
        floor_depth = packing.get("floor_depth", floor_depth)
        n, spans, dirs = self._insert_buckets(rse, generation, read.jobs(plan.job_files), floor_depth,
                                              packing["names"])
        jobs = [{"_id": job_id(rse, generation, 1, i), "rse": rse, "gen": generation, "round": 1, "n": i,
                 "state": JobState.PLANNED, "files": size, "plan_file": name, "created": now, "span": spans[i - 1]}
                for i, (name, size) in enumerate(zip(plan.job_files, plan.job_sizes), 1)]
        for job, slice_ in zip(jobs, job_slices):
            job["slice"] = slice_
        insert_ignoring_duplicates(self.base.jobs, jobs)
        if slice_sizes:
            self.ages.record(rse, generation, {
                dataset_of(d.encode("utf-8", "surrogateescape"), floor_depth).decode("utf-8", "surrogateescape")
                for d in dirs})
        pruned = prune_of(doc.get("generations", []), self.base.generations_kept)
        baseline = baseline_of(g for g in doc.get("generations", []) if g["gen"] not in pruned)
        with_retry(lambda: self.base.rses.update_one(
            {"_id": rse}, {"$set": {"generation": generation, "state": RSEState.PLANNED, "reason": "", "detail": "",
                                    "updated": time.time(), "protected_count": baseline},
                           "$unset": {"recording": ""}}), "finish recording")
        if any(g["gen"] < generation for g in doc.get("generations", [])):  # a first plan has none to supersede
            self.supersede(rse, generation)
        self.prune_generations(rse, pruned)  # after the generation is recorded whole
        return n

    def supersede(self, rse: str, generation: float) -> int:
        """The older generations' jobs never submitted (their slices not released, their room never came) end
        `superseded`: only the current generation's jobs are ever submitted. Returns how many."""
        reason = f"superseded by the plan of dump {gen_key(generation)} before it was submitted"
        return with_retry(lambda: self.base.jobs.update_many(
            {"rse": rse, "gen": {"$lt": generation}, "state": JobState.PLANNED},
            {"$set": {"state": JobState.SUPERSEDED, "reason": reason, "finished_at": time.time()}}),
            "supersede jobs").modified_count

    def _forget_other_plan(self, rse: str, generation: float, earlier: Mapping[str, Any]) -> None:
        """The records of an interrupted recording of another plan of this generation, its entry included; refused
        (GuardTripped plan_outdated) when any of its jobs went further than planned."""
        moved = with_retry(lambda: self.base.jobs.find_one({"rse": rse, "gen": generation,
                                                            "state": {"$ne": JobState.PLANNED}}, {"_id": 1}),
                           "jobs moved")
        if moved is not None:
            raise GuardTripped(PLAN_OUTDATED, f"generation {gen_key(generation)} of {rse} is recorded already with "
                                              f"another plan ({earlier.get('plan_dir')}) whose job {moved['_id']} "
                                              "has started")
        self.prune_generations(rse, [generation])  # its planned jobs too (pruning keeps live jobs only)

    def protected_baseline(self, rse: str) -> Optional[int]:
        """The shrink guard's baseline of the RSE as the ledger holds it now (baseline_of)."""
        return baseline_of(self.base.rse(rse).get("generations", []))

    def _insert_buckets(self, rse: str, generation: float, jobs: Iterable[list[str]], floor_depth: int,
                        pack_names: int) -> tuple[int, list[list[str]], set[str]]:
        """Each job's LFNs (`jobs`, in job order) into buckets, then the generation's fences. Returns the files
        recorded, each job's span and the directories holding them."""
        prefix = gen_prefix(rse, generation)
        now = time.time()
        batch: list[dict[str, Any]] = []
        batch_files = 0
        ids: list[str] = []
        spans: list[list[str]] = []
        dirs: set[str] = set()
        n = 0
        # The database works on one batch while the next is read, checked and built (the two take about as
        # long); one batch in flight at most, in order, its failure raised before the next goes.
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="record-buckets") as writer:
            inflight: Optional[Future[None]] = None
            for i, lfns in enumerate(jobs, 1):
                n += len(lfns)
                built = bk.build(rse, generation, prefix, job_id(rse, generation, 1, i), i, lfns, now, floor_depth,
                                 pack_names)
                ids += [d["_id"] for d in built]
                dirs.update(d["dir"] for d in built)
                spans.append(span(min(d["_id"] for d in built), prefix + max(lfns)) if built else [])
                batch += built
                batch_files += len(lfns)
                if batch_files >= RECORD_BATCH_FILES:
                    if inflight is not None:
                        inflight.result()
                    inflight = writer.submit(insert_ignoring_duplicates, self.base.buckets, batch)
                    batch, batch_files = [], 0
            if inflight is not None:
                inflight.result()
        insert_ignoring_duplicates(self.base.buckets, batch)
        # After every bucket: a complete fence list is never short of a bucket (fences.FenceCache).
        fence_docs = fences.documents(rse, generation, ids)
        if fence_docs:
            with_retry(lambda: self.base.fences.coll.bulk_write(
                [ReplaceOne({"_id": d["_id"]}, d, upsert=True) for d in fence_docs]), "write fences")
        return n, spans, dirs

    def drop_protected(self, rse: str, generation: float, protection: Protection, job: Optional[str] = None) -> int:
        """Files not yet deleted (of one job, if given) that the current protected list covers, or that lie above
        a protected base (a line naming a directory), become skipped_protected."""
        def held(path: str) -> bool:
            return protection.holds_below(path.encode("utf-8", "surrogateescape"))

        def live(doc: Mapping[str, Any]) -> bool:
            return doc.get("rse") == rse and doc.get("gen") == generation

        not_deleted = [s.value for s in NOT_DELETED]
        # Only what is dropped is kept. SecantusDB holds every document a query matches, whole (even for a
        # projection): a whole generation's rows or buckets are read one window of fences at a time (a job's from
        # its own index range), each query by an index's leading fields and a range on its last.
        shape = {"lfn": 1, "state": 1, "rse": 1, "gen": 1}
        rows = (self._read({"job": job}, self.base.files, shape) if job is not None
                else self._windows(rse, generation, self.base.files, ROW_WINDOW, shape))
        ids = [d["_id"] for d in rows if live(d) and d["state"] in not_deleted and held(d["lfn"])]
        dropped = {"state": FileState.SKIPPED_PROTECTED, "error_class": PROTECTED_SINCE_PLANNING}
        for start in range(0, len(ids), BATCH):
            chunk = ids[start:start + BATCH]
            with_retry(lambda: self.base.files.update_many(
                {"_id": {"$in": chunk}, "state": {"$in": not_deleted}},
                {"$set": {**dropped, "t": time.time()}}), "drop protected")
        states = {FileState.PLANNED.value, FileState.WOULD_DELETE.value}
        shape = {"dir": 1, "states": 1, "rse": 1, "gen": 1}
        buckets = (self._read({"job": job}, self.base.buckets, shape) if job is not None
                   else self._windows(rse, generation, self.base.buckets, BUCKET_BATCH, shape))
        # A base at or below <dir>/<name> is at or below <dir> (PrefixSet): only the buckets of directories
        # that hold a base below them can have entries to drop, and only those are read whole, by _id alone.
        near = [b["_id"] for b in buckets if live(b) and states.intersection(b["states"]) and held(b["dir"])]
        codes = bk.CODES[FileState.PLANNED] + bk.CODES[FileState.WOULD_DELETE]
        n = len(ids)
        for start in range(0, len(near), BUCKET_BATCH):
            covered = [e for e in self.entries.live({"_id": {"$in": near[start:start + BUCKET_BATCH]}}, codes)
                       if held(f"{e[0]['dir']}/{e[2]}")]
            self.entries.move_to_rows([(e, dropped) for e in covered], {"state": {"$in": not_deleted}})
            n += len(covered)
        if n:
            with_retry(lambda: self.base.rses.update_one({"_id": rse, "generations.gen": generation},
                                                    {"$inc": {"generations.$.dropped_protected": n}}),
                       "count dropped")
        return n

    @staticmethod
    def _read(flt: Mapping[str, Any], coll: Collection, projection: Mapping[str, Any]) -> list[dict[str, Any]]:
        return with_retry(lambda: list(coll.find(flt, projection)), f"scan protection in {coll.name}")

    def _windows(self, rse: str, generation: float, coll: Collection, step: int,
                 projection: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
        """Every record of the generation in `coll`, read by _id windows that tile its whole _id range: their ends
        are every `step`-th fence (fences.Windows), so a missing or partial fence list only makes fewer, larger
        windows, never a record left out."""
        lo = gen_prefix(rse, generation)
        windows = fences.Windows(self.base.fences.get(rse, generation), lo, lo + "\U0010ffff", step)
        start, end = lo, ""
        while end != windows.hi:
            end = windows.end()
            yield from self._read({"rse": rse, "gen": generation, "_id": {"$gte": start, "$lt": end}}, coll, projection)
            start = end

    def prune_generations(self, rse: str, old: list[float]) -> None:
        """Delete the file and job records of these generations of the RSE (prune_of: older than the last
        `generations_kept`) and their entries."""
        if not old:
            return
        with_retry(lambda: self.base.buckets.delete_many({"rse": rse, "gen": {"$in": old}}), "prune buckets")
        with_retry(lambda: self.base.fences.coll.delete_many({"rse": rse, "gen": {"$in": old}}), "prune fences")
        with_retry(lambda: self.base.files.delete_many({"rse": rse, "gen": {"$in": old}}), "prune files")
        with_retry(lambda: self.base.dirs.delete_many({"rse": rse, "gen": {"$in": old}}), "prune dirs")
        with_retry(lambda: self.base.jobs.delete_many({"rse": rse, "gen": {"$in": old},
                                                  "state": {"$nin": list(LIVE_JOB_STATES)}}), "prune jobs")
        with_retry(lambda: self.base.rses.update_one({"_id": rse}, {"$pull": {"generations": {"gen": {"$in": old}}}}),
                   "prune generations")
