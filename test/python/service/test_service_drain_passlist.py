"""drain.PassList: a top-up pass asks WMStats once, whether it answers or fails."""
from __future__ import annotations

import pytest

from MSUnmerged.service.drain import PassList
from MSUnmerged.sources.errors import SourceError


def test_a_pass_fetches_once_and_keeps_a_failure() -> None:
    calls: list[int] = []

    def answer() -> tuple[list[str], float]:
        calls.append(1)
        return ["/store/unmerged/a"], 12.0

    fetch = PassList(answer)
    assert fetch() == fetch() == (["/store/unmerged/a"], 12.0) and len(calls) == 1

    def down() -> tuple[list[str], float]:
        calls.append(1)
        raise SourceError("unreachable", "connection refused", "wmstats")

    fetch = PassList(down)
    for _ in range(3):
        with pytest.raises(SourceError):
            fetch()
    assert len(calls) == 2
