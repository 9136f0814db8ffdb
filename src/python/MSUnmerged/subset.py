"""Whether every line of some files is a line of others, streamed in bounded memory (apply's re-derivation).

First both sides are read once, side by side (`_in_order`): the same planner over the same dump writes the
lines of both in the same order, so that the lines of one are found among the other's in a single pass, a
stretch of equal bytes at a time. When they are not in that order, both sides are split into partition files
by a hash of each line's directory (runs of lines that share a directory move together, as the planner splits
a dump), then compared one partition at a time: only one partition of each side is ever held, as a set.
Memory depends on the read size and the partition size (and on the largest directory), not on the number of
lines.
"""
from __future__ import annotations

import shutil
import zlib
from pathlib import Path
from typing import Callable, Iterable, Iterator, Optional, Sequence

from MSUnmerged import planlines

READ_BYTES = 4 * 1024 * 1024
MAX_PARTITIONS = 512
LOOK_BYTES = 4096  # compared at once after a difference; doubled while both sides agree
MATCH_BYTES = 1024 * 1024  # compared at once at most


def partitions_for(total_bytes: int, max_bytes: int, least: int) -> int:
    """Enough partitions for parts of about `max_bytes` (at least `least`, at most MAX_PARTITIONS)."""
    return max(least, min(MAX_PARTITIONS, -(-total_bytes // max_bytes)))


def _whole_lines(path: Path) -> Iterator[bytes]:
    """The file's content a few MB at a time, cut after a newline (a last line without one gets one)."""
    rest = b""
    with open(path, "rb") as fh:
        while data := fh.read(READ_BYTES):
            data = rest + data
            cut = data.rfind(b"\n") + 1
            rest = data[cut:]
            if cut:
                yield data[:cut]
    if rest:
        yield rest + b"\n"


class _Lines:
    """One side's lines, whole-line chunks read in turn, with a position at the start of a line."""

    def __init__(self, paths: Iterable[Path]) -> None:
        self._chunks = (chunk for path in paths for chunk in _whole_lines(path))
        self.buf, self.pos = b"", 0

    def ready(self) -> bool:
        """Whether a line is left (then `buf` holds it, whole, at `pos`)."""
        while self.pos == len(self.buf):
            chunk = next(self._chunks, None)
            if chunk is None:
                return False
            self.buf, self.pos = chunk, 0
        return True

    def line(self) -> bytes:
        return self.buf[self.pos:self.buf.index(b"\n", self.pos)]

    def skip_line(self) -> None:
        self.pos = self.buf.index(b"\n", self.pos) + 1


def _in_order(candidates: Iterable[Path], allowed: Iterable[Path], exempt: Callable[[bytes], bool]) -> bool:
    """True when each line of the `candidates` files is `exempt` or is found among the lines of the `allowed`
    files that follow the one found for the line before it (so it is one of them); False says only that the
    lines are not in the same order. Both sides are read once, side by side, a stretch of equal bytes at a
    time; where they differ, a line at a time."""
    mine, theirs = _Lines(candidates), _Lines(allowed)
    window = LOOK_BYTES
    while mine.ready():
        if not theirs.ready():
            if not exempt(mine.line()):
                return False
            mine.skip_line()
            continue
        n = min(window, len(mine.buf) - mine.pos, len(theirs.buf) - theirs.pos)
        stretch = mine.buf[mine.pos:mine.pos + n]
        cut = stretch.rfind(b"\n") + 1
        if cut and stretch[:cut] == theirs.buf[theirs.pos:theirs.pos + cut]:
            mine.pos += cut
            theirs.pos += cut
            window = min(2 * window, MATCH_BYTES)
            continue
        window = LOOK_BYTES
        line = mine.line()
        if line == theirs.line():
            mine.skip_line()
            theirs.skip_line()
        elif exempt(line):
            mine.skip_line()
        else:  # this line of the current plan is not the plan's next one: look further on
            theirs.skip_line()
    return True


def _split(paths: Iterable[Path], folder: Path, n: int, engine: planlines.Engine, max_length: int) -> list[Path]:
    """The lines of `paths` in `n` partition files under `folder`, by a hash of each line's directory."""
    folder.mkdir(parents=True)
    parts = [folder / f"part-{i:03d}" for i in range(n)]
    outs = [open(p, "wb", buffering=64 * 1024) for p in parts]
    try:
        for path in paths:
            for chunk in _whole_lines(path):
                runs = engine.runs(chunk, max_length)
                if runs is None:  # lines the engine does not take whole (e.g. UTF-8 names): split one by one
                    runs = planlines.split_runs(chunk.split(b"\n")[:-1])
                for directory, block, _ in runs:
                    outs[zlib.crc32(directory) % n].write(block)
    finally:
        for fh in outs:
            fh.close()
    return parts


def first_outside(candidates: Sequence[Path], allowed: Sequence[Path], work: Path, partitions: int,
                  exempt: Callable[[bytes], bool], engine: planlines.Engine, max_length: int) -> Optional[bytes]:
    """The first line of the `candidates` files (in partition order, then sorted) that is no line of the
    `allowed` files and not `exempt`; None when there is none. `work` (removed after) holds the partitions."""
    if _in_order(candidates, allowed, exempt):
        return None
    shutil.rmtree(work, ignore_errors=True)
    try:
        mine = _split(candidates, work / "candidates", partitions, engine, max_length)
        known = _split(allowed, work / "allowed", partitions, engine, max_length)
        for part, allowed_part in zip(mine, known):
            if not part.stat().st_size:
                continue
            outside = set(part.read_bytes().split(b"\n")).difference(allowed_part.read_bytes().split(b"\n"))
            for line in sorted(outside):
                if not exempt(line):
                    return line
        return None
    finally:
        shutil.rmtree(work, ignore_errors=True)
