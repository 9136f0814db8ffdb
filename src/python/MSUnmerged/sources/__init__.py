"""The outside services the service reads: `Sources` is what it needs of them (live.py: ConMon, WMStats and
Rucio over HTTPS; offline.py: the same answers from files)."""
from __future__ import annotations

from typing import Any, BinaryIO, Optional, Protocol


class Sources(Protocol):
    """The outside services run_once reads (real clients in live.py, files in offline.py)."""

    def rses(self) -> list[str]:
        """This instance's RSEs (the Rucio RSE expression of its partition)."""

    def stats(self) -> dict[str, Any]:
        """The ConMon `stats` answer: {RSE: scan}."""

    def protected(self) -> list[str]:
        """Every protected LFN base (WMStats, and Tier-0 WMStats where configured); SourceError if unsure."""

    def open_dump(self, rse: str) -> BinaryIO:
        """The RSE's dump as a binary stream (closed by the caller)."""

    def unmerged_pfn(self, rse: str) -> Optional[str]:
        """Rucio's PFN of the RSE's /store/unmerged/ (None without Rucio); SourceError if it cannot answer."""

    def rse_attributes(self, rse: str) -> dict[str, Any]:
        """The RSE's attributes in Rucio (sites.resolve_site reads its site there where jobs.site_attribute is
        set); SourceError if they cannot be read."""
