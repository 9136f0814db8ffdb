"""A submission's batches (service/jobkeeper.batch_bounds): the first short, so an RSE's first jobs go out early;
every job in exactly one batch, in order, none larger than `jobs.submit_batch`."""
from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from MSUnmerged.service.jobkeeper import FIRST_BATCH, batch_bounds


def test_the_first_batch_is_short_and_the_others_full() -> None:
    assert FIRST_BATCH == 50
    assert list(batch_bounds(0, 500)) == []
    assert list(batch_bounds(30, 500)) == [(0, 30)]
    assert list(batch_bounds(1200, 500)) == [(0, 50), (50, 550), (550, 1050), (1050, 1200)]
    assert list(batch_bounds(7, 3)) == [(0, 3), (3, 6), (6, 7)]  # a batch smaller than FIRST_BATCH: unchanged


@given(st.integers(0, 5000), st.integers(1, 1000))
def test_every_job_is_in_one_batch_in_order(n: int, size: int) -> None:
    bounds = list(batch_bounds(n, size))
    assert [i for start, end in bounds for i in range(start, end)] == list(range(n))
    assert all(0 < end - start <= size for start, end in bounds)
    assert all(end - start == size for start, end in bounds[1:-1])  # only the first and the last may be short
    assert not bounds or bounds[0][1] - bounds[0][0] == min(n, size, FIRST_BATCH)
