"""A cycle's hold for its largest RSE: while that RSE has not submitted its first batch, the cycle runs fewer RSEs
at once, so that its planning and recording share the cores, the GIL and the database with fewer others. Pure
decisions: which RSE is held for, how many runs may be under way, when the hold ends."""
from __future__ import annotations

import enum
from typing import Any, Mapping, Optional, Sequence

from MSUnmerged.guards import scan_files

# The largest RSE is held for only when it has at least this many times the files of the next largest: a run
# nearly as long, started after the hold, could end after it and lengthen the cycle.
HOLD_SIZE_RATIO = 2


class HoldEnd(enum.StrEnum):
    """Why a cycle's hold ended (its log line)."""

    FIRST_BATCH = "first batch submitted"
    RUN_ENDED = "run ended before a batch"  # nothing to submit, a failure, leased elsewhere
    TIMED_OUT = "no first batch within service.largest_first_hold_s"


def held_for(order: Sequence[str], stats: Mapping[str, Any], parallel: int) -> Optional[str]:
    """The RSE a cycle holds for: the first of `order` (order_rses) when its ConMon scan's files are known and
    much larger than the rest: at least HOLD_SIZE_RATIO times the next largest's, and at least the files of all
    the others per other thread (the other threads then have time to spare before the cycle's end: a cycle
    ends with its largest RSE). None with one thread, one RSE, or a size unknown (those go first in `order`)."""
    if parallel < 2 or len(order) < 2:
        return None
    sizes = [scan_files(stats.get(rse)) for rse in order]
    largest, rest = sizes[0], sizes[1:]
    if largest is None or any(files is None for files in rest):
        return None
    others: list[int] = [files for files in rest if files is not None]
    if largest < HOLD_SIZE_RATIO * max(others) or largest * (parallel - 1) < sum(others):
        return None
    return order[0]


def runs_during_hold(parallel: int) -> int:
    """How many runs may be under way during a hold: half the `parallel` threads, at least one (the held RSE)."""
    return max(1, parallel // 2)


def hold_end(first_batch: bool, run_over: bool, now: float, until: float) -> Optional[HoldEnd]:
    """Whether the hold is over at `now` (time.monotonic()), and why: its RSE submitted its first batch, its run
    ended without one, or the time bound `until` passed (a run stuck before its first batch cannot stall the
    cycle). None: still holding."""
    if first_batch:
        return HoldEnd.FIRST_BATCH
    if run_over:
        return HoldEnd.RUN_ENDED
    if now >= until:
        return HoldEnd.TIMED_OUT
    return None
