"""A short-lived cache of rendered answers (rest.cache_ttl_s), so that many clients asking the same cost one
ledger read."""
from __future__ import annotations

import threading
import time
from typing import Any, Callable


class TtlCache:
    """Short-lived cache of rendered answers; one thread refreshes a key while others wait for it."""

    def __init__(self, ttl_s: float) -> None:
        self.ttl_s = ttl_s
        self._data: dict[Any, tuple[float, bytes]] = {}
        self._locks: dict[Any, threading.Lock] = {}
        self._guard = threading.Lock()

    def get(self, key: Any, build: Callable[[], bytes]) -> bytes:
        if self.ttl_s <= 0:
            return build()
        hit = self._data.get(key)
        if hit and hit[0] > time.monotonic():
            return hit[1]
        with self._guard:
            lock = self._locks.setdefault(key, threading.Lock())
        with lock:
            hit = self._data.get(key)
            if hit and hit[0] > time.monotonic():
                return hit[1]
            body = build()
            self._data[key] = (time.monotonic() + self.ttl_s, body)
            return body

    def clear(self) -> None:
        self._data.clear()
