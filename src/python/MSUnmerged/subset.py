"""Whether every line of some files is a line of others, streamed in bounded memory (apply's re-derivation).

Both sides are split into partition files by a hash of each line's directory (runs of lines that share a
directory move together, as the planner splits a dump), then compared one partition at a time: only one
partition of each side is ever held, as a set. Memory depends on the partition size (and on the largest
directory), not on the number of lines.
"""
from __future__ import annotations

import shutil
import zlib
from pathlib import Path
from typing import Callable, Iterable, Iterator, Optional

from MSUnmerged import planlines

READ_BYTES = 4 * 1024 * 1024
MAX_PARTITIONS = 512


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


def first_outside(candidates: Iterable[Path], allowed: Iterable[Path], work: Path, partitions: int,
                  exempt: Callable[[bytes], bool], engine: planlines.Engine, max_length: int) -> Optional[bytes]:
    """The first line of the `candidates` files (in partition order, then sorted) that is no line of the
    `allowed` files and not `exempt`; None when there is none. `work` (removed after) holds the partitions."""
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
