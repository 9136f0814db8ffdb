"""WMStats client: the protected unmerged LFN bases, from production and (optionally) Tier-0 WMStats."""
from __future__ import annotations

from typing import Optional

import requests

from MSUnmerged.config import AuthConfig, WMStatsConfig
from MSUnmerged.guards import GUARD_PROTECTED_EMPTY, GuardTripped
from MSUnmerged.sources.errors import BAD_CONTENT, SourceError
from MSUnmerged.sources.http import HttpSource, make_session


class WMStatsClient:
    """`GET <url>/data/protectedlfns` from each configured WMStats; all or nothing."""

    def __init__(self, config: WMStatsConfig, auth: AuthConfig, session: Optional[requests.Session] = None) -> None:
        session = session or make_session(auth)
        self.sources = [("wmstats", config.url)] + ([("wmstats-t0", config.t0_url)] if config.t0_url else [])
        self.http = {name: HttpSource(name, session, config.timeout_s, config.timeout_s, config.retries,
                                      config.backoff_s) for name, _ in self.sources}

    def protected_lfns(self) -> list[str]:
        """The sorted union of every source's list. Any source failing raises SourceError, any answering an empty
        list GuardTripped protected_list_empty: a partial list would leave active workflows unprotected."""
        union: set[str] = set()
        for name, url in self.sources:
            union.update(self._fetch(name, url))
        return sorted(union)

    def _fetch(self, name: str, url: str) -> list[str]:
        data = self.http[name].get_json(f"{url.rstrip('/')}/data/protectedlfns", what="protectedlfns")
        result = data.get("result") if isinstance(data, dict) else None
        if not isinstance(result, list):
            raise SourceError(BAD_CONTENT, f"protectedlfns: expected {{'result': [...]}}, got {_shape(data)}", name)
        if not result:  # the guard of docs/operations.md, from any one source: a partial union protects too little
            raise GuardTripped(GUARD_PROTECTED_EMPTY, f"{name} answered an empty protectedlfns list (WMStats restarting?)")
        bad = next((item for item in result if not isinstance(item, str) or not item.startswith("/")), None)
        if bad is not None:
            raise SourceError(BAD_CONTENT, f"protectedlfns: {bad!r} is not an LFN", name)
        return result


def _shape(data: object) -> str:
    if isinstance(data, dict):
        return f"an object with keys {sorted(data)[:5]}"
    return type(data).__name__
