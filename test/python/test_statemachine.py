"""The per-RSE state machine: pure decisions, dry run never reported clean, real mode works the same dump."""
from __future__ import annotations

import pytest

from MSUnmerged import guards, statemachine


def test_decide_stays_pure_about_dry_run() -> None:
    scan = {"status": "done", "end_time": 1000.0}
    left = statemachine.Progress(would_delete=5)
    dry = statemachine.decide(scan, 1000.0, left, 1000.0, 48, dry_run=True)
    assert (dry.action, dry.state, dry.reason) == ("finish", "dry_run_done", "dry_run")
    real = statemachine.decide(scan, 1000.0, left, 1000.0, 48, dry_run=False)
    assert real.action == "resume" and "5 files a dry run left" in real.detail
    failed = statemachine.Progress(would_delete=2, exhausted=3)  # a dry run is never reported clean or done
    assert statemachine.decide(scan, 1000.0, failed, 1000.0, 48).state == "dry_run_done"
    assert statemachine.decide(scan, 1000.0, statemachine.Progress(), 1000.0, 48).state == "clean"
    assert set(statemachine.RSEState) >= {"clean", "dry_run_done", "failed", "running", "new"}


@pytest.mark.parametrize("scan, reason", [
    (None, guards.GUARD_SCAN_MISSING),
    ({"status": "started", "end_time": None}, guards.GUARD_SCAN_RUNNING),
    ({"status": "failed", "error": "timeout", "end_time": 1.0}, guards.GUARD_SCAN_FAILED),
    ({"status": "paused", "end_time": 1000.0}, guards.GUARD_SCAN_NOT_DONE),
    ({"status": "done", "end_time": None}, guards.GUARD_SCAN_NO_END_TIME),
    ({"status": "done", "end_time": True}, guards.GUARD_SCAN_NO_END_TIME),
    ({"status": "done", "end_time": 1000.0 - 49 * 3600}, guards.GUARD_SCAN_STALE),
])
def test_unusable_scan_is_skipped_with_the_planner_guard_reason(scan, reason) -> None:
    decision = statemachine.decide(scan, None, statemachine.Progress(), 1000.0, 48)
    with pytest.raises(guards.GuardTripped) as tripped:
        guards.check_scan(scan, 48, 1000.0)
    assert (decision.action, decision.reason, decision.detail) == ("skip", reason, tripped.value.detail)
