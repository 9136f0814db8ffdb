"""One cycle's schedule (a daemon loop, Rucio's `run_once` loop as the anchor): which RSE's run starts when, on how
many threads, until the interval ends. The runs and what is recorded of them are the caller's (loop.py)."""
from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import FIRST_COMPLETED, Future, wait
from typing import Callable, Iterable, Mapping, Optional, Sequence

from MSUnmerged.config import ServiceConfig
from MSUnmerged.service.hold import HoldEnd, hold_end, held_for, runs_during_hold
from MSUnmerged.service.result import RunAction, RunResult
from MSUnmerged.service.run import FirstBatch
from MSUnmerged.service.scans import StatsRead

log = logging.getLogger(__name__)

Start = Callable[[str, Optional[FirstBatch]], "Future[RunResult]"]  # starts an RSE's run (its first batch told)
Done = Callable[[str, RunResult], None]  # told each RSE's result as soon as its run ends


def still_running(in_flight: Mapping[str, Future[RunResult]], rse: str) -> bool:
    """Whether the RSE's run of an earlier cycle is still under way."""
    return rse in in_flight and not in_flight[rse].done()


class FirstBatchHold:
    """A cycle holding for its largest RSE's first batch: `batch` is done when the RSE's run submits one
    (`first_batch`, told by that run from its thread)."""

    def __init__(self, cid: str, rse: str, start: float, until: float) -> None:
        self.cid, self.rse, self.start, self.until = cid, rse, start, until
        self.batch: Future[None] = Future()

    def first_batch(self) -> None:
        if not self.batch.done():  # one thread runs the RSE
            self.batch.set_result(None)

    def over(self, now: float, running: Iterable[str]) -> bool:
        """Whether the hold has ended (hold.py hold_end), logged once when it does; `running`: the RSEs under way
        (the held one among them from the cycle's first start on)."""
        end = hold_end(self.batch.done(), self.rse not in running, now, self.until)
        if end is None:
            return False
        log.log(logging.WARNING if end == HoldEnd.TIMED_OUT else logging.INFO,
                "cycle %s: every RSE thread from now: %s: %s after %.1f s", self.cid, self.rse, end, now - self.start)
        return True


def hold_for(cid: str, order: Sequence[str], stats: StatsRead, service: ServiceConfig,
             in_flight: Mapping[str, Future[RunResult]]) -> Optional[FirstBatchHold]:
    """The cycle's hold for its largest RSE (hold.py held_for), None when there is none."""
    bound = service.largest_first_hold_s
    rse = held_for(order, stats.answer, service.parallel_rses) if bound > 0 else None
    if rse is None or still_running(in_flight, rse):
        return None  # nothing to hold for, or it still runs from an earlier cycle: not this cycle's to favour
    hold = FirstBatchHold(cid, rse, time.monotonic(), time.monotonic() + bound)
    log.info("cycle %s: %d of %d RSE threads until %s's first batch (at most %d s)", cid,
             runs_during_hold(service.parallel_rses), service.parallel_rses, rse, bound)
    return hold


class Schedule:
    """One cycle's runs: started in `order` (largest first), on half the `parallel` threads while a hold lasts; an
    RSE leased by another instance asked again after `pause`, until that instance marks it done for the slot or its
    lease expires; an RSE still running from an earlier cycle (`in_flight`, the service's, across cycles) not started
    twice; nothing started after `end` (time.monotonic()) or once `stop` is set."""

    def __init__(self, order: Sequence[str], hold: Optional[FirstBatchHold], parallel: int, pause: float, end: float,
                 in_flight: dict[str, Future[RunResult]], stop: threading.Event) -> None:
        self.order, self.hold, self.parallel, self.pause, self.end = order, hold, parallel, pause, end
        self.in_flight, self.stop = in_flight, stop
        self.pending = set(order)  # not done this cycle (yet): at the end, the unfinished ones
        self.running: dict[Future[RunResult], str] = {}
        self.retry_at: dict[str, float] = {}  # leased by another instance: asked again after a pause
        self.results: dict[str, RunResult] = {}

    def run(self, start: Start, done: Done) -> dict[str, RunResult]:
        """Start and collect runs until every RSE is done, the interval ends or the service stops; the results."""
        while self.pending and not self.stop.is_set() and time.monotonic() < self.end:
            self._start(start)
            if not self.running:
                self.stop.wait(max(0.0, min(self.pause, self.end - time.monotonic())))
                continue
            self._collect(done)
            if self.hold is not None and self.hold.over(time.monotonic(), self.running.values()):
                self.hold = None
        return self.results

    def _room(self) -> int:
        """How many runs may start now. The pool queues what it cannot start at once; during a hold nothing is
        queued behind the runs allowed."""
        return len(self.order) if self.hold is None else runs_during_hold(self.parallel) - len(self.running)

    def _start(self, start: Start) -> None:
        now, room, busy = time.monotonic(), self._room(), set(self.running.values())
        for rse in self.order:
            if room <= 0:
                break
            if rse not in self.pending or rse in busy:
                continue
            if self.retry_at.get(rse, 0.0) > now or still_running(self.in_flight, rse):
                continue  # another instance has it, or it is still working from an earlier cycle
            told = self.hold.first_batch if self.hold is not None and rse == self.hold.rse else None
            fut = self.in_flight[rse] = start(rse, told)
            self.running[fut] = rse
            room -= 1

    def _collect(self, done: Done) -> None:
        """Each result is handed on as soon as its RSE finishes, whatever the others do; a hold's end (its RSE's
        first batch, or its bound) wakes the loop too."""
        hold = self.hold
        timeout = min(self.pause, self.end - time.monotonic(), hold.until - time.monotonic() if hold else self.pause)
        finished, _ = wait([*self.running, *([hold.batch] if hold else [])], timeout=max(0.0, timeout),
                           return_when=FIRST_COMPLETED)
        for fut in finished:
            if fut not in self.running:  # the hold's first batch: over() says so next round
                continue
            rse = self.running.pop(fut)
            res = fut.result()
            if res.action == RunAction.LEASED_ELSEWHERE:
                self.retry_at[rse] = time.monotonic() + self.pause
                continue
            self.pending.discard(rse)
            self.results[rse] = res
            done(rse, res)
