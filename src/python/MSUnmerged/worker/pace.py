"""Pacing of a job's storage operations (`max_ops_per_s`): a storage that cannot take a burst of deletions
gets them spread out. Each batch waits for its turn, so over the job the rate stays under the limit."""
from __future__ import annotations

import time
from typing import Callable, Optional


class Pacer:
    """At most `rate` operations per second on average since the first (0: no pacing)."""

    def __init__(self, rate: float, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.rate = rate
        self.clock = clock
        self.sleep = sleep
        self.started: Optional[float] = None
        self.done = 0

    def batch(self, size: int) -> int:
        """A batch size that keeps each burst to about one second of operations."""
        return size if not self.rate else max(1, min(size, int(self.rate)))

    def take(self, n: int) -> None:
        """Wait until `n` more operations may start."""
        if not self.rate or n <= 0:
            return
        now = self.clock()
        if self.started is None:
            self.started = now
        wait = self.started + self.done / self.rate - now
        if wait > 0:
            self.sleep(wait)
        self.done += n
