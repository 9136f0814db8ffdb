"""jobkeeper.ProtectedList: a top-up pass asks WMStats once, whether it answers or fails; a list kept for later
submissions (`run --wait`) is fetched again once older than its reuse time."""
from __future__ import annotations

import time

import pytest

from MSUnmerged.service.jobkeeper import ProtectedList
from MSUnmerged.sources.errors import SourceError


def test_a_pass_fetches_once_and_keeps_a_failure() -> None:
    calls: list[int] = []

    def answer() -> tuple[list[str], float]:
        calls.append(1)
        return ["/store/unmerged/a"], 12.0

    fetch = ProtectedList(answer)
    assert fetch() == fetch() == (["/store/unmerged/a"], 12.0) and len(calls) == 1

    def down() -> tuple[list[str], float]:
        calls.append(1)
        raise SourceError("unreachable", "connection refused", "wmstats")

    fetch = ProtectedList(down)
    for _ in range(3):
        with pytest.raises(SourceError):
            fetch()
    assert len(calls) == 2


def test_a_kept_list_is_fetched_again_once_older_than_its_reuse_time() -> None:
    """Before: `run --wait` sent the list of its start however long it waited; a job re-issued because that list
    had grown too old at the site went out again with the same list."""
    now = time.time()
    calls: list[float] = []

    def answer() -> tuple[list[str], float]:
        calls.append(time.time())
        return ["/store/unmerged/new"], calls[-1]

    young = ProtectedList(answer, 60.0, (["/store/unmerged/old"], now - 10))
    assert young() == (["/store/unmerged/old"], now - 10) and calls == []
    old = ProtectedList(answer, 60.0, (["/store/unmerged/old"], now - 61))
    protected, at = old()
    assert protected == ["/store/unmerged/new"] and at >= now and len(calls) == 1
    assert old() == (protected, at) and len(calls) == 1  # the new one is kept in turn
