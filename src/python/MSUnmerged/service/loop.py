"""The polling loop: `Service.cycle()` works every RSE of this instance once, in parallel (when each starts: its
Schedule, schedule.py; each run: the Runner, run.py); `serve()` repeats it, with a Drainer (drain.py) collecting and
topping up jobs in between."""
from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Iterable, Optional, Sequence

from MSUnmerged.alerts import Notifier
from MSUnmerged.config import Config
from MSUnmerged.guards import scan_files
from MSUnmerged.jobs.backend import BatchBackend
from MSUnmerged.ledger import Ledger, LedgerError
from MSUnmerged.service.drain import Drainer
from MSUnmerged.service.result import Failure, Hook, RunAction, RunResult, describe, failure_of
from MSUnmerged.service.rses import order_rses
from MSUnmerged.service.run import Runner
from MSUnmerged.service.schedule import Schedule, hold_for
from MSUnmerged.service.scans import StatsRead
from MSUnmerged.sources import Sources
from MSUnmerged.sources.answered import AnsweredSources
from MSUnmerged.sources.errors import SourceError

log = logging.getLogger(__name__)


class Service:
    """One instance: its Runner works every RSE of its partition, cycle after cycle."""

    def __init__(self, config: Config, ledger: Ledger, sources: Sources, backend: BatchBackend,
                 instance: Optional[str] = None, hook: Optional[Hook] = None) -> None:
        self.config = config
        self.ledger = ledger
        self.sources = sources
        # The cycles' runs read the sources through this, so that each cycle records which of them answered.
        self.answered = AnsweredSources(sources)
        self.runner = Runner(config, ledger, self.answered, backend, instance, hook)
        self.instance = self.runner.instance
        self._pool: Optional[ThreadPoolExecutor] = None
        self._in_flight: dict[str, Future[RunResult]] = {}
        self._stop = threading.Event()
        # After each cycle, what fires is pushed to AlertManager (alerts.alertmanager_url; none when empty).
        self.notifier = Notifier(config, ledger.view()) if config.alerts.alertmanager_url else None
        self.last_rses: list[str] = []  # the RSEs of the last cycle: those the drainer looks after
        self._drainer: Optional[Drainer] = None

    def cycle(self, rses: Optional[Sequence[str]] = None, slot: Optional[int] = None) -> dict[str, RunResult]:
        """One polling cycle: every RSE of this instance once (across instances), in parallel, largest first; while a
        much larger largest RSE has not submitted its first batch, on half the threads (schedule.py FirstBatchHold).

        ConMon's `stats` is read once, before the interval's clock starts: it orders the RSEs (order_rses) and its
        answer, or its failure, is handed to each run (scans.StatsRead). Which RSE starts when is the cycle's
        Schedule (schedule.py): an RSE leased by another instance is retried until that instance marks it done for
        this slot or its lease expires and we take it over; an RSE still running from an earlier cycle is not
        started twice; the cycle does not wait past the interval for a slow RSE.
        """
        interval = self.config.service.interval_s
        slot = int(time.time() // interval) if slot is None else slot
        self.answered.reset()
        try:
            names = list(rses) if rses is not None else self.runner.my_rses()
        except SourceError as exc:  # e.g. Rucio down: no RSE to work on, but the cycle and its failure are recorded
            self._record_failed_cycle(slot, failure_of(exc))
            raise
        self.last_rses = names
        cid = self.ledger.cycles.start_cycle(self.instance, slot, names)
        log.info("cycle %s: start, %d RSEs (%s)", cid, len(names), "dry run" if self.config.service.dry_run else "real")
        started = time.monotonic()
        stats = StatsRead.read(self.answered)
        order = self._start_order(cid, names, stats)
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.config.service.parallel_rses, thread_name_prefix="rse")
        pool = self._pool
        self.runner.leases.start_heartbeat()
        end = time.monotonic() + interval  # after the read: a hanging ConMon does not take the runs' time
        schedule = Schedule(order, hold_for(cid, order, stats, self.config.service, self._in_flight),
                            self.config.service.parallel_rses, min(5.0, self.config.service.lease_ttl_s / 4), end,
                            self._in_flight, self._stop)
        results = schedule.run(lambda rse, told: pool.submit(self.runner.run_once, rse, slot, 0.0, stats, told),
                               lambda rse, res: self._record_result(cid, rse, res))
        self._end_cycle(cid, len(names), results, schedule.pending, started)
        return results

    def _record_result(self, cid: str, rse: str, res: RunResult) -> None:
        """An RSE's result on the cycle's document, as soon as its run ends."""
        self.ledger.cycles.record_cycle_result(cid, rse, res.to_dict())
        log.info("cycle %s: %s", cid, describe(res))

    def _end_cycle(self, cid: str, names: int, results: dict[str, RunResult], pending: Iterable[str],
                   started: float) -> None:
        """The cycle's end on its document: the runs' failures, the RSEs unfinished, the sources heard from."""
        failures = [Failure(r.source, r.reason, r.detail).entry(r.rse) for r in results.values() if r.source]
        unfinished = sorted(pending)
        self.ledger.cycles.end_cycle(cid, failures=failures, unfinished=unfinished, dry_run=self.config.service.dry_run,
                                     answered=self._answered(results.values()))
        log.info("cycle %s: end after %.0f s: %d of %d RSEs done, %d unfinished, %d failures%s", cid,
                 time.monotonic() - started, len(results), names, len(unfinished), len(failures),
                 f" ({', '.join(sorted({f['reason'] for f in failures}))})" if failures else "")

    @staticmethod
    def _start_order(cid: str, names: Sequence[str], stats: StatsRead) -> list[str]:
        """The order the cycle starts its RSEs in (order_rses), logged with the first ones' sizes. Unreadable stats:
        name order (every size unknown); each run records the read's failure."""
        if stats.error is not None:
            log.warning("cycle %s: ConMon stats unreadable (%s): RSEs start in name order, each records it",
                        cid, stats.error)
            return order_rses(names, {})
        order = order_rses(names, stats.answer)
        sizes = [f"{rse} ({files} files)" if (files := scan_files(stats.answer.get(rse))) is not None
                 else f"{rse} (size unknown)" for rse in order[:3]]
        log.info("cycle %s: largest first: %s%s", cid, ", ".join(sizes), ", ..." if len(order) > 3 else "")
        return order

    def _answered(self, results: Iterable[RunResult]) -> list[str]:
        """The sources the cycle heard from: those its runs' reads answered (AnsweredSources), the ledger and the
        service itself (the cycle is recorded), the batch system where a run submitted, collected, removed or
        polled jobs."""
        heard = self.answered.answered() | {"ledger", "internal"}
        if any(r.submitted or r.collected or r.removed_jobs or r.action == RunAction.POLL for r in results):
            heard.add("backend")
        return sorted(heard)

    def _record_failed_cycle(self, slot: int, failure: Failure) -> None:
        """A cycle that could not start records a cycle document with no RSE and the failure."""
        self.ledger.cycles.end_cycle(self.ledger.cycles.start_cycle(self.instance, slot, []),
                                     failures=[failure.entry()], dry_run=self.config.service.dry_run,
                                     answered=self._answered(()))

    def serve(self) -> None:
        """Run cycles every service.interval_s until stop(); jobs are collected and topped up in between."""
        interval = self.config.service.interval_s
        self._drainer = Drainer(self.config, self.ledger, self.sources, self.runner.jobs.backend, self.instance,
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
            if self.notifier is not None:
                self.notifier.after_cycle()
            self._stop.wait(max(1.0, (slot + 1) * interval - time.time()))

    def stop(self) -> None:
        self._stop.set()
        if self._drainer is not None:
            self._drainer.stop()
        self.runner.leases.stop_heartbeat()
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
