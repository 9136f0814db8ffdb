"""This instance's RSEs: the Rucio RSE expression of its partition (or the offline list), minus the skipped, and
the order a cycle starts them in."""
from __future__ import annotations

import logging
import time
from typing import Any, Iterable, Mapping

from MSUnmerged.config import Config
from MSUnmerged.guards import scan_files
from MSUnmerged.sources import Sources
from MSUnmerged.sources.errors import SourceError

log = logging.getLogger(__name__)

RSE_LIST_TTL_S = 600.0  # how long a read of this instance's RSE list is trusted for a known RSE


def order_rses(names: Iterable[str], stats: Mapping[str, Any]) -> list[str]:
    """The order a cycle starts its RSEs in (each once): largest first by the `files` of its ConMon scan in `stats`
    ({RSE: scan}), ties by name, so that the largest RSE does not run alone at the cycle's end (longest first).
    An RSE of unknown size (no scan, no integer `files`) goes before all others, by name: it may be a large one."""
    def key(rse: str) -> tuple[bool, int, str]:
        files = scan_files(stats.get(rse))
        return files is not None, -(files or 0), rse
    return sorted(set(names), key=key)


class UnknownRSE(Exception):
    """The RSE is not one of this instance's; nothing may be recorded for it."""


class InstanceRSEs:
    """Reads this instance's RSE list and answers whether an RSE is one of them."""

    def __init__(self, config: Config, sources: Sources) -> None:
        self.config = config
        self.sources = sources
        self._known: tuple[float, frozenset[str]] = (0.0, frozenset())

    def read(self) -> list[str]:
        """The RSEs the loop works (planner.skip_rses left out); SourceError when the list cannot be read."""
        names = self.sources.rses()
        self._known = (time.monotonic(), frozenset(names))
        skip = set(self.config.planner.skip_rses)
        return [r for r in names if r not in skip]

    def require(self, rse: str) -> None:
        """Raise UnknownRSE unless `rse` is one of this instance's RSEs (sources.rses(): the Rucio
        expression, or the offline list). Every entry point (run, apply, clean, the REST trigger) calls
        it before anything reaches the ledger. When the list cannot be read, an RSE configured under
        jobs.sites is accepted and any other raises the SourceError (unknown is not assumed known)."""
        at, known = self._known
        if rse in known and time.monotonic() - at < RSE_LIST_TTL_S:
            return
        try:
            self.read()
        except SourceError as exc:
            if rse not in self.config.jobs.sites:
                raise
            log.warning("%s: this instance's RSE list is unavailable (%s); accepted as configured in jobs.sites",
                        rse, exc)
            return
        if rse not in self._known[1]:
            names = sorted(self._known[1])
            shown = ", ".join(names[:10]) + (", ..." if len(names) > 10 else "")
            raise UnknownRSE(f"RSE {rse} is not one of this instance's RSEs (expression "
                             f"{self.config.planner.rse_expression!r}; known: {shown or 'none'})")
