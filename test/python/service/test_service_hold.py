"""A cycle's hold for its largest RSE's first batch (service/hold.py): which RSE it holds for, how many runs may be
under way meanwhile, when it ends."""
from __future__ import annotations

from typing import Any

from MSUnmerged.service.hold import HOLD_SIZE_RATIO, HoldEnd, held_for, hold_end, runs_during_hold
from MSUnmerged.service.rses import order_rses

BIG, MID, SMALL = "T2_BB_Big", "T2_AA_Mid", "T2_CC_Small"


def scan(files: Any) -> dict[str, Any]:
    return {"status": "done", "end_time": 1.0, "files": files, "directories": 7}


def stats_of(**files: Any) -> dict[str, Any]:
    return {rse: scan(n) for rse, n in files.items()}


def held(stats: dict[str, Any], parallel: int = 4) -> Any:
    return held_for(order_rses(stats, stats), stats, parallel)


def test_the_partition_of_issue_29_holds_for_its_5m_rse() -> None:
    stats = stats_of(T2_P5M=5_000_000, **{f"T2_P1M_{k}": 1_000_000 for k in range(5)},
                     **{f"T2_P100K_{k}": 100_000 for k in range(30)}, **{f"T2_P10K_{k}": 10_000 for k in range(114)})
    assert held(stats) == "T2_P5M"


def test_a_next_largest_of_more_than_half_its_size_is_not_held_back() -> None:
    assert held(stats_of(**{BIG: 1000, MID: 1000 // HOLD_SIZE_RATIO, SMALL: 10})) == BIG
    assert held(stats_of(**{BIG: 1000, MID: 1000 // HOLD_SIZE_RATIO + 1, SMALL: 10})) is None
    assert held(stats_of(**{BIG: 300, MID: 300})) is None  # equal sizes: nothing to favour


def test_the_other_threads_must_have_time_to_spare() -> None:
    # 1000 files against 3,000 on 3 other threads: the cycle does not end with the largest RSE, no hold.
    many = {f"T2_X_{k:02d}": 100 for k in range(30)}
    assert held(stats_of(**{BIG: 1000}, **many)) == BIG
    assert held(stats_of(**{BIG: 1000}, **many, T2_X_30=100)) is None
    assert held(stats_of(**{BIG: 1000}, **many, T2_X_30=100), parallel=5) == BIG  # more threads, more time


def test_no_hold_with_one_thread_one_rse_or_a_size_unknown() -> None:
    stats = stats_of(**{BIG: 1000, SMALL: 10})
    assert held(stats, parallel=1) is None
    assert held(stats_of(**{BIG: 1000})) is None
    assert held({**stats, "T2_DD_Running": {"status": "started", "end_time": None}}) is None  # it goes first
    assert held({**stats, "T2_DD_Text": scan("5000")}) is None
    assert held_for([BIG, SMALL, "T2_NOSCAN"], stats, 4) is None  # not in stats at all
    assert held_for([], {}, 4) is None


def test_half_the_threads_run_during_a_hold_at_least_the_held_rse() -> None:
    assert [runs_during_hold(p) for p in (1, 2, 3, 4, 8)] == [1, 1, 1, 2, 4]


def test_the_hold_ends_at_the_first_batch_the_run_s_end_or_its_bound() -> None:
    assert hold_end(False, False, 10.0, 130.0) is None
    assert hold_end(True, False, 10.0, 130.0) == HoldEnd.FIRST_BATCH
    assert hold_end(True, True, 200.0, 130.0) == HoldEnd.FIRST_BATCH  # a batch went out: that is what is said
    assert hold_end(False, True, 10.0, 130.0) == HoldEnd.RUN_ENDED
    assert hold_end(False, False, 130.0, 130.0) == HoldEnd.TIMED_OUT
    assert hold_end(False, True, 131.0, 130.0) == HoldEnd.RUN_ENDED
