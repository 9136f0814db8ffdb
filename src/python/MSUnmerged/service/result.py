"""What working an RSE reports: RunResult, the failure an error is recorded as, the steps a hook sees."""
from __future__ import annotations

import enum
from dataclasses import asdict, dataclass
from typing import Any, Callable, Optional

from MSUnmerged.diskspace import DISK_FULL, STATE_DISK_FULL
from MSUnmerged.guards import PLAN_MODIFIED, SCAN_GUARDS, GuardTripped
from MSUnmerged.jobs.backend import BackendError
from MSUnmerged.ledger import LedgerError
from MSUnmerged.redact import redact
from MSUnmerged.sources.errors import SourceError

# Steps of run_once, in order; `hook(step, rse)` is called after each (fault injection in tests).
STEPS = ("reconciled", "polled", "planned", "recorded", "intent", "submitted", "marked", "collected", "counted")
Hook = Callable[[str, str], None]


class RunAction(enum.StrEnum):
    """RunResult actions besides the state machine's (statemachine.Action)."""

    FAILED = "failed"  # the RSE could not be worked; `source` says what failed
    REFUSED = "refused"  # nothing was done and nothing recorded (unknown RSE, a plan directory without RSE)
    LEASED_ELSEWHERE = "leased_elsewhere"  # another instance works on it (also the reason)
    DONE_THIS_CYCLE = "done_this_cycle"  # another instance worked it in this cycle's slot (also the reason)
    POLL = "poll"  # its jobs are still in the batch system
    APPLY = "apply"  # apply_plan


# Reasons of failures that are not an outside part's.
LEASE_LOST = "lease_lost"  # another instance took the RSE over mid-run: nothing more is recorded
INTERNAL_ERROR = "internal_error"  # a bug (logged with its traceback)


@dataclass
class RunResult:
    """What one run_once or apply_plan did for an RSE (also the cycle document's entry)."""

    rse: str
    action: str  # a statemachine.Action or a RunAction
    state: str = ""  # a statemachine.RSEState, "" when none was recorded
    reason: str = ""
    detail: str = ""
    # For action failed: rucio, conmon, wmstats, ledger, backend, disk or internal (ledger.history.FAILURE_SOURCES).
    source: str = ""
    generation: Optional[float] = None
    submitted: int = 0
    collected: int = 0
    dropped_protected: int = 0
    removed_jobs: int = 0  # queued jobs removed by revalidation
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def jobs_detail(live: int) -> str:
    """An RSE's `detail` while its jobs run: how many are in the batch system now (the cycle and the top-up)."""
    return f"{live} jobs in the batch system"


def describe(res: RunResult) -> str:
    """One log line's worth of a result: the RSE, what was done, its state and why, the job counts."""
    parts = [f"{res.rse}: {res.action}"]
    if res.state:
        parts.append(f"state {res.state}")
    if res.reason:
        parts.append(f"reason {res.reason}" + (f" ({res.source})" if res.source else ""))
    parts += [f"{n} {what}" for what, n in (("submitted", res.submitted), ("collected", res.collected),
                                            ("removed", res.removed_jobs)) if n]
    if res.detail and res.source:
        parts.append(res.detail[:300])
    return ", ".join(parts) + f" in {res.seconds:.0f} s"


@dataclass(frozen=True)
class Failure:
    """An error as the ledger records it: which outside part failed, the reason name, the detail."""

    source: str
    reason: str
    detail: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "detail", redact(self.detail))  # a URL in it may carry a credential

    def entry(self, rse: str = "") -> dict[str, Any]:
        """One entry of a cycle document's `failures`."""
        return {"source": self.source, "reason": self.reason, "detail": self.detail[:2000], "rse": rse}


def failure_of(exc: Exception) -> Failure:
    """The failure an error is recorded as; anything unexpected is internal_error."""
    if isinstance(exc, LedgerError):
        return Failure("ledger", exc.reason, exc.detail)
    if isinstance(exc, BackendError):  # preflight refusals land here: backend_auth_refused, backend_timeout, ...
        return Failure("backend", f"backend_{exc.kind}", exc.message)
    if isinstance(exc, SourceError):  # "wmstats-t0" is WMStats too
        return Failure("wmstats" if exc.source.startswith("wmstats") else exc.source, f"{exc.source}_{exc.kind}",
                       exc.message)
    if isinstance(exc, GuardTripped):  # re-checking protection (resubmit, revalidation), a changed plan file
        source = "internal" if exc.reason == PLAN_MODIFIED else "conmon" if exc.reason in SCAN_GUARDS else "wmstats"
        return Failure(source, exc.reason, exc.detail)
    if isinstance(exc, OSError) and exc.errno in DISK_FULL:  # nothing half-written is used: retried with space back
        return Failure("disk", STATE_DISK_FULL, f"{exc.strerror}: {exc.filename or ''}".rstrip(": "))
    return Failure("internal", INTERNAL_ERROR, f"{type(exc).__name__}: {exc}")
