"""A throttled generation's slices in the ledger: one is released per cycle, once everything released before it
has been submitted (throttle.py cuts them; `record_plan` keeps each job's `slice` and the generation's
`slice_sizes`; `released` on the generation entry counts the slices released so far)."""
from __future__ import annotations

from typing import Any, Mapping, Sequence

from MSUnmerged.guards import PLAN_MODIFIED, GuardTripped
from MSUnmerged.ledger.base import LedgerBase
from MSUnmerged.ledger.retry import with_retry
from MSUnmerged.ledger.states import JobState


def check(job_sizes: Sequence[int], job_slices: Sequence[int], slice_sizes: Sequence[int]) -> None:
    """A plan's slices fit its jobs: one slice per job, numbered 1, 2, ... in job order, and each slice's size the
    sum of its jobs' (the count guard judges the largest); GuardTripped plan_modified otherwise."""
    if not job_slices and not slice_sizes:
        return
    sums = [0] * len(slice_sizes)
    ordered = len(job_slices) == len(job_sizes) and list(job_slices) == sorted(job_slices)
    for sl, size in zip(job_slices, job_sizes):
        if not ordered or not 1 <= sl <= len(sums):
            raise GuardTripped(PLAN_MODIFIED, f"the plan's job slices {list(job_slices)[:20]} do not fit its "
                                              f"{len(job_sizes)} jobs and {len(slice_sizes)} slices")
        sums[sl - 1] += size
    if sums != list(slice_sizes) or 0 in sums:
        raise GuardTripped(PLAN_MODIFIED, f"the plan's slice sizes {list(slice_sizes)[:20]} are not the sums of "
                                          f"their jobs' files {sums[:20]}")


def released(entry: Mapping[str, Any]) -> int:
    """Slices released so far; a generation without slices has everything released (a huge number)."""
    return int(entry.get("released", 0)) if entry.get("slice_sizes") else 1 << 62


def is_released(job: Mapping[str, Any], entry: Mapping[str, Any]) -> bool:
    """Whether a job may be submitted: its slice is released (jobs of retry rounds have no slice)."""
    return int(job.get("slice") or 0) <= released(entry)


def cycle_counters(entry: Mapping[str, Any]) -> dict[str, int]:
    """What the RSE's counters say of the throttle: `cycle_files` (the files of the slice released last),
    `slice` (slices released), `slices` (in all) and `unreleased_files` (in the slices not released yet); nothing
    when the generation is not throttled."""
    sizes = entry.get("slice_sizes") or []
    if not sizes:
        return {}
    done = min(released(entry), len(sizes))
    return {"cycle_files": sizes[done - 1] if done else 0, "slice": done, "slices": len(sizes),
            "unreleased_files": sum(sizes[done:])}


class Slices:
    """A throttled generation's slices released, and its jobs waiting for theirs."""

    def __init__(self, base: LedgerBase) -> None:
        self.base = base

    def release_next(self, rse: str, generation: float) -> dict[str, Any]:
        """Release the generation's next slice when every job of the slices released so far has been submitted;
        returns the generation's entry as it stands after (its submission reads what is released there). Repeating it
        before those jobs are submitted changes nothing."""
        entry = self.base.generation_entry(rse, generation)
        sizes, done = entry.get("slice_sizes") or [], released(entry)
        if not sizes or done >= len(sizes):
            return entry
        waiting = [j for j in self.base.jobs_in(rse, [JobState.PLANNED], generation) if is_released(j, entry)]
        if waiting:
            return entry
        with_retry(lambda: self.base.rses.update_one(
            {"_id": rse, "generations": {"$elemMatch": {"gen": generation, "released": done}}},
            {"$set": {"generations.$.released": done + 1}}), f"release slice {done + 1} of {rse}")
        return self.base.generation_entry(rse, generation)

    def unreleased_jobs(self, rse: str, generation: float, entry: Mapping[str, Any]) -> int:
        """The generation's planned jobs whose slice is not released yet (0 when it is not throttled)."""
        if not entry.get("slice_sizes"):
            return 0
        waiting = {"rse": rse, "gen": generation, "state": JobState.PLANNED, "slice": {"$gt": released(entry)}}
        return with_retry(lambda: self.base.jobs.count_documents(waiting), "unreleased jobs")
