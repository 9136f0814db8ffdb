"""Rucio client: the RSEs of an expression, their attributes, and the PFN of /store/unmerged/ for deletion."""
from __future__ import annotations

import logging
import os
import threading
from pathlib import Path
from typing import Any, Callable, Optional, TypeVar

import requests

from MSUnmerged.config import AuthConfig, RucioConfig
from MSUnmerged.sources.errors import (AUTHENTICATION, BAD_CONTENT, HTTP_STATUS, NO_MATCH, UNREACHABLE,
                                       SourceError, from_exception)

log = logging.getLogger(__name__)
SOURCE = "rucio"
SCOPE = "cms"
UNMERGED = "/store/unmerged/"
T = TypeVar("T")


class RucioSource:
    """rucio-clients configured from RucioConfig + AuthConfig, with every failure a SourceError.

    rucio-clients reads its token cache location only from a rucio.cfg, so one is generated under
    `<state_dir>/rucio/` (hosts and account, never a secret) and RUCIO_CONFIG points to it.
    """

    def __init__(self, config: RucioConfig, auth: AuthConfig, state_dir: Path) -> None:
        self.config = config
        self.auth = auth
        self.dir = Path(state_dir) / "rucio"
        self.token_cache = self.dir / "auth_token"
        self._client: Any = None
        self._token_mtime: Optional[float] = None
        self._lock = threading.Lock()

    # -- public calls -------------------------------------------------------------------------

    def rses(self, expression: str) -> list[str]:
        """The sorted RSE names of `expression`; one that matches nothing raises SourceError(no_match)."""
        names = self._call(f"RSE expression {expression!r}",
                           lambda c: sorted(r["rse"] for r in c.list_rses(expression)))
        if not names:
            raise SourceError(NO_MATCH, f"RSE expression {expression!r} matched nothing", SOURCE)
        return names

    def rse_attributes(self, rse: str) -> dict[str, Any]:
        """The RSE's attributes (CMS sets `site`, `tier`, `country`, `cms_type`, ...)."""
        answer = self._call(f"attributes of {rse}", lambda c: c.list_rse_attributes(rse))
        if not isinstance(answer, dict):
            raise SourceError(BAD_CONTENT, f"attributes of {rse}: expected an object, got {answer!r}", SOURCE)
        return answer

    def unmerged_pfn(self, rse: str) -> str:
        """The RSE's PFN of /store/unmerged/ for deletion, as Rucio maps it (the prefix WMCore MSUnmerged
        deletes under); the jobs' workers check that the site configuration maps it the same way."""
        did = f"{SCOPE}:{UNMERGED}"
        answer = self._call(f"lfns2pfns at {rse}", lambda c: c.lfns2pfns(rse, [did], operation="delete"))
        pfn = answer.get(did)
        if not isinstance(pfn, str) or not pfn.strip():
            raise SourceError(BAD_CONTENT, f"lfns2pfns at {rse} gave no PFN for {UNMERGED} (got {pfn!r})", SOURCE)
        return pfn

    # -- client and error classification --------------------------------------------------------

    def _call(self, what: str, fn: Callable[[Any], T]) -> T:
        from rucio.common import exception as rex  # local: importing rucio is slow and reads config

        try:
            return fn(self._get_client())
        except SourceError:
            raise
        except rex.InvalidRSEExpression as exc:
            empty = "empty set" in str(exc)
            raise SourceError(NO_MATCH if empty else HTTP_STATUS, f"{what}: {_first_line(exc)}", SOURCE,
                              None if empty else 400) from None
        except (rex.RSENotFound, rex.RSEProtocolNotSupported) as exc:
            raise SourceError(NO_MATCH, f"{what}: {_first_line(exc)}", SOURCE) from None
        except (rex.CannotAuthenticate, rex.AccessDenied, rex.NoAuthInformation,
                rex.MissingClientParameter) as exc:
            self._client = None  # a new credential may be in place at the next call
            raise SourceError(AUTHENTICATION, f"{what}: {_first_line(exc)}", SOURCE) from None
        except rex.ServerConnectionException as exc:
            raise SourceError(UNREACHABLE, f"{what}: {_first_line(exc)}", SOURCE) from None
        except requests.RequestException as exc:
            raise from_exception(SOURCE, exc, what) from None
        except rex.RucioException as exc:
            raise SourceError(HTTP_STATUS, f"{what}: {type(exc).__name__}: {_first_line(exc)}", SOURCE) from None
        except (ValueError, KeyError, TypeError) as exc:  # e.g. a 200 answer whose body is not JSON
            raise SourceError(BAD_CONTENT, f"{what}: unreadable answer: {type(exc).__name__}: {_first_line(exc)}",
                              SOURCE) from None

    def _get_client(self) -> Any:
        with self._lock:
            if self._uses_token() and self._token_changed():
                self._client = None
            if self._client is None:
                self._client = self._new_client()
            return self._client

    def _uses_token(self) -> bool:
        return self.config.auth_type in ("oidc", "token")

    def _token_changed(self) -> bool:
        try:
            mtime = os.stat(self.auth.token_file).st_mtime
        except OSError as exc:
            raise SourceError(AUTHENTICATION, f"cannot read the token file: {exc.strerror}", SOURCE) from None
        changed = mtime != self._token_mtime
        self._token_mtime = mtime
        return changed

    def _new_client(self) -> Any:
        from rucio.client import Client
        from rucio.common.config import clean_cached_config

        cfg, auth = self.config, self.auth
        auth_type, creds = cfg.auth_type, {}
        if self._uses_token():
            # rucio-clients sends a token it finds in its token cache: put the current one there.
            auth_type = "oidc"
            self._write_private(self.token_cache, _read_secret(auth.token_file))
        elif auth_type == "x509":
            creds = {"client_cert": auth.cert, "client_key": auth.key or auth.cert}
        elif auth_type == "x509_proxy":
            creds = {"client_proxy": auth.proxy}
        elif auth_type == "userpass":
            creds = {"username": cfg.username, "password": _read_secret(cfg.password_file)}
        self._write_config(auth_type)
        os.environ["RUCIO_CONFIG"] = str(self.dir / "rucio.cfg")
        clean_cached_config()
        log.info("rucio: %s as account %s (%s)", cfg.host, cfg.account, auth_type)
        try:
            client = Client(rucio_host=cfg.host, auth_host=cfg.auth_host, account=cfg.account,
                            ca_cert=auth.ca_path or None, auth_type=auth_type, creds=creds or None,
                            timeout=int(max(1, cfg.timeout_s)), user_agent="MSUnmerged")
        except Exception:
            self._token_mtime = None
            raise
        if auth_type == "oidc":
            # On a refused token rucio-clients would start an interactive browser login (input()):
            # a service must fail instead and wait for the token file to be renewed.
            client._BaseClient__get_token = _refuse_token
        return client

    def _write_config(self, auth_type: str) -> None:
        cfg = self.config
        text = (f"# Generated by MSUnmerged from its configuration; edits are overwritten.\n[client]\n"
                f"rucio_host = {cfg.host}\nauth_host = {cfg.auth_host}\naccount = {cfg.account}\n"
                f"auth_type = {auth_type}\nauth_token_file_path = {self.token_cache}\n")
        self._write_private(self.dir / "rucio.cfg", text)

    def _write_private(self, path: Path, text: str) -> None:
        self.dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        # A temporary name of its own: services sharing a state folder (one per RSE, a trigger) write at once.
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        os.replace(tmp, path)


def _refuse_token() -> None:
    from rucio.common.exception import CannotAuthenticate

    raise CannotAuthenticate("the bearer token was refused; the token file must be renewed")


def _read_secret(path: str) -> str:
    try:
        return Path(path).read_text().strip()
    except OSError as exc:
        raise SourceError(AUTHENTICATION, f"cannot read {path}: {exc.strerror}", SOURCE) from None


def _first_line(exc: BaseException) -> str:
    return " ".join(str(exc).split("\n")[:2]).strip()
