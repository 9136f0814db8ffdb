"""Shared terminal output for commands: aligned tables and throttled progress lines."""
from __future__ import annotations

import sys
import time
from typing import Any, Optional, Sequence, TextIO


def table(rows: Sequence[Sequence[Any]], headers: Sequence[str], out: Optional[TextIO] = None) -> None:
    out = out or sys.stdout  # looked up at call time: tests and callers may replace sys.stdout
    cells = [[str(h) for h in headers]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    for i, row in enumerate(cells):
        out.write("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() + "\n")
        if i == 0:
            out.write("  ".join("-" * w for w in widths) + "\n")


class Progress:
    """Prints `label: N lines (rate/s)` to stderr at most every `every` seconds, when interactive or forced."""

    def __init__(self, label: str, every: float = 2.0, out: Optional[TextIO] = None, force: bool = False) -> None:
        self.label = label
        self.every = every
        self.out = out or sys.stderr
        self.enabled = force or self.out.isatty()
        self.start = self._last = time.monotonic()

    def __call__(self, done: int) -> None:
        now = time.monotonic()
        if self.enabled and now - self._last >= self.every:
            self._last = now
            rate = done / max(now - self.start, 1e-9)
            self.out.write(f"{self.label}: {done:,} lines ({rate:,.0f}/s)\n")
            self.out.flush()
