"""How an RSE's backlog drains: files per second over its recent counts, the expected end, the next slice and when,
and why it waits when nothing runs. Pure: an RSE's summary (ledger/view.py) in, plain data out; the page, the
command line, data/status and /metrics all show this one answer.

Cycles start at multiples of `service.interval_s` (service/loop.py), so the next one is known from the clock; a
throttled RSE's next slice is released by the first cycle that finds none of its jobs planned or in flight
(ledger/slices.py, service/run.py).
"""
from __future__ import annotations

import enum
import math
from typing import Any, Mapping, Optional, Sequence

# Counts of an RSE's processed files kept on its document (`drained`: {"t": time, "n": files with an outcome}).
SAMPLES_KEPT = 12
FINAL_STATES = ("clean", "done_with_errors", "dry_run_done")  # statemachine.RSEState's ends of a dump


class Waiting(enum.StrEnum):
    """What an RSE's backlog is doing now; one of these on every RSE (page, status, data/status, /metrics)."""

    NO_PLAN = "no_plan"  # no dump planned yet
    WORKING = "working"  # jobs run now
    FOR_SLOT = "waiting_for_slot"  # its jobs are queued in the batch system (local: every slot is taken)
    HELD = "held"  # its jobs are held in the batch system
    FOR_TOP_UP = "waiting_for_top_up"  # jobs of released slices wait for room (max_in_flight) or the next top-up
    FOR_SLICE = "waiting_for_slice"  # the released slices are done; the next cycle releases the next slice
    FOR_CYCLE = "waiting_for_cycle"  # files to retry or a plan to resume: the next cycle starts them
    DONE = "done"  # nothing left of this dump


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def next_cycle(now: float, interval_s: float) -> float:
    """When the next cycle starts (a multiple of the interval)."""
    return (math.floor(now / interval_s) + 1) * interval_s


def rate(samples: Sequence[Mapping[str, float]]) -> Optional[float]:
    """Files per second from the first to the last sample (idle time between included); None before two."""
    if len(samples) < 2:
        return None
    t0, n0, t1, n1 = samples[0]["t"], samples[0]["n"], samples[-1]["t"], samples[-1]["n"]
    if t1 <= t0 or n1 <= n0:
        return None if t1 <= t0 else 0.0
    return (n1 - n0) / (t1 - t0)


def waiting(rse: Mapping[str, Any]) -> tuple[Waiting, str]:
    """The RSE's Waiting and one sentence saying why."""
    c = rse.get("counters") or {}
    jobs = {k: _int(v) for k, v in (c.get("jobs_by_state") or {}).items()}
    unreleased_jobs = _int(c.get("unreleased_jobs"))
    ready = jobs.get("planned", 0) - unreleased_jobs
    queued = jobs.get("queued", 0) + jobs.get("submitting", 0)
    if rse.get("generation") is None:
        return Waiting.NO_PLAN, "no dump planned yet"
    if jobs.get("running", 0):
        more = f", {queued:,} queued" if queued else ""
        return Waiting.WORKING, f"{jobs['running']:,} jobs running{more}"
    if queued:
        return Waiting.FOR_SLOT, (f"{queued:,} jobs queued in the batch system, none running: waiting for a slot "
                                  "(local jobs: jobs.local_parallel, taken in submission order across RSEs)")
    if jobs.get("held", 0):
        return Waiting.HELD, f"{jobs['held']:,} jobs held in the batch system"
    if ready > 0:
        return Waiting.FOR_TOP_UP, (f"{ready:,} jobs ready: submitted between cycles (jobs.top_up_s) or by the "
                                    "next cycle as max_in_flight leaves room")
    if unreleased_jobs:
        return Waiting.FOR_SLICE, (f"slice {_int(c.get('slice'))} of {_int(c.get('slices'))} done: the next cycle "
                                   f"releases the next ({_int(c.get('unreleased_files')):,} files in "
                                   f"{unreleased_jobs:,} jobs wait)")
    if str(rse.get("state")) in FINAL_STATES or not (_int(c.get("pending")) or _int(c.get("unknown"))
                                                     or _int(c.get("failed"))):
        return Waiting.DONE, "nothing left of this dump"
    return Waiting.FOR_CYCLE, "the next cycle resumes it (files to retry, or jobs to plan)"


def drain(rse: Mapping[str, Any], now: float, interval_s: float) -> dict[str, Any]:
    """The RSE's drain: `waiting` and `why`; `backlog_files` (planned, outcome not known), of which
    `unreleased_files` in slices not released yet; `rate_files_s` (None: not known yet); `eta_s` and
    `expected_end` (None: not known); `slice`, `slices`, `next_slice_at` and `next_slice_files` for a throttled
    plan; `next_cycle_at`."""
    c = rse.get("counters") or {}
    state, why = waiting(rse)
    backlog, unreleased = _int(c.get("pending")), _int(c.get("unreleased_files"))
    r = rate(rse.get("drained") or [])
    cycle_at = next_cycle(now, interval_s)
    sizes = [_int(s) for s in (rse.get("plan") or {}).get("slice_sizes") or []]
    done_slices = _int(c.get("slice"))
    out: dict[str, Any] = {"waiting": state.value, "why": why, "backlog_files": backlog,
                           "unreleased_files": unreleased, "rate_files_s": None if r is None else round(r, 3),
                           "eta_s": None, "expected_end": None, "next_cycle_at": cycle_at}
    if sizes:
        out.update(slice=done_slices, slices=len(sizes), next_slice_at=None, next_slice_files=None)
    if state is Waiting.DONE or backlog == 0:
        out["eta_s"] = 0.0
        return out
    released_left = max(0, backlog - unreleased)
    # The released work ends now (nothing left), at the rate's pace, or is not known (no rate yet).
    released_end: Optional[float] = now if released_left == 0 else None if not r else now + released_left / r
    if sizes and done_slices < len(sizes):
        # Released by the first cycle after the released work is over (a cycle with jobs in flight only polls).
        slice_at = None if released_end is None else next_cycle(released_end - 1e-9, interval_s) \
            if released_end > now else cycle_at
        out.update(next_slice_at=slice_at, next_slice_files=sizes[done_slices])
        if slice_at is not None and r:
            # One slice a cycle at most; each drains at the rate once released.
            last_at = slice_at + (len(sizes) - done_slices - 1) * interval_s
            end = max(last_at + sizes[-1] / r, now + backlog / r)
            out.update(expected_end=round(end, 1), eta_s=round(end - now, 1))
        return out
    if released_end is not None:
        out.update(expected_end=round(released_end, 1), eta_s=round(released_end - now, 1))
    return out


def total(drains: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The fleet's drain: backlog and rate summed, the latest expected end (None while any RSE with a backlog has
    none: `unknown_end` counts those), RSEs per Waiting."""
    by_waiting = {w.value: 0 for w in Waiting}
    for d in drains:
        by_waiting[d["waiting"]] = by_waiting.get(d["waiting"], 0) + 1
    left = [d for d in drains if d["backlog_files"]]
    unknown = sum(1 for d in left if d["expected_end"] is None)
    ends = [d["expected_end"] for d in left if d["expected_end"] is not None]
    return {"backlog_files": sum(d["backlog_files"] for d in drains),
            "unreleased_files": sum(d["unreleased_files"] for d in drains),
            "rate_files_s": round(sum(d["rate_files_s"] or 0 for d in drains), 3),
            "expected_end": None if unknown or not ends else max(ends), "unknown_end": unknown,
            "by_waiting": by_waiting}
