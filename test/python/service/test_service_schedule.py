"""A cycle's schedule (service/schedule.py) apart from any run: which RSE starts when, a lease held elsewhere asked
again, a run of an earlier cycle not started twice, the hold's first batch told by the held RSE's run only; and the
run's step lists (service/run.py) tell the hook its steps in their order."""
from __future__ import annotations

import threading
import time
from concurrent.futures import Future
from typing import Optional

from MSUnmerged.service.result import STEPS, RunAction, RunResult
from MSUnmerged.service.run import APPLY, NEW_GENERATION, NEW_ROUND, RUN, FirstBatch
from MSUnmerged.service.schedule import FirstBatchHold, Schedule


def finished(result: RunResult) -> Future[RunResult]:
    fut: Future[RunResult] = Future()
    fut.set_result(result)
    return fut


def schedule(order: list[str], hold: Optional[FirstBatchHold] = None,
             in_flight: Optional[dict[str, Future[RunResult]]] = None, seconds: float = 5.0) -> Schedule:
    return Schedule(order, hold, 4, 0.01, time.monotonic() + seconds, in_flight or {}, threading.Event())


def test_every_rse_once_in_order_and_a_lease_held_elsewhere_asked_again() -> None:
    started: list[str] = []
    done: list[str] = []

    def start(rse: str, told: Optional[FirstBatch]) -> Future[RunResult]:
        started.append(rse)
        if rse == "B" and started.count("B") == 1:
            return finished(RunResult(rse, RunAction.LEASED_ELSEWHERE, reason=RunAction.LEASED_ELSEWHERE))
        return finished(RunResult(rse, RunAction.POLL))

    results = schedule(["A", "B", "C"]).run(start, lambda rse, res: done.append(rse))
    assert started[:3] == ["A", "B", "C"] and started.count("B") == 2
    assert sorted(done) == ["A", "B", "C"] and set(results) == {"A", "B", "C"}


def test_a_run_of_an_earlier_cycle_is_not_started_twice() -> None:
    earlier: Future[RunResult] = Future()  # still under way
    sched = schedule(["A", "B"], in_flight={"A": earlier}, seconds=0.3)
    results = sched.run(lambda rse, told: finished(RunResult(rse, RunAction.POLL)), lambda rse, res: None)
    assert set(results) == {"B"} and sched.pending == {"A"}  # unfinished when the interval ended


def test_only_the_held_rse_s_run_tells_the_hold_and_its_batch_ends_it() -> None:
    hold = FirstBatchHold("c1", "A", time.monotonic(), time.monotonic() + 60)
    told: dict[str, Optional[FirstBatch]] = {}

    def start(rse: str, first_batch: Optional[FirstBatch]) -> Future[RunResult]:
        told[rse] = first_batch
        if first_batch is not None:
            first_batch()  # the held RSE's run submits its first batch
        return finished(RunResult(rse, RunAction.POLL))

    sched = schedule(["A", "B", "C"], hold=hold)
    assert set(sched.run(start, lambda rse, res: None)) == {"A", "B", "C"}
    assert told["A"] is not None and told["B"] is None and told["C"] is None
    assert hold.batch.done() and sched.hold is None


def test_the_steps_tell_the_hook_in_the_order_of_steps() -> None:
    assert RUN[5].name == "plan or new round"  # NEW_GENERATION or NEW_ROUND
    for steps in (RUN[:5] + NEW_GENERATION + RUN[6:], RUN[:5] + NEW_ROUND + RUN[6:], APPLY):
        told = [step.then for step in steps if step.then]
        assert told == sorted(told, key=STEPS.index)
    assert [s.then for s in RUN if s.then] == ["reconciled", "polled", "counted"]
    assert [s.then for s in NEW_GENERATION] == ["planned", "recorded"]
