"""Counting a generation's files and an RSE's jobs: the counters on the RSE document (page, metrics, alerts)."""
from __future__ import annotations

import time
from typing import Any, Mapping, Optional, Sequence

from MSUnmerged.drainstatus import SAMPLES_KEPT
from MSUnmerged.ledger import buckets as bk
from MSUnmerged.ledger import slices
from MSUnmerged.ledger.base import LedgerBase, with_state
from MSUnmerged.ledger.outcomes import message_tally
from MSUnmerged.ledger.retry import with_retry
from MSUnmerged.ledger.slices import Slices
from MSUnmerged.ledger.states import DirState, FileState, dir_failed
from MSUnmerged.worker.ids import job_id

COUNT_JOBS = 50  # round-1 jobs whose buckets are read per query when counting
# Files with a final outcome: more of them than at the last count is progress.
PROGRESS_STATES = (FileState.DELETED, FileState.MISSING, FileState.WOULD_DELETE, FileState.SKIPPED_PROTECTED)


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


def drain_sample(doc: Mapping[str, Any], gen: float, now: float, processed: int) -> Optional[dict[str, Any]]:
    """The `$push` of a count to the RSE's `drained` samples (drainstatus.rate): the first of a generation replaces
    them, a later one is added when the files with an outcome changed; None: nothing to add."""
    samples = doc.get("drained") or []
    if gen != doc.get("counted_gen") or not samples:
        return {"$each": [{"t": now, "n": processed}], "$slice": -1}
    if samples[-1].get("n") == processed:
        return None
    return {"$each": [{"t": now, "n": processed}], "$slice": -SAMPLES_KEPT}


def counted_update(doc: Mapping[str, Any], gen: float, counters: dict[str, Any],
                   state: Optional[dict[str, Any]]) -> tuple[dict[str, Any], bool]:
    """The RSE document's update for a new count of generation `gen` (with `state`, a base.state_update, when
    given): the counters, when counted, progress and a drained sample; and whether it upserts (with_state)."""
    now = time.time()
    done = sum(counters[s.value] for s in PROGRESS_STATES)
    # Progress: a new generation, or more files done than at the last count (the stall alert reads it).
    progress = {"progress_at": now} if gen != doc.get("counted_gen") or done != doc.get("counted_done") else {}
    update, upsert = with_state({"counters": counters, "counted_at": now, "counted_gen": gen,
                                 "counted_done": done, **progress}, state)
    drained = drain_sample(doc, gen, now, counters["to_delete"] - counters["pending"])
    if drained is not None:
        update.setdefault("$push", {})["drained"] = drained
    return update, upsert


