"""The ledger's sets of states: one str-valued enum per set, so stored values are the plain strings."""
from __future__ import annotations

import enum

from MSUnmerged.worker.report import DIR_OUTCOMES, EXPECTED_DIR_REASONS


class FileState(str, enum.Enum):
    """A planned file's state in the ledger."""

    PLANNED = "planned"  # in a job, outcome not known yet (see the job's state)
    DELETED = "deleted"
    WOULD_DELETE = "would_delete"  # dry run: the job found the file and left it
    MISSING = "missing"  # already gone at the site
    FAILED = "failed"  # see error_class / error; retried up to the attempt limit
    UNKNOWN = "unknown"  # the job ended without reporting on this file; retried
    SKIPPED_PROTECTED = "skipped_protected"  # became protected after planning: dropped, never deleted

    def __str__(self) -> str:
        return self.value


class JobState(str, enum.Enum):
    """A cleanup job's state in the ledger; the batch backends map their own states onto these."""

    PLANNED = "planned"  # recorded in the ledger, not yet handed to a batch system
    SUBMITTING = "submitting"  # intent recorded in the ledger, submit not yet confirmed
    QUEUED = "queued"
    RUNNING = "running"
    HELD = "held"
    FINISHED = "finished"  # the worker exited (or nothing was left to send); its report decides each file's outcome
    FAILED = "failed"  # the batch system gave up on it (removed, killed, time limit, ...)
    REMOVED = "removed"  # we removed it (revalidation, policy)
    VANISHED = "vanished"  # unknown to the batch system, no report: files get outcome "unknown"
    SUPERSEDED = "superseded"  # never submitted: a newer dump's plan replaced its generation

    @property
    def terminal(self) -> bool:
        return self in (JobState.FINISHED, JobState.FAILED, JobState.REMOVED, JobState.VANISHED,
                        JobState.SUPERSEDED)


# Directory states are the worker's directory outcomes.
DirState = enum.Enum("DirState", {name.upper(): name for name in DIR_OUTCOMES}, type=str)  # type: ignore[misc]
DirState.__doc__ = "A directory record's state: the worker's directory outcome."
DirState.__str__ = lambda self: self.value  # type: ignore[method-assign]

OUTCOME_STATES = frozenset(FileState) - {FileState.PLANNED}
RETRIABLE = (FileState.FAILED, FileState.UNKNOWN)
# May still be deleted: dropped when they become protected.
NOT_DELETED = (FileState.PLANNED, *RETRIABLE, FileState.WOULD_DELETE)
# "submitted" (a query, not a stored state): planned files whose job is live in the batch system.
SUBMITTED = "submitted"

# Several jobs may report on one directory (a shared parent): its record keeps the outcome of highest
# rank, so collection order does not matter (removed outranks missing: a job running beside the one that
# removed it finds it gone).
DIR_RANK = {DirState.DRY_RUN: 0, DirState.NOT_ATTEMPTED: 1, DirState.NOT_EMPTY: 2, DirState.TIMEOUT: 3,
            DirState.STORAGE_ERROR: 3, DirState.PERMISSION_DENIED: 3, DirState.AUTH_FAILED: 3,
            DirState.REFUSED: 4, DirState.MISSING: 5, DirState.REMOVED: 6}
assert set(DIR_RANK) == set(DirState)
DIR_ERRORS = (DirState.PERMISSION_DENIED, DirState.TIMEOUT, DirState.STORAGE_ERROR, DirState.AUTH_FAILED)


def dir_failed(state: str, reason: str) -> bool:
    """A directory not removed for a storage error or an unexpected refusal (not the plan's keep rules)."""
    return state in DIR_ERRORS or state == DirState.REFUSED and reason not in EXPECTED_DIR_REASONS


# Job states: JobState.PLANNED before intent, then what the batch system reports.
LIVE_JOB_STATES = (JobState.SUBMITTING, JobState.QUEUED, JobState.RUNNING, JobState.HELD)
BACKEND_JOB_STATES = (JobState.QUEUED, JobState.RUNNING, JobState.HELD)
# Stored by code before issue 39 for a job with no file left to send: one final state now (ensure_indexes rewrites).
OLD_FINAL_STATES = {"collected": JobState.FINISHED}
