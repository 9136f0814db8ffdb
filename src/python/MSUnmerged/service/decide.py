"""What to do with an RSE now: the state machine (statemachine.decide, pure) on its ConMon scan, its current
generation and its progress on that generation as the ledger has it."""
from __future__ import annotations

import time
from typing import Any, Optional

from MSUnmerged.config import Config
from MSUnmerged.jobs.backend import JobState
from MSUnmerged.ledger import RETRIABLE, FileState, Ledger
from MSUnmerged.statemachine import Decision, Progress, decide


def progress(ledger: Ledger, rse: str, generation: Optional[float], max_attempts: int) -> Progress:
    """The RSE's jobs still planned and files still to retry, exhausted or left by a dry run in `generation`."""
    if generation is None:
        return Progress()
    return Progress(
        planned_jobs=len(ledger.base.jobs_in(rse, [JobState.PLANNED], generation)),
        retriable=ledger.counters.count_files(rse, generation, RETRIABLE, attempts={"$lt": max_attempts}),
        exhausted=ledger.counters.count_files(rse, generation, RETRIABLE, attempts={"$gte": max_attempts}),
        would_delete=ledger.counters.count_files(rse, generation, [FileState.WOULD_DELETE]))


def decision(ledger: Ledger, config: Config, rse: str, scan: Any, current: Optional[float]) -> Decision:
    """The state machine's decision on the RSE's scan, its current generation (None: none, or its recording
    unfinished) and its progress on it, with the configuration in force."""
    return decide(scan, current, progress(ledger, rse, current, 1 + config.jobs.retries), time.time(),
                  config.guards.max_scan_age_h, dry_run=config.service.dry_run)
