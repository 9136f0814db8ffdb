"""A short-lived cache (rest.cache_ttl_s): many clients asking the same within the time to live cost one
ledger read (`serve`'s rendered status and info answers, an RSE's current generation, a job's document)."""
from __future__ import annotations

import threading
import time
from typing import Callable, Generic, Hashable, TypeVar

V = TypeVar("V")
MAX_KEYS = 10_000  # keys may come from requests (RSE names, job ids): past this many, every one is dropped


class TtlCache(Generic[V]):
    """Each key's value is built at most every `ttl_s` (0: on every call); one thread builds it while the
    others asking for it wait."""

    def __init__(self, ttl_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl_s = ttl_s
        self.clock = clock
        self._data: dict[Hashable, tuple[float, V]] = {}
        self._locks: dict[Hashable, threading.Lock] = {}
        self._guard = threading.Lock()

    def get(self, key: Hashable, build: Callable[[], V]) -> V:
        """The key's value, built again once it is `ttl_s` old."""
        if self.ttl_s <= 0:
            return build()
        hit = self._data.get(key)
        if hit and hit[0] > self.clock():
            return hit[1]
        with self._guard:
            if len(self._locks) >= MAX_KEYS:
                self._locks.clear()
                self._data.clear()
            lock = self._locks.setdefault(key, threading.Lock())
        with lock:
            hit = self._data.get(key)
            if hit and hit[0] > self.clock():
                return hit[1]
            started = self.clock()  # the ttl runs from before the read: a value never outlives it
            value = build()
            self._data[key] = (started + self.ttl_s, value)
            return value

