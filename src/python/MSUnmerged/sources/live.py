"""The Sources the service reads in production: ConMon, WMStats and Rucio over HTTPS."""
from __future__ import annotations

import contextlib
import threading
from typing import Any, Iterator, Optional

from MSUnmerged.config import Config
from MSUnmerged.sources.conmon import ConMonClient, DumpStream
from MSUnmerged.sources.rucio import RucioSource
from MSUnmerged.sources.wmstats import WMStatsClient


class LiveSources:
    """stats(), protected(), rses(), rse_attributes(rse), unmerged_pfn(rse) and open_dump(rse) from the real
    services named in the config."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.conmon = ConMonClient(config.conmon, config.auth)
        self.wmstats = WMStatsClient(config.wmstats, config.auth)
        self.rucio = RucioSource(config.rucio, config.auth, config.state_dir)
        self._attributes: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()

    def rses(self) -> list[str]:
        return self.rucio.rses(self.config.planner.rse_expression)

    def rse_attributes(self, rse: str) -> dict[str, Any]:
        """Read once per RSE and process: every job of an RSE goes to one site (a change applies at restart)."""
        with self._lock:
            known = self._attributes.get(rse)
        if known is None:
            known = self.rucio.rse_attributes(rse)
            with self._lock:
                known = self._attributes.setdefault(rse, known)
        return known

    def stats(self) -> dict[str, Any]:
        return self.conmon.stats()

    def protected(self) -> list[str]:
        return self.wmstats.protected_lfns()

    def unmerged_pfn(self, rse: str) -> Optional[str]:
        return self.rucio.unmerged_pfn(rse)

    @contextlib.contextmanager
    def open_dump(self, rse: str) -> Iterator[DumpStream]:
        with self.conmon.open_dump(rse) as stream:
            yield stream
