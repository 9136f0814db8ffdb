"""Calls retried with exponential backoff: the one retry policy of the ledger's and the sources' calls."""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Callable, Optional, TypeVar

import tenacity

T = TypeVar("T")


@dataclass(frozen=True)
class Backoff:
    """Up to `attempts` calls; the n-th wait is `base_s * 2**(n-1)`, at most `max_s`, times a random factor in
    [1 - jitter, 1] (spreads the instances that all saw the same outage)."""

    attempts: int
    base_s: float
    max_s: float = float("inf")
    jitter: float = 0.0

    def wait(self) -> tenacity.wait.wait_base:
        exponential = tenacity.wait_exponential(multiplier=self.base_s, max=self.max_s, min=0)
        if not self.jitter:
            return exponential
        return _Scaled(exponential, self.jitter)


class _Scaled(tenacity.wait.wait_base):
    """A wait multiplied by a random factor in [1 - jitter, 1]."""

    def __init__(self, inner: tenacity.wait.wait_base, jitter: float) -> None:
        self.inner = inner
        self.jitter = tenacity.wait_random(1.0 - jitter, 1.0)

    def __call__(self, retry_state: tenacity.RetryCallState) -> float:
        return self.inner(retry_state) * self.jitter(retry_state)


class Exhausted(Exception):
    """The last transient error after `attempts` calls (fewer when the deadline came first)."""

    def __init__(self, last: BaseException, attempts: int) -> None:
        super().__init__(f"{attempts} attempts: {last}")
        self.last = last
        self.attempts = attempts


def call(fn: Callable[[], T], policy: Backoff, transient: Callable[[BaseException], bool], what: str,
         log: logging.Logger, deadline: Optional[float] = None) -> T:
    """`fn()`, called again after a transient error; a permanent error is raised as it is, the last transient
    one as Exhausted. No retry is started whose wait would end past `deadline` (monotonic seconds)."""
    stop = tenacity.stop_after_attempt(policy.attempts)
    if deadline is not None:
        stop = stop | tenacity.stop_before_delay(max(0.0, deadline - time.monotonic()))

    def announce(state: tenacity.RetryCallState) -> None:
        error = state.outcome.exception() if state.outcome else None
        log.warning("%s: %s (attempt %d/%d), retrying in %.1f s", what, error, state.attempt_number,
                    policy.attempts, state.upcoming_sleep)

    retrying = tenacity.Retrying(stop=stop, wait=policy.wait(), retry=tenacity.retry_if_exception(transient),
                                 before_sleep=announce, reraise=True)
    try:
        return retrying(fn)
    except BaseException as exc:
        if not transient(exc):
            raise
        raise Exhausted(exc, retrying.statistics.get("attempt_number", 1)) from exc
