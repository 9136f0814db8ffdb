"""with_retry under a caller's deadline: retries stop when their backoff would end past it."""
from __future__ import annotations

import time

import pytest
from pymongo.errors import AutoReconnect

from MSUnmerged.ledger.retry import LedgerError, deadline, with_retry


def test_deadline_bounds_the_retries() -> None:
    calls = []

    def down() -> None:
        calls.append(time.monotonic())
        raise AutoReconnect("connection refused")

    started = time.monotonic()
    with deadline(0.5), pytest.raises(LedgerError) as err:
        with_retry(down, "read")
    assert err.value.reason == "ledger_unavailable"
    # The behaviour: the backoffs (at least 0.1, 0.2, 0.4 s with jitter) leave room for 2 retries at most before
    # 0.5 s, a loaded machine only fewer; without the deadline all 6 attempts are made (3 to 6 s of backoff).
    assert 1 <= len(calls) <= 3
    assert time.monotonic() - started < 0.5 + 5.0  # bounds a hang, not a speed


def test_without_deadline_every_attempt_is_made() -> None:
    calls = []

    def down() -> None:
        calls.append(1)
        raise AutoReconnect("connection refused")

    with pytest.raises(LedgerError):
        with_retry(down, "read", attempts=3, base_s=0.01)
    assert len(calls) == 3
