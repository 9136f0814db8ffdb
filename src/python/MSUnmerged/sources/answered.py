"""Which outside sources answered during a polling cycle: a Sources that notes the source of every call that
returned (a call that raised is the cycle's recorded failure instead). The cycle records them (`answered`), so
that `msunmerged_source_up` is 1 only for a source the cycle heard from, and unknown (no sample) for one it never
called, e.g. WMStats when Rucio failed first."""
from __future__ import annotations

import threading
from typing import Any, BinaryIO, Optional, TypeVar

from MSUnmerged.sources import Sources

T = TypeVar("T")
# The cycle's failure sources (ledger.history.FAILURE_SOURCES) of the Sources calls.
RUCIO, CONMON, WMSTATS = "rucio", "conmon", "wmstats"


class AnsweredSources:
    """`inner`, noting the source of each call that returned since the last `reset`."""

    def __init__(self, inner: Sources) -> None:
        self.inner = inner
        self._answered: set[str] = set()
        self._lock = threading.Lock()

    def reset(self) -> None:
        with self._lock:
            self._answered.clear()

    def answered(self) -> set[str]:
        with self._lock:
            return set(self._answered)

    def _note(self, source: str, value: T) -> T:
        with self._lock:
            self._answered.add(source)
        return value

    def rses(self) -> list[str]:
        return self._note(RUCIO, self.inner.rses())

    def stats(self) -> dict[str, Any]:
        return self._note(CONMON, self.inner.stats())

    def protected(self) -> list[str]:
        return self._note(WMSTATS, self.inner.protected())

    def open_dump(self, rse: str) -> BinaryIO:
        return self._note(CONMON, self.inner.open_dump(rse))

    def unmerged_pfn(self, rse: str) -> Optional[str]:
        return self._note(RUCIO, self.inner.unmerged_pfn(rse))

    def rse_attributes(self, rse: str) -> dict[str, Any]:
        return self._note(RUCIO, self.inner.rse_attributes(rse))
