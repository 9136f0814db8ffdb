"""JobKeeper.top_up decides from one read of the jobs ready: the protected list is not fetched when none is, and
fetched once when some are, which are then submitted without being read again. A scripted ledger and batch side:
the test is about the decision, not the database."""
from __future__ import annotations

from types import SimpleNamespace
from typing import Any, Optional, Sequence, cast

from MSUnmerged.config import load_config
from MSUnmerged.ledger.states import JobState
from MSUnmerged.service.jobkeeper import Fetched, JobKeeper, Sent

RSE, GEN = "T2_XX_Test", 7.0
PROTECTED = ["/store/unmerged/kept"]


class Base:
    """The ledger's look-ups top_up makes: an RSE with no back-off and `planned` jobs of one generation without
    slices; its reads of the planned jobs are counted."""

    def __init__(self, planned: list[dict[str, Any]]) -> None:
        self.planned = planned
        self.planned_reads = 0

    def generation_entry(self, rse: str, generation: float) -> dict[str, Any]:
        return {"gen": generation}

    def rse(self, rse: str) -> dict[str, Any]:
        return {}

    def jobs_in(self, rse: str, states: Sequence[str], generation: Optional[float] = None) -> list[dict[str, Any]]:
        if list(states) == [JobState.PLANNED]:
            self.planned_reads += 1
            return list(self.planned)
        return []  # none live


class Keeper(JobKeeper):
    """A keeper whose batches are noted instead of built and submitted."""

    def __init__(self, planned: list[dict[str, Any]]) -> None:
        self.base = Base(planned)
        ledger = SimpleNamespace(base=self.base, outcomes=None,
                                 plans=SimpleNamespace(protected_baseline=lambda rse: None))
        super().__init__(load_config(env={}), cast(Any, ledger), cast(Any, None), cast(Any, None), cast(Any, None),
                         lambda step, rse: None)
        self.submitted: list[tuple[list[str], Fetched]] = []

    def _submit_batches(self, rse: str, docs: Sequence[dict[str, Any]], fetched: Fetched, intent: bool,
                        entries: Optional[dict[float, dict[str, Any]]] = None, sent: Optional[Sent] = None) -> int:
        self.submitted.append(([d["_id"] for d in docs], fetched))
        return len(docs)


class Fetch:
    """The protected list's source: counts the times it is asked."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self) -> Fetched:
        self.calls += 1
        return PROTECTED, 100.0


def test_nothing_ready_fetches_no_protected_list() -> None:
    keeper, fetch = Keeper([]), Fetch()
    assert keeper.top_up(RSE, GEN, fetch) == 0
    assert (fetch.calls, keeper.base.planned_reads, keeper.submitted) == (0, 1, [])


def test_jobs_ready_fetch_the_list_once_and_are_read_once() -> None:
    keeper, fetch = Keeper([{"_id": "j1", "gen": GEN}, {"_id": "j2", "gen": GEN}]), Fetch()
    assert keeper.top_up(RSE, GEN, fetch) == 2
    assert (fetch.calls, keeper.base.planned_reads) == (1, 1)
    assert keeper.submitted == [(["j1", "j2"], (PROTECTED, 100.0))]
