"""The per-RSE state machine: from the ConMon scan and the ledger's progress to what to do next.

Pure: plain data in, a Decision out; the service carries it out and records the reason.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Optional

# Actions.
SKIP = "skip"  # nothing to do now; `reason` says why
NEW_GENERATION = "new_generation"  # a newer dump: plan it as a fresh generation
RESUME = "resume"  # same dump, work left: (re)submit what is planned or retriable
FINISH = "finish"  # same dump, nothing left: clean, done with errors, or dry run done

# RSE states recorded on the RSE document.
STATE_SKIPPED = "skipped"
STATE_GUARDED = "guarded"  # a planner guard refused: nothing submitted
STATE_PLANNED = "planned"
STATE_RUNNING = "running"  # jobs live in the batch system
STATE_CLEAN = "clean"
STATE_DONE_WITH_ERRORS = "done_with_errors"  # nothing left to try on this dump, some files failed
STATE_DRY_RUN_DONE = "dry_run_done"  # dry run: every file found and left; real mode deletes them (same dump)
STATE_FAILED = "failed"  # the service could not work on it (source, ledger, backend error)
STATE_NEW = "new"  # recorded, never worked on
RSE_STATES = (STATE_NEW, STATE_SKIPPED, STATE_GUARDED, STATE_PLANNED, STATE_RUNNING, STATE_CLEAN,
              STATE_DONE_WITH_ERRORS, STATE_DRY_RUN_DONE, STATE_FAILED)

# Skip reasons.
SCAN_MISSING = "scan_missing"
SCAN_RUNNING = "scan_running"
SCAN_FAILED = "scan_failed"
SCAN_NOT_DONE = "scan_not_done"
SCAN_NO_END_TIME = "scan_end_time_missing"
SCAN_STALE = "scan_stale"
DUMP_OLDER = "dump_older_than_current"
JOBS_RUNNING = "jobs_running"
FILES_FAILED = "files_failed"
DRY_RUN = "dry_run"  # FINISH reason: the dump was worked in dry run


@dataclass
class Progress:
    """What the ledger says is left of the current generation."""

    planned_jobs: int = 0  # recorded, not yet submitted
    retriable: int = 0  # failed/unknown files with tries left
    exhausted: int = 0  # failed/unknown files out of tries
    would_delete: int = 0  # files a dry run found and left


@dataclass
class Decision:
    action: str
    reason: str = ""
    detail: str = ""
    generation: Optional[float] = None
    state: str = ""  # for FINISH: clean or done_with_errors


def _number(value: Any) -> Optional[float]:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def decide(scan: Optional[Mapping[str, Any]], current: Optional[float], progress: Progress, now: float,
           max_scan_age_h: float, dry_run: bool = True) -> Decision:
    """Decide for one RSE. `scan` is its entry of ConMon stats; `current` the generation worked on;
    `dry_run` the service's mode now (files a dry run left are deleted for real once it is off)."""
    if not scan:
        return Decision(SKIP, SCAN_MISSING, "ConMon has no scan of this RSE")
    status = scan.get("status")
    if status == "started":
        return Decision(SKIP, SCAN_RUNNING, "the ConMon scan is still running")
    if status == "failed":
        return Decision(SKIP, SCAN_FAILED, f"the ConMon scan failed: {scan.get('error') or 'no error given'}")
    if status != "done":
        return Decision(SKIP, SCAN_NOT_DONE, f"ConMon scan status is {status!r}")
    end = _number(scan.get("end_time"))
    if end is None:
        return Decision(SKIP, SCAN_NO_END_TIME, "the finished scan has no end_time")
    age_h = (now - end) / 3600.0
    if age_h > max_scan_age_h:
        return Decision(SKIP, SCAN_STALE, f"the scan ended {age_h:.1f} h ago, limit {max_scan_age_h:g} h")
    if current is None or end > current:
        return Decision(NEW_GENERATION, generation=end)
    if end < current:
        return Decision(SKIP, DUMP_OLDER, f"the scan ({end}) is older than the generation worked on ({current})")
    real = 0 if dry_run else progress.would_delete
    if progress.planned_jobs or progress.retriable or real:
        return Decision(RESUME, generation=end,
                        detail=f"{progress.planned_jobs} jobs to submit, {progress.retriable} files to retry, "
                               f"{real} files a dry run left to delete for real")
    if progress.would_delete:
        return Decision(FINISH, generation=end, state=STATE_DRY_RUN_DONE, reason=DRY_RUN,
                        detail=f"dry run: {progress.would_delete} files would be deleted; "
                               "set service.dry_run = false to delete them")
    if progress.exhausted:
        return Decision(FINISH, generation=end, state=STATE_DONE_WITH_ERRORS, reason=FILES_FAILED,
                        detail=f"{progress.exhausted} files failed on every try; waiting for a new dump")
    return Decision(FINISH, generation=end, state=STATE_CLEAN)
