"""Fixtures of the planner tests."""
from __future__ import annotations

import pytest

from MSUnmerged import planlines


@pytest.fixture(params=[e.name for e in (planlines.COMPILED, planlines.PURE) if e is not None])
def each_engine(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> planlines.Engine:
    """The test runs once per planlines engine built here, whatever `planner.engine` says."""
    chosen = planlines.engine(request.param)
    monkeypatch.setattr(planlines, "engine", lambda name: chosen)
    return chosen
