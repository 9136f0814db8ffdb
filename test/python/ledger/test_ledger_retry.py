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
    # Bounds, not speed: the last backoff ends by the deadline; 1 s of slack for a loaded machine's scheduling
    # (without the deadline the backoff alone is ~3 s).
    assert err.value.reason == "ledger_unavailable" and time.monotonic() - started < 0.5 + 1.0
    assert 1 <= len(calls) < 6  # without the deadline: 6 attempts over ~3 s of backoff


def test_without_deadline_every_attempt_is_made() -> None:
    calls = []

    def down() -> None:
        calls.append(1)
        raise AutoReconnect("connection refused")

    with pytest.raises(LedgerError):
        with_retry(down, "read", attempts=3, base_s=0.01)
    assert len(calls) == 3