class Counters:
    """Files per state of a generation (rows and bucket entries), jobs per state, the RSE's counters."""

    def __init__(self, base: LedgerBase, released: Slices) -> None:
        self.base = base
        self.slices = released  # a throttled generation's jobs not released yet

    def count_files(self, rse: str, generation: float, states: Sequence[str], **extra: Any) -> int:
        """Files of a generation in these states; `extra` may filter on `attempts` (bucket entries have 1)."""
        flt = {"rse": rse, "gen": generation, "state": {"$in": list(states)}, **extra}
        rows = with_retry(lambda: self.base.files.count_documents(flt), "count files")
        if not any(s in bk.CODES for s in states) or not _first_try_matches(extra):
            return rows
        counts = self._bucket_counts(rse, generation, [FileState(s) for s in states if s in bk.CODES])
        return rows + sum(counts.get(FileState(s).value, 0) for s in states)

    def _bucket_counts(self, rse: str, generation: float, states: Optional[Sequence[FileState]] = None,
                       entry: Optional[dict[str, Any]] = None) -> dict[str, int]:
        """Bucket entries (not rows) per state, summed from the `counts` of the buckets holding these states
        (default: all); `entry`: the generation's entry when the caller has it."""
        entry = self.base.generation_entry(rse, generation) if entry is None else entry
        match: dict[str, Any] = {}
        if states is not None:
            match["states"] = {"$in": [s.value for s in states]}
        # Read by round-1 job, a chunk of jobs at a time: the embedded server fetches every bucket a query
        # matches, whole, before projecting or grouping; over a whole generation that was its peak memory.
        jobs = [job_id(rse, generation, 1, n)
                for n in range(1, entry.get("jobs", 0) + 1)]
        totals = {s.value: 0 for s in bk.CODES}
        for start in range(0, len(jobs), COUNT_JOBS):
            flt = {**match, "job": {"$in": jobs[start:start + COUNT_JOBS]}}
            for doc in with_retry(lambda: list(self.base.buckets.find(flt, {"_id": 0, "counts": 1})), "count buckets"):
                for state, n in doc.get("counts", {}).items():
                    totals[state] += int(n)
        return totals

    def _state_counts(self, rse: str, generation: float,
                      entry: dict[str, Any]) -> tuple[dict[str, int], dict[str, int]]:
        """Files per state (rows and bucket entries) of the generation whose entry this is, and its failed files per
        error class (rows only: a bucket entry never failed), from one aggregation of its rows."""
        by_state = {s.value: 0 for s in FileState}
        failed_by_class: dict[str, int] = {}
        for r in with_retry(lambda: list(self.base.files.aggregate([
                {"$match": {"rse": rse, "gen": generation}},
                {"$group": {"_id": {"state": "$state", "cls": "$error_class"}, "n": {"$sum": 1}}}])), "count rows"):
            state = r["_id"]["state"]
            by_state[state] = by_state.get(state, 0) + r["n"]
            if state == FileState.FAILED:
                cls = r["_id"].get("cls") or "unclassified"
                failed_by_class[cls] = failed_by_class.get(cls, 0) + r["n"]
        for s, n in self._bucket_counts(rse, generation, entry=entry).items():
            by_state[s] += n
        return by_state, failed_by_class

    def _job_counts(self, rse: str) -> dict[str, int]:
        """The RSE's job documents per state (every generation), read through the (rse, ...) index."""
        return {r["_id"]: r["n"] for r in with_retry(lambda: list(self.base.jobs.aggregate([
            {"$match": {"rse": rse}}, {"$group": {"_id": "$state", "n": {"$sum": 1}}}])), "jobs by state")}

    def refresh_job_counts(self, rse: str, state: Optional[dict[str, Any]] = None) -> None:
        """Recount the RSE's jobs per state into `counters.jobs_by_state` (the `msunmerged_jobs` gauge reads it
        there, not from every job document at each scrape); the service does it at the end of each RSE's run.
        `state`: the RSE's state (base.state_update), written in the same update."""
        update, upsert = with_state({"counters.jobs_by_state": self._job_counts(rse)}, state)
        with_retry(lambda: self.base.rses.update_one({"_id": rse}, update, upsert=upsert), "job counts")

    def refresh_counters(self, rse: str, state: Optional[dict[str, Any]] = None) -> dict[str, Any]:
        """Recompute the RSE's counters for its current generation from the records (idempotent); its jobs per
        state are recounted also without a generation (a first plan's recording interrupted). `state`: the RSE's
        state (base.state_update), written in the same update as the counters."""
        doc = self.base.rse(rse)
        gen = doc.get("generation")
        if gen is None:
            self.refresh_job_counts(rse, state)
            return {}
        entry = next((g for g in doc.get("generations", []) if g["gen"] == gen), {})
        by_state, failed_by_class = self._state_counts(rse, gen, entry)
        dirs, jobs = self._dir_counts(rse, gen), self._job_summaries(rse, gen)
        counters = {"to_delete": entry.get("to_delete", 0), "pending": by_state[FileState.PLANNED],
                    **{s.value: by_state[s] for s in FileState if s != FileState.PLANNED},
                    "failed_by_class": failed_by_class,
                    "failed_by_message": jobs["failed_by_message"],
                    "protected": entry.get("protected", 0), "excluded": entry.get("excluded", 0),
                    "invalid": entry.get("invalid", {}), "dirs_removable": entry.get("dirs_removable", 0),
                    "bytes_freed": jobs["bytes_freed"], "protected_count": entry.get("protected_count", 0),
                    "dirs_removed": dirs["by_state"].get(DirState.REMOVED, 0),
                    "dirs_removed_by_dir_jobs": jobs["dirs_removed_by_dir_jobs"],
                    "dirs_refused": dirs["by_state"].get(DirState.REFUSED, 0),
                    "dirs_failed": dirs["failed"],
                    "dirs_by_state": dirs["by_state"], "dirs_refused_by_reason": dirs["refused_by_reason"],
                    "jobs_by_state": self._job_counts(rse), **slices.cycle_counters(entry)}
        if entry.get("slice_sizes"):
            counters["unreleased_jobs"] = self.slices.unreleased_jobs(rse, gen, entry)
        update, upsert = counted_update(doc, gen, counters, state)
        with_retry(lambda: self.base.rses.update_one({"_id": rse}, update, upsert=upsert), "counters")
        return counters

    def _dir_counts(self, rse: str, gen: float) -> dict[str, Any]:
        """The generation's directory outcomes: `by_state`, `refused_by_reason`, and how many `failed` (not removed
        for a storage error or an unexpected refusal, not for the plan's keep rules)."""
        rows = with_retry(lambda: list(self.base.dirs.aggregate([
            {"$match": {"rse": rse, "gen": gen}},
            {"$group": {"_id": {"state": "$state", "cls": "$error_class"}, "n": {"$sum": 1}}}])), "dirs by state")
        by_state: dict[str, int] = {}
        refused_by_reason: dict[str, int] = {}
        failed = 0
        for r in rows:
            dstate, reason = r["_id"]["state"], r["_id"].get("cls") or ""
            by_state[dstate] = by_state.get(dstate, 0) + r["n"]
            if dstate == DirState.REFUSED:
                why = reason or "unclassified"
                refused_by_reason[why] = refused_by_reason.get(why, 0) + r["n"]
            if dir_failed(dstate, reason):
                failed += r["n"]
        return {"by_state": by_state, "refused_by_reason": refused_by_reason, "failed": failed}

    def _job_summaries(self, rse: str, gen: float) -> dict[str, Any]:
        """What the generation's jobs reported: `bytes_freed`, `failed_by_message` (tallied), and the directories
        its directory jobs removed (`dirs_removed_by_dir_jobs`)."""
        jobs = with_retry(lambda: list(self.base.jobs.find({"rse": rse, "gen": gen}, {
            "summary.bytes_freed": 1, "summary.failed_by_message": 1, "files": 1, "round": 1})), "job summaries")
        summaries = [j.get("summary") or {} for j in jobs]
        # Directory jobs (no file, a later round: PendingDirs.plan_jobs) remove earlier dumps' directories too.
        dir_jobs = [j["_id"] for j in jobs if not j.get("files") and j.get("round", 1) > 1]
        removed_by_dir_jobs = with_retry(lambda: self.base.dirs.count_documents(
            {"rse": rse, "gen": gen, "state": DirState.REMOVED.value, "job": {"$in": dir_jobs}}), "dirs retried") \
            if dir_jobs else 0
        failed_by_message: dict[str, int] = {}
        for j in summaries:
            for tally in j.get("failed_by_message") or []:
                failed_by_message[tally["message"]] = failed_by_message.get(tally["message"], 0) + int(tally["n"])
        return {"bytes_freed": sum(j.get("bytes_freed", 0) for j in summaries),
                "failed_by_message": message_tally(failed_by_message), "dirs_removed_by_dir_jobs": removed_by_dir_jobs}
