"""Retries MongoDB calls on transient errors with capped exponential backoff."""
from __future__ import annotations

import contextlib
import contextvars
import logging
import time
from typing import Callable, Iterator, Optional, TypeVar

import pymongo
from pymongo import errors

from MSUnmerged import retrying

log = logging.getLogger(__name__)
T = TypeVar("T")

# AutoReconnect covers NotPrimaryError, NetworkTimeout and ServerSelectionTimeoutError.
TRANSIENT = (errors.AutoReconnect, errors.ConnectionFailure, errors.NetworkTimeout, errors.NotPrimaryError,
             errors.WaitQueueTimeoutError)
TRANSIENT_LABELS = ("RetryableWriteError", "TransientTransactionError", "ResetPool")
# Monotonic time by which the current caller wants an answer (None: no deadline); see `deadline`.
_DEADLINE: contextvars.ContextVar[Optional[float]] = contextvars.ContextVar("ledger_deadline", default=None)


class LedgerError(Exception):
    """The ledger cannot do what was asked: `reason` is recorded on the RSE that stopped."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


def is_transient(exc: BaseException) -> bool:
    if isinstance(exc, TRANSIENT):
        return True
    return isinstance(exc, errors.PyMongoError) and any(exc.has_error_label(lb) for lb in TRANSIENT_LABELS)


@contextlib.contextmanager
def deadline(seconds: float) -> Iterator[None]:
    """Bound every ledger call made inside to `seconds` in total, retries included (pymongo.timeout plus
    no retry whose backoff would end past it): a request handler answers within its own time budget."""
    token = _DEADLINE.set(time.monotonic() + seconds)
    try:
        with pymongo.timeout(seconds):
            yield
    finally:
        _DEADLINE.reset(token)


def with_retry(fn: Callable[[], T], what: str, attempts: int = 6, base_s: float = 0.2,
               max_s: float = 10.0) -> T:
    """Call `fn`; retry transient errors; raise LedgerError on a permanent one or when retries run out.

    Every write that goes through here is idempotent, so repeating it after a lost answer is safe.
    """
    try:
        return retrying.call(fn, retrying.Backoff(attempts, base_s, max_s, jitter=0.5), is_transient, what, log,
                             deadline=_DEADLINE.get())
    except retrying.Exhausted as exc:
        raise LedgerError("ledger_unavailable", f"{what}: {exc}") from exc.last
    except errors.PyMongoError as exc:
        raise LedgerError("ledger_error", f"{what}: {type(exc).__name__}: {exc}") from exc
