"""Between two cycles (`serve`): every `jobs.top_up_s` the RSEs with jobs are polled, finished jobs collected,
and more of their released jobs submitted as their `max_in_flight` leaves room, so that a capped or throttled
RSE keeps its storage busy without waiting for the next cycle.

It works an RSE only under the RSE's lease, as its own lease owner ("<instance>-drain"): an RSE a cycle works on
is left to the cycle. The jobs still waiting are re-checked as a cycle does (JobKeeper.revalidate: removed when a
file became protected, re-issued when their manifest's list is getting old), also after a restart whose first cycle
found its RSEs done for the slot. What it submits passes the same checks as a cycle's submission: the protected
list is read fresh (the shrink guard refuses an untrusted one: nothing is submitted) and goes into every job's
manifest, where the worker checks each file against it again. It never plans, releases a slice or starts a retry
round.
"""
from __future__ import annotations

import logging
import threading
from typing import Callable, Optional, Sequence

from MSUnmerged.config import Config
from MSUnmerged.jobs.backend import BatchBackend, JobState
from MSUnmerged.ledger import LIVE_JOB_STATES, Ledger
from MSUnmerged.service.jobkeeper import JobKeeper, ProtectedList
from MSUnmerged.service.result import failure_of, jobs_detail
from MSUnmerged.sources import Sources

log = logging.getLogger(__name__)


class Drainer:
    """Collects and tops up the jobs of this instance's RSEs between cycles."""

    def __init__(self, config: Config, ledger: Ledger, sources: Sources, backend: BatchBackend, instance: str,
                 rses: Callable[[], Sequence[str]]) -> None:
        self.config = config
        self.ledger = ledger
        self.sources = sources
        self.rses = rses  # this instance's RSEs (those of its last cycle)
        self.leases = ledger.leases(f"{instance}-drain", config.service.lease_ttl_s)
        self.jobs = JobKeeper(config, ledger, sources, self.leases, backend, lambda step, rse: None)
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def with_jobs(self) -> list[str]:
        """This instance's RSEs that have jobs planned or in the batch system."""
        busy = self.ledger.base.rses_with_jobs([JobState.PLANNED, *LIVE_JOB_STATES])
        return sorted(busy.intersection(self.rses()))

    def once(self) -> dict[str, int]:
        """One pass over the RSEs with jobs; returns the jobs submitted per RSE."""
        submitted: dict[str, int] = {}
        fetch = ProtectedList(self.jobs.fetch_protected)  # the pass's
        for rse in self.with_jobs():
            if self._stop.is_set() or not self.leases.acquire(rse):
                continue  # a cycle or another instance works on it now
            try:
                try:
                    self.jobs.poll(rse, fetch)
                    self.jobs.revalidate(rse, fetch)  # the jobs still waiting, against the pass's list
                    gen = self.ledger.base.rse(rse).get("generation")
                    n = 0 if gen is None else self.jobs.top_up(rse, gen, fetch)
                    if n:
                        submitted[rse] = n
                finally:  # what changed is counted also when nothing more could be submitted
                    if self.jobs.changed(rse):  # collected, re-issued, removed, submitted, ...
                        self.ledger.counters.refresh_counters(rse)
                        live = len(self.jobs.live(rse))
                        self.ledger.base.set_jobs_state(rse, live, jobs_detail(live))
            except Exception as exc:  # one RSE's trouble is the next cycle's to record; the others go on
                failure = failure_of(exc)
                log.warning("%s: between cycles: %s: %s", rse, failure.reason, failure.detail)
            finally:
                self.leases.release(rse)
        return submitted

    def start(self) -> None:
        """Run `once` every jobs.top_up_s in a daemon thread until `stop`."""
        self.leases.start_heartbeat()
        self._thread = threading.Thread(target=self._run, name="msunmerged-drain", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.config.jobs.top_up_s):
            try:
                self.once()
            except Exception:  # e.g. the ledger away: try again next time
                log.exception("between cycles")

    def stop(self) -> None:
        self._stop.set()
        self.leases.stop_heartbeat()
        if self._thread is not None:
            self._thread.join(30)
            self._thread = None
