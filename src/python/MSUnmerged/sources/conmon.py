"""ConMon client: scan statistics and the unmerged dump of one RSE, streamed without loading it whole."""
from __future__ import annotations

import contextlib
import http.client
from typing import Any, Iterator, Optional, Sequence

import requests
import urllib3

from MSUnmerged.config import AuthConfig, ConMonConfig
from MSUnmerged.dumpreader import GZIP_MAGIC
from MSUnmerged.sources.errors import BAD_CONTENT, TRUNCATED, SourceError, from_exception
from MSUnmerged.sources.http import HttpSource, make_session

SOURCE = "conmon"
# A dump starts with an LFN ('/'), a JSON array ('[') or gzip magic; anything else (an HTML
# login page, a JSON error object) is not a dump even with status 200.
_DUMP_FIRST_BYTES = b"/["


class ConMonClient:
    """Reads `<url>/stats` and `<url>/files` of the Rucio Consistency Monitor (unmerged area)."""

    def __init__(self, config: ConMonConfig, auth: AuthConfig, session: Optional[requests.Session] = None) -> None:
        self.config = config
        self.base = config.url.rstrip("/")
        self.http = HttpSource(SOURCE, session or make_session(auth), config.connect_timeout_s,
                               config.read_timeout_s, config.retries, config.backoff_s)

    def stats(self, rse: Optional[str] = None) -> Any:
        """All scans as {RSE: {...}}; with `rse`, that RSE's entry or None when ConMon has no scan of it."""
        data = self.http.get_json(f"{self.base}/stats", what="stats")
        if not isinstance(data, dict) or not all(isinstance(v, dict) for v in data.values()):
            raise SourceError(BAD_CONTENT, f"stats: expected an object of RSE objects, got {type(data).__name__}",
                              SOURCE)
        return data if rse is None else data.get(rse)

    @contextlib.contextmanager
    def open_dump(self, rse: str, include: Sequence[str] = (), exclude: Sequence[str] = ()) -> Iterator["DumpStream"]:
        """The dump of `rse` as a binary file-like of the bytes on the wire (gzip left compressed).

        Retries happen only before the first body byte; after that any failure is a SourceError
        (truncated or timeout), never a short but clean end of file.
        """
        params = {"rse": rse, "format": self.config.format}
        if include:
            params["include"] = ",".join(include)
        if exclude:
            params["exclude"] = ",".join(exclude)
        what = f"dump of {rse}"
        resp = self.http.get(f"{self.base}/files", params=params, stream=True, what=what)
        try:
            yield DumpStream(resp, what)
        finally:
            resp.close()


class DumpStream:
    """Read-only binary stream over a response body that checks it arrives whole."""

    def __init__(self, resp: requests.Response, what: str) -> None:
        self._raw = resp.raw
        self._what = what
        length = resp.headers.get("Content-Length")
        self._expected = int(length) if length and length.isdigit() else None
        self._received = 0
        self._checked = False
        self._head = b""

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        if not self._checked:
            self._check_start()
        if self._head:
            if size < 0:
                data, self._head = self._head, b""
                return data + self._read(-1)
            data, self._head = self._head[:size], self._head[size:]
            return data
        return self._read(size)

    def _read(self, size: int) -> bytes:
        try:
            # decode_content=False: the dumpreader must see the gzip stream to detect its truncation.
            data = self._raw.read(None if size < 0 else size, decode_content=False)
        except (urllib3.exceptions.HTTPError, http.client.HTTPException, OSError) as exc:
            raise from_exception(SOURCE, exc, self._what) from None
        self._received += len(data)
        if not data or size < 0:
            self._check_length()
        return data

    def _check_start(self) -> None:
        self._checked = True
        head = b""
        while not head.strip():
            block = self._read(4096)
            if not block:
                break
            head += block
        self._head = head
        first = head.lstrip()[:1]
        if head[:2] != GZIP_MAGIC and first and first not in _DUMP_FIRST_BYTES:
            raise SourceError(BAD_CONTENT, f"{self._what}: not a dump, starts with {head[:60]!r}", SOURCE)

    def _check_length(self) -> None:
        if self._expected is not None and self._received != self._expected:
            raise SourceError(TRUNCATED, f"{self._what}: got {self._received} of {self._expected} bytes", SOURCE)
