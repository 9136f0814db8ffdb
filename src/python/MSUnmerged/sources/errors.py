"""One error type for every outside source, classified so the service can record why it stopped."""
from __future__ import annotations

from typing import Any, Optional

import requests
import urllib3.exceptions

from MSUnmerged.redact import redact

UNREACHABLE = "unreachable"
TIMEOUT = "timeout"
HTTP_STATUS = "http_status"
AUTHENTICATION = "authentication"
BAD_CONTENT = "bad_content"
TRUNCATED = "truncated"
NO_MATCH = "no_match"
KINDS = (UNREACHABLE, TIMEOUT, HTTP_STATUS, AUTHENTICATION, BAD_CONTENT, TRUNCATED, NO_MATCH)


class SourceError(Exception):
    """ConMon, WMStats or Rucio could not give a complete, trustworthy answer.

    `kind` is one of KINDS, `source` names the service ("conmon", "wmstats", "wmstats-t0",
    "rucio"), `status` is the HTTP status for kind http_status (and authentication by status).
    """

    def __init__(self, kind: str, message: str, source: str, status: Optional[int] = None) -> None:
        if kind not in KINDS:
            raise ValueError(f"unknown SourceError kind {kind!r}")
        self.kind = kind
        self.message = redact(message)  # a URL in it may carry a credential
        self.source = source
        self.status = status
        super().__init__(str(self))

    def __str__(self) -> str:
        status = f" {self.status}" if self.status is not None else ""
        return f"{self.source}: {self.kind}{status}: {self.message}"

    def to_dict(self) -> dict[str, Any]:
        """What the ledger records on the RSE or the cycle."""
        return {"kind": self.kind, "source": self.source, "status": self.status, "message": self.message}


def from_status(source: str, status: int, what: str, body: str = "") -> SourceError:
    """An HTTP answer that is not 2xx."""
    detail = f"{what}: HTTP {status}" + (f": {body[:200]}" if body else "")
    kind = AUTHENTICATION if status in (401, 403) else HTTP_STATUS
    return SourceError(kind, detail, source, status)


def from_exception(source: str, exc: BaseException, what: str) -> SourceError:
    """Classify a requests/urllib3 transport exception (before or while reading a body)."""
    if isinstance(exc, SourceError):
        return exc
    # Order matters: ConnectTimeout is also a ConnectionError, SSLError also a ConnectionError.
    if isinstance(exc, (requests.Timeout, urllib3.exceptions.TimeoutError)):
        kind = TIMEOUT
    elif isinstance(exc, requests.exceptions.SSLError):
        kind = AUTHENTICATION  # TLS handshake: server not trusted or client certificate refused
    elif isinstance(exc, (requests.exceptions.ChunkedEncodingError, urllib3.exceptions.ProtocolError,
                          urllib3.exceptions.IncompleteRead)):
        kind = TRUNCATED
    elif isinstance(exc, requests.exceptions.ContentDecodingError):
        kind = BAD_CONTENT
    elif isinstance(exc, (requests.ConnectionError, OSError)):
        kind = UNREACHABLE
    else:
        kind = BAD_CONTENT
    return SourceError(kind, f"{what}: {type(exc).__name__}: {exc}", source)
