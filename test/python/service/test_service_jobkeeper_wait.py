"""JobKeeper.wait, the one loop a run waits for its jobs in: jobs left from before are polled at once, then at most
every 2 s; a run's own jobs just sent are polled after a pause, at most every 0.2 s, each poll followed by a top-up
with the run's protected list while younger than renew_s, then a fresh one; both until none is live or the
deadline. A fake clock and a scripted keeper: the test is about the loop, not the batch system."""
from __future__ import annotations

from types import SimpleNamespace
from typing import Any, Callable, Optional, cast

import pytest

from MSUnmerged.config import load_config
from MSUnmerged.service import jobkeeper
from MSUnmerged.service.jobkeeper import Fetched, JobKeeper, Sent, TopUp

RSE = "T2_XX_Test"
START = 1_000_000.0  # the fake clock's start (monotonic and wall time alike)


class Clock:
    """time.monotonic, time.time and time.sleep of jobkeeper.py: a sleep only moves the clock on."""

    def __init__(self) -> None:
        self.now = START
        self.sleeps: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(round(seconds, 6))
        self.now += seconds

    def monotonic(self) -> float:
        return self.now

    def time(self) -> float:
        return self.now


class Scripted(JobKeeper):
    """A keeper whose jobs are live for the first `live_for` polls; every poll collects one; what it is asked
    is noted with the clock's time."""

    def __init__(self, clock: Clock, live_for: int) -> None:
        sources = SimpleNamespace(protected=lambda: ["/store/unmerged/fresh"])
        ledger = SimpleNamespace(outcomes=None)  # the collector's sink: never reached, poll is scripted
        super().__init__(load_config(env={}), cast(Any, ledger), cast(Any, sources), cast(Any, None), cast(Any, None),
                         lambda step, rse: None)
        self.clock, self.live_for = clock, live_for
        self.polls: list[float] = []
        self.top_ups: list[tuple[float, float, Fetched, Optional[Sent]]] = []

    def poll(self, rse: str, fetch: Optional[Callable[[], Fetched]] = None) -> int:
        self.polls.append(self.clock.now - START)
        return 1

    def live(self, rse: str) -> list[dict[str, Any]]:
        return [{"_id": "job"}] if len(self.polls) < self.live_for else []

    def top_up(self, rse: str, generation: float, fetch: Callable[[], Fetched], sent: Optional[Sent] = None) -> int:
        self.top_ups.append((self.clock.now - START, generation, fetch(), sent))
        return 0


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(jobkeeper, "time", fake)
    return fake


def test_jobs_left_from_before_are_polled_at_once_then_every_2_s_until_none_is_live(clock: Clock) -> None:
    keeper = Scripted(clock, live_for=3)
    waited = keeper.wait(RSE, START + 100)
    assert waited.collected == 3 and waited.live == []
    assert keeper.polls == [0.0, 2.0, 4.0] and clock.sleeps == [2.0, 2.0] and keeper.top_ups == []


def test_polling_ends_at_the_deadline_with_the_jobs_still_live(clock: Clock) -> None:
    keeper = Scripted(clock, live_for=10)
    waited = keeper.wait(RSE, START + 3)
    assert waited.collected == 3 and waited.live == [{"_id": "job"}]
    assert keeper.polls == [0.0, 2.0, 3.0] and clock.sleeps == [2.0, 1.0]  # the last pause ends at the deadline
    late = Scripted(clock, live_for=10)
    assert late.wait(RSE, START).collected == 1 and clock.sleeps == [2.0, 1.0]  # past it: polled once, no pause


def test_a_runs_own_jobs_are_topped_up_with_its_list_then_a_fresh_one(clock: Clock) -> None:
    keeper = Scripted(clock, live_for=4)
    sent: list[int] = []
    young = (["/store/unmerged/run"], START - keeper.renew_s + 0.5)  # too old to be sent after 0.5 s more
    waited = keeper.wait(RSE, START + 100, TopUp(7.0, young, sent.append))
    assert waited.collected == 4 and waited.live == []
    assert clock.sleeps == [0.2] * 4 and keeper.polls == pytest.approx([0.2, 0.4, 0.6, 0.8])
    assert [(round(at, 6), gen, sent_to) for at, gen, _, sent_to in keeper.top_ups] == \
        [(0.2, 7.0, sent.append), (0.4, 7.0, sent.append), (0.6, 7.0, sent.append), (0.8, 7.0, sent.append)]
    lists = [fetched for _, _, fetched, _ in keeper.top_ups]
    assert lists[:2] == [young, young]  # the run's own list while younger than renew_s
    assert lists[2] == (["/store/unmerged/fresh"], pytest.approx(START + 0.6)) and lists[3] == lists[2]


def test_a_run_past_its_deadline_neither_polls_nor_tops_up(clock: Clock) -> None:
    keeper = Scripted(clock, live_for=10)
    waited = keeper.wait(RSE, START, TopUp(7.0, (["/store/unmerged/run"], START)))
    assert waited == (0, [{"_id": "job"}]) and keeper.polls == [] and keeper.top_ups == [] and clock.sleeps == []
