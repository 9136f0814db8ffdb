"""The per-RSE state machine: from the ConMon scan and the ledger's progress to what to do next.

Pure: plain data in, a Decision out; the service carries it out and records the reason.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, Mapping, Optional

from MSUnmerged.guards import GuardTripped, check_scan


class Action(enum.StrEnum):
    """What the state machine decides (also RunResult.action)."""

    SKIP = "skip"  # nothing to do now; `reason` says why
    NEW_GENERATION = "new_generation"  # a newer dump: plan it as a fresh generation
    RESUME = "resume"  # same dump, work left: (re)submit what is planned or retriable
    FINISH = "finish"  # same dump, nothing left: clean, done with errors, or dry run done


class RSEState(enum.StrEnum):
    """An RSE's state on its ledger document (the values are stored and shown)."""

    NEW = "new"  # recorded, never worked on
    SKIPPED = "skipped"
    GUARDED = "guarded"  # a planner guard refused: nothing submitted
    PLANNED = "planned"
    RUNNING = "running"  # jobs live in the batch system
    CLEAN = "clean"
    DONE_WITH_ERRORS = "done_with_errors"  # nothing left to try on this dump, some files failed
    DRY_RUN_DONE = "dry_run_done"  # dry run: every file found and left; real mode deletes them (same dump)
    FAILED = "failed"  # the service could not work on it (source, ledger, backend error)


# Skip and finish reasons besides the scan's (guards.check_scan names those).
DUMP_OLDER = "dump_older_than_current"
JOBS_RUNNING = "jobs_running"
FILES_FAILED = "files_failed"
DRY_RUN = "dry_run"  # FINISH reason: the dump was worked in dry run
SITE_CONFIG_BACKOFF = "site_config_backoff"  # its jobs wait: the site configuration was unusable (config_error)


@dataclass
class Progress:
    """What the ledger says is left of the current generation."""

    planned_jobs: int = 0  # recorded, not yet submitted
    retriable: int = 0  # failed/unknown files with tries left
    exhausted: int = 0  # failed/unknown files out of tries
    would_delete: int = 0  # files a dry run found and left


@dataclass
class Decision:
    action: Action
    reason: str = ""
    detail: str = ""
    generation: Optional[float] = None
    state: Optional[RSEState] = None  # for FINISH: clean, done_with_errors or dry_run_done


def decide(scan: Optional[Mapping[str, Any]], current: Optional[float], progress: Progress, now: float,
           max_scan_age_h: float, dry_run: bool = True) -> Decision:
    """Decide for one RSE. `scan` is its entry of ConMon stats; `current` the generation worked on;
    `dry_run` the service's mode now (files a dry run left are deleted for real once it is off)."""
    try:
        end = check_scan(scan, max_scan_age_h, now).end_time
    except GuardTripped as unusable:  # the planner's scan guard, under the same reason names
        return Decision(Action.SKIP, unusable.reason, unusable.detail)
    if current is None or end > current:
        return Decision(Action.NEW_GENERATION, generation=end)
    if end < current:
        return Decision(Action.SKIP, DUMP_OLDER, f"the scan ({end}) is older than the generation worked on ({current})")
    real = 0 if dry_run else progress.would_delete
    if progress.planned_jobs or progress.retriable or real:
        return Decision(Action.RESUME, generation=end,
                        detail=f"{progress.planned_jobs} jobs to submit, {progress.retriable} files to retry, "
                               f"{real} files a dry run left to delete for real")
    dry_run_done = Decision(Action.FINISH, generation=end, state=RSEState.DRY_RUN_DONE, reason=DRY_RUN,
                            detail=f"dry run: {progress.would_delete} files would be deleted; "
                                   "set service.dry_run = false to delete them")
    if progress.would_delete:
        return dry_run_done
    if progress.exhausted:
        return Decision(Action.FINISH, generation=end, state=RSEState.DONE_WITH_ERRORS, reason=FILES_FAILED,
                        detail=f"{progress.exhausted} files failed on every try; waiting for a new dump")
    # Never clean in dry run, even when every planned file was found missing: nothing was deleted.
    return dry_run_done if dry_run else Decision(Action.FINISH, generation=end, state=RSEState.CLEAN)
