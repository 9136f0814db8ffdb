"""A requests session with the service's credentials, plus GET with timeouts, retries and classification."""
from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any, Mapping, Optional

import requests
import requests.adapters

from MSUnmerged import retrying
from MSUnmerged.config import AuthConfig
from MSUnmerged.sources.errors import AUTHENTICATION, SourceError, from_exception, from_status
from MSUnmerged.worker.credentials import proxy_expiry

log = logging.getLogger(__name__)
USER_AGENT = "MSUnmerged/0.1"


class BearerTokenAuth(requests.auth.AuthBase):
    """Adds `Authorization: Bearer <token>` read from a file at each request (tokens are renewed
    on disk by an outside agent). The token is never part of repr() or of any log line."""

    def __init__(self, path: str) -> None:
        self.path = Path(path)

    def __call__(self, request: requests.PreparedRequest) -> requests.PreparedRequest:
        try:
            token = self.path.read_text().strip()
        except OSError as exc:
            raise SourceError("authentication", f"cannot read the token file {self.path}: {exc.strerror}",
                              "auth") from None
        if not token:
            raise SourceError("authentication", f"the token file {self.path} is empty", "auth")
        request.headers["Authorization"] = f"Bearer {token}"
        return request

    def __repr__(self) -> str:
        return f"BearerTokenAuth({str(self.path)!r})"


class ClientCertAdapter(requests.adapters.HTTPAdapter):
    """HTTPS with a client certificate (or proxy) that is checked before each request: a missing, unreadable
    or expired one is an authentication error naming the file, not a connection failure. Files are read
    anew each time: proxies are renewed on disk."""

    def __init__(self, files: tuple[str, ...]) -> None:
        super().__init__()
        self.files = files

    def send(self, request: requests.PreparedRequest, *args: Any, **kwargs: Any) -> requests.Response:
        for path in self.files:
            try:
                Path(path).open("rb").close()
            except OSError as exc:
                raise SourceError(AUTHENTICATION, f"client certificate {path}: {exc.strerror}", "auth") from None
        expires = proxy_expiry(self.files[0])
        if expires is not None and expires < time.time():
            raise SourceError(AUTHENTICATION, f"client certificate {self.files[0]} expired at "
                                              f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(expires))}", "auth")
        return super().send(request, *args, **kwargs)


def make_session(auth: AuthConfig) -> requests.Session:
    """A session that presents the configured credential: a token file, a proxy, or a cert + key."""
    session = requests.Session()
    session.headers["User-Agent"] = USER_AGENT
    session.trust_env = False  # no proxies or netrc credentials picked up from the environment
    if auth.ca_path:
        session.verify = auth.ca_path
    if auth.token_file:
        session.auth = BearerTokenAuth(auth.token_file)
    if auth.proxy:
        session.cert = auth.proxy  # a proxy file holds the certificate chain and its key
    elif auth.cert:
        session.cert = (auth.cert, auth.key or auth.cert)
    if session.cert:
        files = (session.cert,) if isinstance(session.cert, str) else tuple(session.cert)
        session.mount("https://", ClientCertAdapter(files))
    return session


class _Transient(Exception):
    """A failure worth asking again for (no answer, a timeout, a 5xx): `error` is what the caller gets."""

    def __init__(self, error: SourceError) -> None:
        super().__init__(error.message)
        self.error = error


class HttpSource:
    """GETs from one service: connect/read timeouts, retries with exponential backoff on
    connection errors, timeouts and 5xx answers; every failure becomes a SourceError."""

    def __init__(self, name: str, session: requests.Session, connect_timeout_s: float, read_timeout_s: float,
                 retries: int, backoff_s: float) -> None:
        self.name = name
        self.session = session
        self.timeout = (connect_timeout_s, read_timeout_s)
        self.retries = retries
        self.backoff_s = backoff_s

    def get(self, url: str, params: Optional[Mapping[str, Any]] = None, stream: bool = False,
            what: str = "GET") -> requests.Response:
        """A 2xx response (body not yet read when `stream`), or SourceError after the last retry."""
        def once() -> requests.Response:
            try:
                resp = self.session.get(url, params=params, stream=stream, timeout=self.timeout)
            except SourceError as exc:  # from BearerTokenAuth: name the service that needed the token
                raise SourceError(exc.kind, exc.message, self.name) from None
            except requests.RequestException as exc:
                raise _Transient(from_exception(self.name, exc, what)) from None
            if resp.status_code < 300:
                return resp
            body = resp.text if not stream or resp.status_code >= 400 else ""
            resp.close()
            error = from_status(self.name, resp.status_code, what, body.strip())
            if resp.status_code < 500:
                raise error  # 4xx will not change by asking again
            raise _Transient(error)

        try:
            return retrying.call(once, retrying.Backoff(self.retries + 1, self.backoff_s),
                                 lambda exc: isinstance(exc, _Transient), self.name, log)
        except retrying.Exhausted as exc:
            raise exc.last.error if isinstance(exc.last, _Transient) else exc.last from None

    def get_json(self, url: str, params: Optional[Mapping[str, Any]] = None, what: str = "GET") -> Any:
        """The decoded JSON body; a body that is not JSON is bad_content, a cut one truncated."""
        resp = self.get(url, params=params, what=what)
        try:
            return resp.json()
        except requests.exceptions.JSONDecodeError as exc:
            raise SourceError("bad_content", f"{what}: the answer is not JSON: {exc}", self.name) from None
        except requests.RequestException as exc:
            raise from_exception(self.name, exc, what) from None
