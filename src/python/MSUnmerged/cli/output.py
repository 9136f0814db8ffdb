"""Shared terminal output for commands: tables, readable values and times, progress, truncation notices."""
from __future__ import annotations

import contextlib
import errno
import os
import sys
import time
from types import TracebackType
from typing import Any, BinaryIO, Callable, Iterator, Optional, Sequence, TextIO

from rich import box, progress as rp
from rich.console import Console
from rich.table import Table

from MSUnmerged.present import size, when


class _Console(Console):
    """rich's Console, except that a reader that went away is left to cli.main (rich would exit 1 at once)."""

    def on_broken_pipe(self) -> None:
        raise BrokenPipeError(errno.EPIPE, "the reader of the output went away")


def console(out: TextIO) -> Console:
    """A console on `out`: plain text (no markup: LFNs and errors hold brackets); unbounded width off a terminal."""
    tty = out.isatty()
    return _Console(file=out, markup=False, highlight=False, emoji=False, force_terminal=tty,
                   width=None if tty else 100_000, no_color=not tty)


def cell(value: Any) -> str:
    """A value as a table shows it: numbers grouped, mappings as `key n, ...`, nothing as '-'."""
    if value is None or value == "" or value == {} or value == []:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, dict):
        return ", ".join(f"{k} {cell(v)}" for k, v in sorted(value.items()))
    if isinstance(value, (list, tuple)):
        return ", ".join(cell(v) for v in value)
    return str(value)


def table(rows: Sequence[Sequence[Any]], headers: Sequence[str], out: Optional[TextIO] = None) -> None:
    """Print an aligned table, a rule under the headers; each row starts with its first cell."""
    out = out or sys.stdout  # looked up at call time: tests and callers may replace sys.stdout
    t = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, header_style="bold")
    for header in headers:
        t.add_column(header, overflow="fold")  # a narrow terminal wraps an LFN, never cuts it
    for row in rows:
        t.add_row(*(cell(c) for c in row))
    con = console(out)
    if out.isatty():
        con.print(t)
        return
    with con.capture() as text:
        con.print(t)
    out.write("".join(line.rstrip() + "\n" for line in text.get().splitlines()))


def moment(ts: Any, now: Optional[float] = None) -> str:
    """An epoch time as UTC date and time with how long ago, e.g. `2026-11-30 09:49:34 UTC (5 min ago)`."""
    text = when(ts)
    if text == "never":
        return "-"
    age = (time.time() if now is None else now) - float(ts)
    return f"{text} ({duration(abs(age))} {'ago' if age >= 0 else 'from now'})"


def duration(seconds: float) -> str:
    """A rough, readable length of time: 40 s, 5 min, 3.2 h, 4.0 d."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    if seconds < 48 * 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} d"


def truncated(shown: str, hint: str, out: Optional[TextIO] = None) -> None:
    """Say on stderr that a listing stopped at its limit, e.g. `100 files`, and how to see the rest."""
    print(f"(only the first {shown} shown; there are more: {hint})", file=out or sys.stderr)


class Progress:
    """Progress of a long step on stderr, fed with the amount done so far.

    Entered as a context manager on a terminal: a rich bar with percentage, rate and time left
    (when the total is known). Otherwise (not a terminal, or not entered): a plain line every
    `every` seconds, with percentage and time left when the total is known.
    """

    def __init__(self, label: str, total: Optional[float] = None, unit: str = "lines", every: float = 10.0,
                 out: Optional[TextIO] = None) -> None:
        self.label, self.total, self.unit, self.every = label, total, unit, every
        self.out = out or sys.stderr
        self.start = self._last = time.monotonic()
        self.done = 0.0
        self._bar: Optional[rp.Progress] = None
        self._task: Optional[rp.TaskID] = None

    def __enter__(self) -> "Progress":
        if self.out.isatty():
            amount = (rp.DownloadColumn(), rp.TransferSpeedColumn()) if self.unit == "bytes" else (
                rp.MofNCompleteColumn(), rp.TextColumn(f"{self.unit}"))
            self._bar = rp.Progress(rp.TextColumn(self.label), rp.BarColumn(), rp.TaskProgressColumn(), *amount,
                                    rp.TextColumn("eta"), rp.TimeRemainingColumn(), console=console(self.out),
                                    transient=False)
            self._task = self._bar.add_task(self.label, total=self.total)
            self._bar.start()
        return self

    def __exit__(self, kind: Optional[type], exc: Optional[BaseException], tb: Optional[TracebackType]) -> None:
        if self._bar is not None:
            if kind is None and self.total:
                self._bar.update(self._task, completed=self.total)  # type: ignore[arg-type]
            self._bar.stop()
            self._bar = None

    def __call__(self, done: float) -> None:
        self.done = done
        if self._bar is not None:
            self._bar.update(self._task, completed=done)  # type: ignore[arg-type]
            return
        now = time.monotonic()
        if now - self._last >= self.every:
            self._last = now
            self.out.write(self.line(now) + "\n")
            self.out.flush()

    def line(self, now: float) -> str:
        """The plain progress line, e.g. `planning X: 45% (1.2 GB of 2.7 GB), 85.0 MB/s, about 18 s left`."""
        elapsed = max(now - self.start, 1e-9)
        rate = self.done / elapsed
        show = size if self.unit == "bytes" else (lambda n: f"{n:,.0f} {self.unit}")
        speed = f"{size(rate)}/s" if self.unit == "bytes" else f"{rate:,.0f} {self.unit}/s"
        if not self.total:
            return f"{self.label}: {show(self.done)}, {speed}"
        left = (self.total - self.done) / rate if rate > 0 else None
        eta = f"about {duration(left)} left" if left is not None else "time left unknown"
        return (f"{self.label}: {min(100.0, 100 * self.done / self.total):.0f}% ({show(self.done)} of "
                f"{show(self.total)}), {speed}, {eta}")


class _Counting:
    """A binary stream that counts the bytes read through it."""

    def __init__(self, stream: BinaryIO) -> None:
        self.stream = stream
        self.count = 0

    def read(self, n: int = -1) -> bytes:
        data = self.stream.read(n)
        self.count += len(data)
        return data


@contextlib.contextmanager
def reading(path: str, label: str) -> Iterator[tuple[BinaryIO, Callable[[int], None]]]:
    """Open a file for reading with a progress display over its bytes (compressed bytes for gzip).

    Yields the stream and the planner's progress callback (which is given lines; bytes are shown).
    """
    with open(path, "rb") as fh, Progress(label, total=os.fstat(fh.fileno()).st_size, unit="bytes") as bar:
        stream = _Counting(fh)
        yield stream, lambda _lines: bar(stream.count)  # type: ignore[misc]
