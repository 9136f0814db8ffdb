"""The one retry policy: how many calls, which errors are retried, the deadline, the waits."""
from __future__ import annotations

import logging
import time

import pytest
import tenacity

from MSUnmerged import retrying

log = logging.getLogger(__name__)


class Flaky(Exception):
    pass


def failing(times: int, calls: list[float]):
    def fn() -> str:
        calls.append(time.monotonic())
        if len(calls) <= times:
            raise Flaky(f"down {len(calls)}")
        return "up"
    return fn


def transient(exc: BaseException) -> bool:
    return isinstance(exc, Flaky)


def test_transient_errors_are_retried_until_an_answer() -> None:
    calls: list[float] = []
    assert retrying.call(failing(2, calls), retrying.Backoff(3, 0.001), transient, "t", log) == "up"
    assert len(calls) == 3


def test_exhausted_names_the_last_error_and_the_attempts() -> None:
    calls: list[float] = []
    with pytest.raises(retrying.Exhausted) as caught:
        retrying.call(failing(10, calls), retrying.Backoff(4, 0.001), transient, "t", log)
    assert len(calls) == 4 and caught.value.attempts == 4 and str(caught.value.last) == "down 4"


def test_a_permanent_error_is_raised_at_once() -> None:
    calls: list[int] = []

    def fn() -> None:
        calls.append(1)
        raise KeyError("permanent")

    with pytest.raises(KeyError):
        retrying.call(fn, retrying.Backoff(5, 0.001), transient, "t", log)
    assert calls == [1]


def test_no_wait_ends_past_the_deadline() -> None:
    calls: list[float] = []
    # Waits of 0.4, 0.8 s: only the first fits in 1 s (0.6 s to spare for a loaded machine's first call).
    with pytest.raises(retrying.Exhausted) as caught:
        retrying.call(failing(10, calls), retrying.Backoff(6, 0.4), transient, "t", log,
                      deadline=time.monotonic() + 1.0)
    assert caught.value.attempts == len(calls) == 2


def test_waits_double_up_to_the_cap_and_jitter_only_shortens_them() -> None:
    def waits(policy: retrying.Backoff) -> list[float]:
        wait, state = policy.wait(), tenacity.RetryCallState(None, None, (), {})
        found = []
        for n in range(1, 6):
            state.attempt_number = n
            found.append(wait(state))
        return found

    assert waits(retrying.Backoff(6, 0.1, max_s=1.0)) == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.0])
    full = [0.1, 0.2, 0.4, 0.8, 1.0]
    for _ in range(20):
        jittered = waits(retrying.Backoff(6, 0.1, max_s=1.0, jitter=0.5))
        assert all(f / 2 - 1e-9 <= j <= f + 1e-9 for j, f in zip(jittered, full)), jittered


def test_each_retry_is_logged_with_its_wait(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    with pytest.raises(retrying.Exhausted):
        retrying.call(failing(10, []), retrying.Backoff(3, 0.001), transient, "svc", log)
    assert [r.getMessage().split(" (")[0] for r in caplog.records] == ["svc: down 1", "svc: down 2"]
