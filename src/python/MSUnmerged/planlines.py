"""The planner's per-line work on whole chunks: same-directory runs of valid lines, repeated lines.

Two engines give identical answers: `COMPILED` (the optional C extension `_planfast`, built by
setup.py when a compiler exists) and `PURE` (regular expressions and bytes methods); the
configuration's `planner.engine` chooses (`engine`).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Optional, Union

from MSUnmerged import lfn

try:
    from MSUnmerged import _planfast  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - no compiler where the package was installed
    _planfast = None

# The names `planner.engine` accepts: the compiled engine when built, else the pure one; or either.
AUTO, COMPILED_NAME, PURE_NAME = "auto", "compiled", "pure"
ENGINES = (AUTO, COMPILED_NAME, PURE_NAME)
MAX_NAME = 255

# One match = consecutive lines in the same directory; group 1 is the directory with its slash.
# It also validates: printable ASCII only, file names non-empty, at most 255 bytes, not '.' or
# '..'. A chunk that these runs tile exactly holds only such lines (directories are checked
# once per run).
# Possessive quantifiers: a name holds no '/', so the directory ends at the line's last '/' and
# nothing needs to be tried again (the same matches as greedy ones, without backtracking).
_RUN = re.compile(rb"(/(?:[!-.0-~]*+/)++)(?!\.\.?\n)[!-.0-~]{1,255}+\n(?:\1(?!\.\.?\n)[!-.0-~]{1,255}+\n)*+")
_BAD_IN_DIR = (b"//", b"/./", b"/../")

# A run's lines: bytes, or a view of the chunk's bytes (the compiled engine's runs: no copy).
Lines = Union[bytes, memoryview]
# (directory without its slash, the run's lines, how many), in chunk order.
Runs = list[tuple[bytes, Lines, int]]


def _dir_is_canonical(directory: bytes) -> bool:
    """A run's directory (with its trailing slash) is under /store/unmerged and canonical."""
    return directory.startswith(lfn.UNMERGED) and not any(bad in directory for bad in _BAD_IN_DIR)


def regex_runs(chunk: bytes, max_length: int) -> Optional[Runs]:
    """The chunk's same-directory runs when every line is a plain canonical LFN (printable ASCII,
    names of 1..255 bytes, at most `max_length` bytes), else None (the caller then checks each line)."""
    if not chunk.endswith(b"\n"):
        return None
    matches = list(_RUN.finditer(chunk))
    if sum(m.end() - m.start() for m in matches) != len(chunk):
        return None
    longest_ok = max_length - MAX_NAME - 1
    runs = []
    for m in matches:
        directory, block = m.group(1, 0)
        if not _dir_is_canonical(directory):
            return None
        if len(directory) > longest_ok and max(map(len, block.split(b"\n"))) > max_length:
            return None
        runs.append((directory[:-1], block, block.count(b"\n")))
    return runs


def split_runs(lines: list[bytes]) -> Runs:
    """Runs of consecutive lines that share a directory; every line holds a '/'."""
    runs: Runs = []
    current, block = b"", []
    for line in lines:
        directory = line[:line.rfind(b"/")]
        if directory != current and block:
            runs.append((current, b"\n".join(block) + b"\n", len(block)))
            block = []
        current = directory
        block.append(line)
    if block:
        runs.append((current, b"\n".join(block) + b"\n", len(block)))
    return runs


def as_they_are(prefix: bytes, block: Lines) -> Lines:
    """The pure engine spills runs as they are."""
    return block


def python_unique(prefix: bytes, block: bytes, examples_max: int) -> tuple[bytes, int, int, list[bytes]]:
    """(the block without repeated lines, lines kept, lines dropped, the first `examples_max` dropped);
    the block holds whole LFNs (`as_they_are`), so `prefix` is not needed."""
    files = block.split(b"\n")
    files.pop()
    unique = list(dict.fromkeys(files))
    repeats = len(files) - len(unique)
    if not repeats:
        return block, len(files), 0, []
    seen: set[bytes] = set()
    examples = []
    for f in files:
        if f in seen and len(examples) < examples_max:
            examples.append(f)
        seen.add(f)
    return b"\n".join(unique) + b"\n", len(unique), repeats, examples


def python_line_end(block: bytes, lines: int) -> int:
    """The offset just after the block's `lines`-th line."""
    rest = block.split(b"\n", lines)
    if lines < 0 or len(rest) <= lines:
        raise ValueError("line_end(): the block holds fewer lines than asked")
    return len(block) - len(rest[-1])


@dataclass(frozen=True)
class Engine:
    """One implementation of the planner's chunk-level work.

    `runs(chunk, max_length)`: see `regex_runs`. `spill(prefix, lines)`: how a run whose lines all
    start with `prefix` (its directory and slash) is stored in the spill. `unique(prefix, stored,
    examples)`: the LFNs of runs stored so, joined, without repeats: see `python_unique`. `line_end(block,
    n)`: see `python_line_end`.
    """

    name: str
    runs: Callable[[bytes, int], Optional[Runs]]
    spill: Callable[[bytes, Lines], Lines]
    unique: Callable[[bytes, bytes, int], tuple[bytes, int, int, list[bytes]]]
    line_end: Callable[[bytes, int], int]


PURE = Engine(PURE_NAME, regex_runs, as_they_are, python_unique, python_line_end)
# The compiled engine spills file names only (about a third of the bytes of CMS LFNs).
COMPILED: Optional[Engine] = (Engine(COMPILED_NAME, _planfast.runs, _planfast.names, _planfast.unique,
                                     _planfast.line_end) if _planfast else None)


def engine(name: str) -> Engine:
    """The engine `planner.engine` names (validated with the configuration)."""
    if name not in ENGINES:
        raise ValueError(f"unknown planner engine {name!r}")
    if name == PURE_NAME or (name == AUTO and COMPILED is None):
        return PURE
    if COMPILED is None:
        raise ValueError("the compiled planner engine is not built")
    return COMPILED
