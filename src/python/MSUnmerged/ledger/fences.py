"""Fences: a generation's bucket ids in order, kept in a few `fences` documents, so that the per-file pages
read bounded `_id` windows instead of the rest of the generation.

SecantusDB reads and sorts every match of an index range before it applies a limit, so a page's cost is
the size of the range it asks for (docs/ledger.md, "Pages"). The readers walk [lo, hi) in windows whose
ends are fences, each sized from what the one before gave, and stop once the page is full. Fences only
bound the windows: the windows always tile [lo, hi) and end at hi, so a missing, partial or stale fence
list gives the same answers, only slower. A generation's bucket set is fixed once recorded, so a complete
list is cached per process.
"""
from __future__ import annotations

import bisect
import math
import threading
from collections import OrderedDict
from typing import Any, Hashable, Optional, Sequence

from pymongo.collection import Collection

from MSUnmerged.ledger.retry import with_retry
from MSUnmerged.worker.ids import gen_prefix

CHUNK = 4096  # ids per document: ~0.4 MB
CACHED = 32  # generations whose fences a process keeps
REACHED = 10_000  # pages whose reach a process keeps


def documents(rse: str, generation: float, ids: Sequence[str]) -> list[dict[str, Any]]:
    """The fence documents of a generation whose buckets have these ids (any order)."""
    ordered = sorted(ids)
    chunks = [ordered[i:i + CHUNK] for i in range(0, len(ordered), CHUNK)]
    return [{"_id": f"{gen_prefix(rse, generation)}{k:05d}", "rse": rse, "gen": generation, "k": k,
             "of": len(chunks), "ids": chunk} for k, chunk in enumerate(chunks)]


class Windows:
    """Consecutive windows over (lo, hi) whose ends are fences; the last one ends at hi. The first holds
    `first` buckets, or ends at the first fence from `reach` on (where the same page filled last time: `reach`);
    each next one is sized from how many records the last one gave (x4 when none)."""

    def __init__(self, fences: Sequence[str], lo: str, hi: str, first: int, reach: Optional[str] = None) -> None:
        self.fences, self.hi = fences, hi
        self.i, self.step = bisect.bisect_right(fences, lo), max(1, first)
        if reach is not None and reach > lo:
            self.step = bisect.bisect_left(fences, reach) - self.i  # 0: the first fence above lo is at reach

    def end(self) -> str:
        """The end of the window after the last one (exclusive)."""
        self.i += self.step
        if self.i >= len(self.fences) or self.fences[self.i] >= self.hi:
            self.i = len(self.fences)
            return self.hi
        return self.fences[self.i]

    def resize(self, found: int, wanted: int) -> None:
        """The last window gave `found` records and `wanted` more are needed: the next one should give them."""
        self.step = max(1, self.step * 4 if found == 0 else math.ceil(self.step * wanted * 1.25 / found))


def reach(fences: Sequence[str], hi: str, last: Optional[str]) -> str:
    """Where a page whose last record is `last` (None: it ended before it was full) filled: the first fence
    above that record, or hi. A window from the page's start to there holds the page (a record's bucket sorts
    before it)."""
    if last is None:
        return hi
    i = bisect.bisect_right(fences, last)
    return fences[i] if i < len(fences) and fences[i] < hi else hi


class FenceCache:
    """The complete fence lists of recently read generations, read once per process, and where recent pages
    filled (`reached`): the same page asked again starts with the window that held it (one query, when the
    records did not move). A hint only: the windows still tile the page's range."""

    def __init__(self, coll: Collection, size: int = CACHED) -> None:
        self.coll = coll
        self.size = size
        self._lists: OrderedDict[tuple[str, float], list[str]] = OrderedDict()
        self._lock = threading.Lock()
        self.reached: dict[Hashable, str] = {}

    def reached_at(self, page: Hashable, end: str) -> None:
        """The page (its query, start and size) filled in a window ending at `end` (its keys come from requests:
        the memory is dropped past REACHED pages)."""
        if len(self.reached) >= REACHED:
            self.reached.clear()
        self.reached[page] = end

    def get(self, rse: str, generation: float) -> list[str]:
        """The generation's bucket ids in order; [] when it has no complete fence list (recorded before fences,
        or its recording is not finished): not kept, so the list is used once it is written."""
        key = (rse, generation)
        with self._lock:
            if key in self._lists:
                self._lists.move_to_end(key)
                return self._lists[key]
        docs = with_retry(lambda: list(self.coll.find({"rse": rse, "gen": generation})), "read fences")
        docs.sort(key=lambda d: d["k"])
        if not docs or [d["k"] for d in docs] != list(range(docs[0]["of"])):
            return []
        ids = [i for d in docs for i in d["ids"]]
        with self._lock:
            self._lists[key] = ids
            while len(self._lists) > self.size:
                self._lists.popitem(last=False)
        return ids
