"""The throttle (`planner.max_files_per_cycle`): a plan's files cut into slices of at most N files, one slice
released per cycle of the same dump, oldest dataset directories first, whole directories together.

The order is deterministic: dataset directories (the first `planner.dir_floor_depth` path elements) by the
generation the ledger first saw them in a plan (`ledger/ages.py`), oldest first, those never seen last; within
one age, the planner's own order (spill partition, then directory). A directory is never split between two
slices unless it alone holds more than N files.
"""
from __future__ import annotations

from typing import Mapping

# Age classes the planner keeps apart (its spill partitions are per class): the oldest first-seen generations
# each get one, newer ones share the last but one, and directories never seen before the last.
MAX_AGE_CLASSES = 8


def dataset_of(directory: bytes, floor: int) -> bytes:
    """A directory's dataset directory: its first `floor` path elements (itself when it has fewer)."""
    cut = -1
    for _ in range(floor):
        cut = directory.find(b"/", cut + 1)
        if cut < 0:
            return directory
    return directory[:cut]


class AgeOrder:
    """A dataset directory's age class, 0 for the oldest; `classes` in all."""

    def __init__(self, first_seen: Mapping[bytes, float]) -> None:
        times = sorted(set(first_seen.values()))
        rank = {t: min(i, MAX_AGE_CLASSES - 2) for i, t in enumerate(times)}
        self._class = {base: rank[t] for base, t in first_seen.items()}
        self.classes = min(len(times), MAX_AGE_CLASSES - 1) + 1
        self.never_seen = self.classes - 1

    def __call__(self, base: bytes) -> int:
        return self._class.get(base, self.never_seen)


class Slicer:
    """Counts the planned files, written in order, into slices of at most `per_slice` files."""

    def __init__(self, per_slice: int) -> None:
        self.per_slice = per_slice
        self.sizes = [0]  # files in each slice so far; the last one is being filled

    @property
    def current(self) -> int:
        """The number of the slice being filled (1 for the first)."""
        return len(self.sizes)

    @property
    def room(self) -> int:
        return self.per_slice - self.sizes[-1]

    def begin(self, files: int) -> bool:
        """A directory of `files` files comes next; True when it starts a new slice (it does not fit in this one)."""
        if self.sizes[-1] and files > self.room:
            self.sizes.append(0)
            return True
        return False

    def take(self, files: int, more: bool) -> bool:
        """`files` files were written; True when the slice is full and `more` of the directory must go on in a
        new one (a directory larger than a slice)."""
        self.sizes[-1] += files
        if more and self.room == 0:
            self.sizes.append(0)
            return True
        return False

