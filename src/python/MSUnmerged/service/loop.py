"""The polling loop: `Service.cycle()` works every RSE of this instance once, in parallel; `serve()` repeats it,
with a Drainer (drain.py) collecting and topping up jobs in between."""
from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Optional, Sequence

from MSUnmerged.config import Config
from MSUnmerged.jobs.backend import BatchBackend
from MSUnmerged.ledger import Ledger, LedgerError
from MSUnmerged.service.drain import Drainer
from MSUnmerged.service.result import Failure, Hook, RunAction, RunResult, failure_of
from MSUnmerged.service.run import Runner
from MSUnmerged.sources import Sources
from MSUnmerged.sources.errors import SourceError

log = logging.getLogger(__name__)


class Service(Runner):
    """One instance: run_once/apply_plan (Runner) for every RSE of its partition, cycle after cycle."""

    def __init__(self, config: Config, ledger: Ledger, sources: Sources, backend: BatchBackend,
                 instance: Optional[str] = None, hook: Optional[Hook] = None) -> None:
        super().__init__(config, ledger, sources, backend, instance, hook)
        self._pool: Optional[ThreadPoolExecutor] = None
        self._in_flight: dict[str, Future[RunResult]] = {}
        self._stop = threading.Event()
        self.last_rses: list[str] = []  # the RSEs of the last cycle: those the drainer looks after
        self._drainer: Optional[Drainer] = None

    def cycle(self, rses: Optional[Sequence[str]] = None, slot: Optional[int] = None) -> dict[str, RunResult]:
        """One polling cycle: every RSE of this instance once (across instances), in parallel.

        An RSE leased by another instance is retried until that instance marks it done for this
        slot or its lease expires and we take it over. An RSE still running from an earlier cycle
        is not started twice; the cycle does not wait past the interval for a slow RSE.
        """
        interval = self.config.service.interval_s
        slot = int(time.time() // interval) if slot is None else slot
        try:
            names = list(rses) if rses is not None else self.my_rses()
        except SourceError as exc:  # e.g. Rucio down: no RSE to work on, but the cycle and its failure are recorded
            self._record_failed_cycle(slot, failure_of(exc))
            raise
        self.last_rses = names
        cid = self.ledger.start_cycle(self.instance, slot, names)
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.config.service.parallel_rses, thread_name_prefix="rse")
        self.leases.start_heartbeat()
        end = time.monotonic() + interval
        results: dict[str, RunResult] = {}
        pending = set(names)
        while pending and not self._stop.is_set() and time.monotonic() < end:
            futures = {}
            for rse in sorted(pending):
                if rse in self._in_flight and not self._in_flight[rse].done():
                    continue  # still working from an earlier cycle
                futures[rse] = self._in_flight[rse] = self._pool.submit(self.run_once, rse, slot)
            for rse, fut in futures.items():
                res = self._wait(fut, end)
                if res is None:
                    continue
                if res.action != RunAction.LEASED_ELSEWHERE:
                    pending.discard(rse)
                    results[rse] = res
                    self.ledger.record_cycle_result(cid, rse, res.to_dict())
            if pending:
                self._stop.wait(min(5.0, self.config.service.lease_ttl_s / 4))
        failures = [Failure(r.source, r.reason, r.detail).entry(r.rse) for r in results.values() if r.source]
        self.ledger.end_cycle(cid, failures=failures, unfinished=sorted(pending), dry_run=self.config.service.dry_run)
        return results

    @staticmethod
    def _wait(fut: Future[RunResult], end: float) -> Optional[RunResult]:
        try:
            return fut.result(timeout=max(0.0, end - time.monotonic()))
        except TimeoutError:
            return None

    def _record_failed_cycle(self, slot: int, failure: Failure) -> None:
        """A cycle that could not start records a cycle document with no RSE and the failure."""
        self.ledger.end_cycle(self.ledger.start_cycle(self.instance, slot, []), failures=[failure.entry()],
                              dry_run=self.config.service.dry_run)

    def serve(self) -> None:
        """Run cycles every service.interval_s until stop(); jobs are collected and topped up in between."""
        interval = self.config.service.interval_s
        self._drainer = Drainer(self.config, self.ledger, self.sources, self.backend, self.instance,
                                lambda: self.last_rses)
        self._drainer.start()
        while not self._stop.is_set():
            slot = int(time.time() // interval)
            try:
                self.cycle(slot=slot)
            except (LedgerError, SourceError) as exc:  # e.g. Rucio down (recorded by cycle()): try again next interval
                log.error("cycle %d: %s", slot, exc)
            except Exception as exc:  # a bug must not end the loop: the next cycle starts from the ledger
                log.exception("cycle %d failed", slot)
                try:  # a cycle that ended in a bug still leaves a cycle document saying so (when the ledger answers)
                    self._record_failed_cycle(slot, failure_of(exc))
                except LedgerError:
                    log.exception("cycle %d: could not record the failure", slot)
            self._stop.wait(max(1.0, (slot + 1) * interval - time.time()))

    def stop(self) -> None:
        self._stop.set()
        if self._drainer is not None:
            self._drainer.stop()
        self.leases.stop_heartbeat()
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
