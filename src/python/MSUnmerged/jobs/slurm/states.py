"""Slurm's job states (squeue, sacct, slurmrestd) and the job's marker files -> the ledger's JobState."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Optional

from MSUnmerged.jobs.backend import JobState
from MSUnmerged.worker.ids import EXIT_CODE_NAME, REMOVED_NAME

# Slurm job states (squeue %T, sacct State, REST job_state) -> ledger state; reasons for the failures.
_RUNNING = {"RUNNING", "CONFIGURING", "COMPLETING", "STAGE_OUT", "SIGNALING", "RESIZING"}
_QUEUED = {"PENDING", "REQUEUED", "REQUEUE_FED"}
_HELD = {"SUSPENDED": "suspended", "STOPPED": "stopped", "REQUEUE_HOLD": "held for requeue",
         "SPECIAL_EXIT": "special exit", "RESV_DEL_HOLD": "reservation deleted"}
_FAILED = {"TIMEOUT": "time limit", "NODE_FAIL": "node failure", "BOOT_FAIL": "node boot failure",
           "OUT_OF_MEMORY": "out of memory", "DEADLINE": "deadline", "PREEMPTED": "preempted",
           "REVOKED": "revoked"}
# Pending reasons under which the job will not start without someone acting: HELD (needs attention), with
# Slurm's reason kept. Matched on the reason's first part: "ReqNodeNotAvail, UnavailableNodes:c[1-2]".
_HOLD_REASONS = {"JobHeldUser", "JobHeldAdmin", "PartitionTimeLimit", "PartitionNodeLimit", "PartitionDown",
                 "PartitionInactive", "BadConstraints", "InvalidAccount", "InvalidQOS", "AssociationJobLimit",
                 "DependencyNeverSatisfied", "QOSMaxWallDurationPerJobLimit", "ReqNodeNotAvail", "NodeDown",
                 "launch failed requeued held",
                 # every node the job may use is drained or down (Slurm >= 21.08 words it so)
                 "Nodes required for job are DOWN"}


def _held(reason: str) -> bool:
    return reason.split(",")[0].strip() in _HOLD_REASONS


@dataclass
class SlurmRecord:
    """One array task as Slurm reports it."""

    batch_id: str  # "<array job id>_<task id>"; "" from accounting, which knows raw ids only
    name: str
    state: str
    reason: str = ""


def map_state(record: Optional[SlurmRecord], markers: Mapping[str, str]) -> tuple[JobState, str, Optional[int]]:
    """Ledger state, reason and exit code from Slurm's record (None: Slurm forgot the job) and the job's markers."""
    exit_code = int(markers[EXIT_CODE_NAME]) if markers.get(EXIT_CODE_NAME, "").lstrip("-").isdigit() else None
    removed = markers.get(REMOVED_NAME)
    if record is None:
        if exit_code is not None:
            return JobState.FINISHED, "", exit_code
        if removed is not None:
            return JobState.REMOVED, removed, None
        return JobState.VANISHED, "unknown to Slurm, no exit code", None
    state = record.state.split()[0].rstrip("+") if record.state else ""  # sacct: "CANCELLED by 0"
    reason = "" if record.reason in ("", "None") else record.reason
    if state in _QUEUED:
        return (JobState.HELD if _held(reason) else JobState.QUEUED), reason, None
    if state in _RUNNING:
        return JobState.RUNNING, reason, None
    if state in _HELD:
        return JobState.HELD, _HELD[state], None
    if state == "COMPLETED":
        return JobState.FINISHED, "", 0 if exit_code is None else exit_code
    if state == "FAILED":
        # The worker ran and exited non-zero: its report decides. Otherwise the job never got that far.
        if exit_code is not None:
            return JobState.FINISHED, "", exit_code
        return JobState.FAILED, f"job failed ({reason or 'no exit code'})", None
    if state == "CANCELLED":
        if removed is not None:
            return JobState.REMOVED, removed, None
        return JobState.FAILED, "cancelled outside MSUnmerged", None
    if state in _FAILED:
        return JobState.FAILED, _FAILED[state], None
    # Fail closed: a state we do not know never counts as done.
    return JobState.HELD, f"unknown Slurm state {record.state}", None
