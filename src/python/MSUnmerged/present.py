"""Readable values shared by the operator page (rest/page.py) and the command line (cli/): times, sizes,
an RSE's progress and its throttled share. Plain text only (the page escapes it); standard library only,
so that a command importing it stays quick to start."""
from __future__ import annotations

import time
from typing import Any


def when(ts: Any) -> str:
    """An epoch time as UTC date and time, e.g. `2026-11-30 09:49:34 UTC`; anything else: `never`."""
    if not isinstance(ts, (int, float)) or isinstance(ts, bool):
        return "never"
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(ts))


def size(n: float) -> str:
    """Bytes in decimal units, as the page and the command line show them."""
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if n < 1000 or unit == "TB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1000
    return ""  # pragma: no cover


def progress(counters: dict[str, Any]) -> tuple[float, str]:
    """Fraction of the planned files with a final outcome: neither pending nor left by a dry run."""
    planned = counters.get("to_delete") or 0
    if not isinstance(planned, int) or planned <= 0:
        return 0.0, "-"
    left = (counters.get("pending") or 0) + (counters.get("would_delete") or 0)
    frac = min(1.0, max(0.0, 1.0 - left / planned))
    label = f"{frac:.0%}"
    if counters.get("would_delete"):
        label += f" (dry run: {counters['would_delete']:,} would be deleted)"
    return frac, label


def cycle_share(counters: dict[str, Any]) -> str:
    """A throttled RSE's share of its plan this cycle: "N of M this cycle (slice k of S)"; "" when not throttled."""
    if not counters.get("slices"):
        return ""
    return (f"{counters.get('cycle_files', 0):,} of {counters.get('to_delete', 0):,} this cycle "
            f"(slice {counters.get('slice', 0)} of {counters['slices']})")
