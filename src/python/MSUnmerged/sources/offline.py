"""File-based Sources for the CLI, tests and offline runs: the same answers the real services give.

Layout of the directory (the names are written here only: writers use the constants and dump_file):
  stats.json        the ConMon `stats` answer ({RSE: {...}})
  protected.json    the WMStats `protectedlfns` answer ({"result": [...]}) or a JSON list
  dumps/<RSE>       the RSE's dump (text, gzip or JSON array; any extension: .txt, .gz, .json)
  rses.json         optional list of RSE names (default: the keys of stats.json)
  rse_attributes.json  optional Rucio RSE attributes: {RSE: {attribute: value}} (default: none)
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, BinaryIO, Optional

from MSUnmerged.sources.errors import BAD_CONTENT, HTTP_STATUS, NO_MATCH, SourceError

STATS_FILE = "stats.json"
PROTECTED_FILE = "protected.json"
RSES_FILE = "rses.json"
RSE_ATTRIBUTES_FILE = "rse_attributes.json"
DUMPS_DIR = "dumps"


def dump_file(directory: Path | str, rse: str, suffix: str = ".txt") -> Path:
    """Where the dump of `rse` is written in an offline sources directory."""
    return Path(directory) / DUMPS_DIR / f"{rse}{suffix}"


class OfflineSources:
    """Answers stats(), protected(), rses(), rse_attributes(rse), unmerged_pfn(rse) and open_dump(rse) from files
    in one directory."""

    def __init__(self, directory: Path | str) -> None:
        self.directory = Path(directory)
        # The protected list last parsed, with the bytes it came from (see protected()).
        self._protected: tuple[bytes, tuple[str, ...]] = (b"", ())

    def _read(self, name: str, source: str) -> bytes:
        path = self.directory / name
        try:
            return path.read_bytes()
        except FileNotFoundError:
            # Like WMStats' 503 while its cache is empty: the answer is not available.
            raise SourceError(HTTP_STATUS, f"{path} not found", source, 503) from None
        except OSError as exc:
            raise SourceError(BAD_CONTENT, f"{path}: {exc}", source) from None

    def _json(self, name: str, source: str, raw: Optional[bytes] = None) -> Any:
        """The file's JSON (`raw`: its bytes, read already)."""
        raw = self._read(name, source) if raw is None else raw
        try:
            return json.loads(raw)
        except ValueError as exc:
            raise SourceError(BAD_CONTENT, f"{self.directory / name}: {exc}", source) from None

    def stats(self) -> dict[str, Any]:
        data = self._json(STATS_FILE, "conmon")
        if not isinstance(data, dict):
            raise SourceError(BAD_CONTENT, f"{STATS_FILE} is not an object keyed by RSE", "conmon")
        return data

    def protected(self) -> list[str]:
        """The file is read on every call (a changed file is never missed); it is parsed again only when its bytes
        differ from the last parsed ones, so the RSEs of a cycle get the same strings (their preparation, keyed by
        the list, then compares them by identity)."""
        raw = self._read(PROTECTED_FILE, "wmstats")
        last_raw, last = self._protected  # one tuple: threads of a cycle may call at once
        if raw == last_raw and last_raw:
            return list(last)
        data = self._json(PROTECTED_FILE, "wmstats", raw)
        if isinstance(data, dict):
            data = data.get("result")
        if not isinstance(data, list) or not all(isinstance(x, str) for x in data):
            raise SourceError(BAD_CONTENT, f"{PROTECTED_FILE} is not a list of LFN strings", "wmstats")
        self._protected = (raw, tuple(data))
        return data

    def rses(self) -> list[str]:
        if (self.directory / RSES_FILE).exists():
            names = self._json(RSES_FILE, "rucio")
            if not isinstance(names, list) or not all(isinstance(x, str) for x in names):
                raise SourceError(BAD_CONTENT, f"{RSES_FILE} is not a list of RSE names", "rucio")
            return sorted(names)
        return sorted(self.stats())

    def rse_attributes(self, rse: str) -> dict[str, Any]:
        if not (self.directory / RSE_ATTRIBUTES_FILE).exists():
            return {}
        data = self._json(RSE_ATTRIBUTES_FILE, "rucio")
        attributes = data.get(rse, {}) if isinstance(data, dict) else None
        if not isinstance(attributes, dict):
            raise SourceError(BAD_CONTENT, f"{RSE_ATTRIBUTES_FILE} is not an object of RSE objects", "rucio")
        return attributes

    def unmerged_pfn(self, rse: str) -> Optional[str]:
        """No Rucio offline: the jobs check the site configuration's own mapping only (site_config_only)."""
        return None

    def open_dump(self, rse: str) -> BinaryIO:
        dumps = self.directory / DUMPS_DIR
        matches = sorted(dumps.glob(f"{rse}*"))
        exact = [p for p in matches if p.name == rse or p.name.split(".")[0] == rse]
        if not exact:
            raise SourceError(NO_MATCH, f"no dump for {rse} in {dumps}", "conmon")
        return open(exact[0], "rb")
