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


# The parts of a progress bar: (its name, the counters it sums); the page colours them (rest/charts.py COLOURS).
SHARES = (("deleted", ("deleted", "missing")), ("would_delete", ("would_delete",)), ("failed", ("failed", "unknown")),
          ("skipped_protected", ("skipped_protected",)), ("pending", ("pending",)))


SHARE_WORDS = {"deleted": "deleted", "would_delete": "would delete", "failed": "failed",
               "skipped_protected": "protected", "pending": "pending"}
# What each drainstatus.Waiting value means, in words (the page and the command line).
WAITING_WORDS = {"no_plan": "no plan yet", "working": "deleting now", "waiting_for_slot": "queued: waiting for a slot",
                 "held": "held in the batch system", "waiting_for_top_up": "waiting for room (top-up)",
                 "waiting_for_slice": "waiting for the next slice", "waiting_for_cycle": "waiting for the next cycle",
                 "done": "done"}


def shares(counters: dict[str, Any]) -> dict[str, int]:
    """The planned files split for a progress bar: deleted (or already missing), would delete (dry run), failed
    (or outcome unknown; retried while tries are left), protected since planning, pending."""
    def n(key: str) -> int:
        v = counters.get(key)
        return v if isinstance(v, int) and not isinstance(v, bool) else 0
    return {name: sum(n(k) for k in keys) for name, keys in SHARES}


def shares_label(counters: dict[str, Any]) -> str:
    """The non-empty shares in words, e.g. `18% deleted · 82% failed`; "-" without a plan."""
    parts = shares(counters)
    total = sum(parts.values())
    if not total:
        return "-"
    return " · ".join(f"{n / total:.0%} {SHARE_WORDS[name]}" if n * 100 >= total else f"<1% {SHARE_WORDS[name]}"
                      for name, n in parts.items() if n)


def cycle_share(counters: dict[str, Any]) -> str:
    """A throttled RSE's share of its plan this cycle: "N of M this cycle (slice k of S)"; "" when not throttled."""
    if not counters.get("slices"):
        return ""
    return (f"{counters.get('cycle_files', 0):,} of {counters.get('to_delete', 0):,} this cycle "
            f"(slice {counters.get('slice', 0)} of {counters['slices']})")


def span(seconds: float) -> str:
    """A length of time in its largest sensible unit, e.g. `45 s`, `12 min`, `3.5 h`, `2.1 d`."""
    for unit, n in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= 2 * n:
            return f"{seconds / n:.1f} {unit}" if unit != "min" else f"{seconds / n:.0f} {unit}"
    return f"{seconds:.0f} s"


def rate(d: dict[str, Any]) -> str:
    """A drain's rate (drainstatus.drain), e.g. `12.5 files/s`; `-` before it is known."""
    r = d.get("rate_files_s")
    return "-" if r is None else f"{r:,.2f} files/s" if r < 10 else f"{r:,.0f} files/s"


def expected_end(d: dict[str, Any], now: float, short: bool = False) -> str:
    """When a drain is expected to end: `done`, `unknown (no rate yet)`, or the time and how long from now
    (`short`: the time of day alone when it is within the next 20 hours, for the RSE table)."""
    if not d.get("backlog_files"):
        return "done"
    end = d.get("expected_end")
    if not isinstance(end, (int, float)):
        return "unknown (no rate yet)"
    at = time.strftime("%H:%M UTC", time.gmtime(end)) if short and end - now < 20 * 3600 else when(end)
    return f"{at} (in {span(max(0.0, end - now))})"


def next_slice(d: dict[str, Any], now: float) -> str:
    """A throttled drain's next slice: "slice k+1 of S (N files) at <time> (in ...)"; "" when there is none."""
    if not d.get("slices") or d.get("next_slice_files") is None:
        return ""
    at = d.get("next_slice_at")
    timing = f"at {when(at)} (in {span(max(0.0, at - now))})" if isinstance(at, (int, float)) else \
        "after the released files are done (time unknown: no rate yet)"
    return f"slice {d.get('slice', 0) + 1} of {d['slices']} ({d['next_slice_files']:,} files) {timing}"


def job_slice(job: dict[str, Any]) -> str:
    """The throttle's slice a job belongs to; "retry" for a later round's job (no slice), "-" unthrottled."""
    return str(job["slice"]) if job.get("slice") else "retry" if job.get("round", 1) > 1 else "-"


def job_work(job: dict[str, Any]) -> str:
    """A job's files, and the directories a directory job retries."""
    dirs = len(job.get("retry_dirs") or [])
    return f"{job.get('files', 0):,} files" + (f" + {dirs:,} directories" if dirs else "")
