"""drainstatus.py: an RSE's drain (rate, expected end, next slice) and why it waits, from its summary."""
from __future__ import annotations

from typing import Any

import pytest

from MSUnmerged.drainstatus import Waiting, drain, next_cycle, rate, total, waiting

HOUR = 3600.0
DRAINED = [{"t": 0, "n": 0}, {"t": 100, "n": 300}]  # 3 files/s


def rse(counters: dict[str, Any], drained: Any = (), state: str = "running", sizes: Any = None) -> dict[str, Any]:
    return {"name": "T2_X", "generation": 1.0, "state": state, "counters": counters, "drained": list(drained),
            "plan": {"slice_sizes": sizes} if sizes else {}}


def test_rate_from_the_recent_counts() -> None:
    assert rate([]) is None and rate([{"t": 0, "n": 0}]) is None
    # First to last, the pause between included.
    assert rate([{"t": 0, "n": 0}, {"t": 10, "n": 100}, {"t": 100, "n": 900}]) == 9.0
    assert rate([{"t": 0, "n": 50}, {"t": 100, "n": 50}]) == 0.0  # counted again, nothing more done


def test_next_cycle_is_the_next_multiple_of_the_interval() -> None:
    assert next_cycle(10 * HOUR + 5, HOUR) == 11 * HOUR and next_cycle(11 * HOUR, HOUR) == 12 * HOUR


@pytest.mark.parametrize("counters, expected, words", [
    ({"jobs_by_state": {"running": 2, "queued": 3}, "pending": 9}, Waiting.WORKING, "2 jobs running, 3 queued"),
    ({"jobs_by_state": {"queued": 3}, "pending": 9}, Waiting.FOR_SLOT, "waiting for a slot"),
    ({"jobs_by_state": {"held": 1}, "pending": 9}, Waiting.HELD, "held"),
    ({"jobs_by_state": {"planned": 5, "finished": 4}, "unreleased_jobs": 2, "pending": 9}, Waiting.FOR_TOP_UP,
     "3 jobs ready"),
    ({"jobs_by_state": {"planned": 2, "finished": 4}, "unreleased_jobs": 2, "slice": 1, "slices": 3,
      "unreleased_files": 800, "pending": 800}, Waiting.FOR_SLICE, "the next cycle releases the next (800 files"),
    ({"jobs_by_state": {"finished": 4}, "failed": 3}, Waiting.FOR_CYCLE, "next cycle"),
    ({"jobs_by_state": {"finished": 4, "superseded": 7}}, Waiting.DONE, "nothing left"),
])
def test_why_an_rse_waits(counters: dict[str, Any], expected: Waiting, words: str) -> None:
    got, why = waiting(rse(counters))
    assert got is expected and words in why
    assert waiting({"generation": None})[0] is Waiting.NO_PLAN


def test_an_unthrottled_backlog_ends_at_its_rate() -> None:
    d = drain(rse({"pending": 900, "jobs_by_state": {"running": 1}}, DRAINED), 100.0, HOUR)
    assert (d["waiting"], d["backlog_files"], d["rate_files_s"]) == ("working", 900, 3.0)
    assert d["eta_s"] == 300.0 and d["expected_end"] == 400.0 and "next_slice_at" not in d
    unknown = drain(rse({"pending": 900, "jobs_by_state": {"running": 1}}), 100.0, HOUR)
    assert unknown["rate_files_s"] is None and unknown["expected_end"] is None


def test_a_throttled_backlog_waits_for_its_slices() -> None:
    # 3 slices of 6,000; slice 1 released and done at 100 files/s; the RSE waits for the next cycle.
    counters = {"pending": 12_000, "unreleased_files": 12_000, "unreleased_jobs": 4, "slice": 1, "slices": 3,
                "jobs_by_state": {"planned": 4, "finished": 2}}
    now = 10 * HOUR + 120
    sizes = [6000, 6000, 6000]
    d = drain(rse(counters, [{"t": now - 60, "n": 0}, {"t": now, "n": 6000}], sizes=sizes), now, HOUR)
    assert d["waiting"] == "waiting_for_slice" and d["next_slice_at"] == 11 * HOUR and d["next_slice_files"] == 6000
    # One slice a cycle: the last is released two cycles from now and drains in 60 s.
    assert d["expected_end"] == 12 * HOUR + 60 and d["eta_s"] == pytest.approx(12 * HOUR + 60 - now)
    # Slice 2 half done, at the same rate: released work ends in 30 s, the next slice at the cycle after that.
    counters.update(pending=9000, unreleased_files=6000, slice=2, unreleased_jobs=2,
                    jobs_by_state={"running": 1, "planned": 2})
    half = [{"t": now - 90, "n": 0}, {"t": now, "n": 9000}]
    d = drain(rse(counters, half, sizes=sizes), now, HOUR)
    assert d["next_slice_at"] == 11 * HOUR and d["expected_end"] == 11 * HOUR + 60
    late = drain(rse(counters, half, sizes=sizes), 11 * HOUR - 10, HOUR)
    assert late["next_slice_at"] == 12 * HOUR  # its released work outlasts this cycle: the one after


def test_the_fleet_total() -> None:
    a = drain(rse({"pending": 900, "jobs_by_state": {"running": 1}}, DRAINED), 100.0, HOUR)
    b = drain(rse({"pending": 0, "jobs_by_state": {"finished": 1}}, state="clean"), 100.0, HOUR)
    t = total([a, b])
    assert (t["backlog_files"], t["rate_files_s"], t["expected_end"], t["unknown_end"]) == (900, 3.0, 400.0, 0)
    assert t["by_waiting"]["working"] == 1 and t["by_waiting"]["done"] == 1
    c = drain(rse({"pending": 5, "jobs_by_state": {"queued": 1}}), 100.0, HOUR)
    assert total([a, c])["expected_end"] is None and total([a, c])["unknown_end"] == 1
