"""The per-RSE state machine: pure decisions, dry run never reported clean, real mode works the same dump."""
from __future__ import annotations

import pytest

from MSUnmerged import guards, statemachine


def test_decide_stays_pure_about_dry_run() -> None:
    scan = {"status": "done", "start_time": 900.0, "end_time": 1000.0}
    left = statemachine.Progress(would_delete=5)
    dry = statemachine.decide(scan, 1000.0, left, 1000.0, 48, dry_run=True)
    assert (dry.action, dry.state, dry.reason) == ("finish", "dry_run_done", "dry_run")
    real = statemachine.decide(scan, 1000.0, left, 1000.0, 48, dry_run=False)
    assert real.action == "resume" and "5 files a dry run left" in real.detail
    failed = statemachine.Progress(would_delete=2, exhausted=3)  # a dry run is never reported clean or done
    assert statemachine.decide(scan, 1000.0, failed, 1000.0, 48).state == "dry_run_done"
    # Every planned file found missing: clean in real mode only; a dry run deleted nothing (issue 23).
    assert statemachine.decide(scan, 1000.0, statemachine.Progress(), 1000.0, 48, dry_run=False).state == "clean"
    none_left = statemachine.decide(scan, 1000.0, statemachine.Progress(), 1000.0, 48, dry_run=True)
    assert (none_left.state, none_left.reason) == ("dry_run_done", "dry_run")
    assert set(statemachine.RSEState) >= {"clean", "dry_run_done", "failed", "running", "new"}


@pytest.mark.parametrize("scan, reason", [
    (None, guards.GUARD_SCAN_MISSING),
    ({"status": "started", "end_time": None}, guards.GUARD_SCAN_RUNNING),
    ({"status": "failed", "error": "timeout", "end_time": 1.0}, guards.GUARD_SCAN_FAILED),
    ({"status": "paused", "end_time": 1000.0}, guards.GUARD_SCAN_NOT_DONE),
    ({"status": "done", "end_time": None}, guards.GUARD_SCAN_NO_END_TIME),
    ({"status": "done", "end_time": True}, guards.GUARD_SCAN_NO_END_TIME),
    ({"status": "done", "end_time": 1000.0 - 49 * 3600}, guards.GUARD_SCAN_STALE),
    ({"status": "done", "start_time": 900.0, "end_time": float("nan")}, guards.GUARD_SCAN_NO_END_TIME),
    # The scan start fails closed like every other field (issue 23): missing, null, not a number, NaN,
    # after the end, in the future.
    ({"status": "done", "end_time": 1000.0}, "scan_start_missing"),
    ({"status": "done", "start_time": None, "end_time": 1000.0}, "scan_start_missing"),
    ({"status": "done", "start_time": "900", "end_time": 1000.0}, "scan_start_invalid"),
    ({"status": "done", "start_time": True, "end_time": 1000.0}, "scan_start_invalid"),
    ({"status": "done", "start_time": float("nan"), "end_time": 1000.0}, "scan_start_invalid"),
    ({"status": "done", "start_time": 1000.5, "end_time": 1000.0}, "scan_start_invalid"),
    ({"status": "done", "start_time": 1500.0, "end_time": 2000.0}, "scan_start_invalid"),  # now is 1000
])
def test_unusable_scan_is_skipped_with_the_planner_guard_reason(scan, reason) -> None:
    decision = statemachine.decide(scan, None, statemachine.Progress(), 1000.0, 48)
    with pytest.raises(guards.GuardTripped) as tripped:
        guards.check_scan(scan, 48, 1000.0)
    assert (decision.action, decision.reason, decision.detail) == ("skip", reason, tripped.value.detail)
