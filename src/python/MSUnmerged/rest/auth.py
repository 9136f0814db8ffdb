"""CMSWEB front-end authentication: HMAC over the cms-authn-*/cms-authz-* headers, roles, rate limit, audit.

The front end authenticates the user and passes the result in request headers, signed with
`cms-authn-hmac`: the hex HMAC-SHA1, keyed with a file shared by front end and back end, of
`prefix + "#" + suffix` built from the other cms-authn-*/cms-authz-* headers in sorted order of
their lower-case names (prefix += "h%xv%x" % (len(name), len(value)), suffix += name + value).

Expiry: the headers carry no timestamp, so a signature "expires" when the key rotates. The key
file is re-read whenever its modification time or size changes; headers signed with a rotated-out
key are then rejected like forged ones.
"""
from __future__ import annotations

import collections
import hashlib
import hmac
import json
import logging
import os
import re
import threading
import time
from dataclasses import dataclass, field
from typing import Mapping, Optional

log = logging.getLogger("MSUnmerged.rest.auth")
audit_log = logging.getLogger("MSUnmerged.audit")

HMAC_HEADER = "cms-authn-hmac"
STATUS_HEADER = "cms-auth-status"


class AuthError(Exception):
    """The request may not do this; `status` is the HTTP status to answer with."""

    def __init__(self, message: str, status: int = 403) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class User:
    """Who the front end says is calling, with roles as role -> {"group": {...}, "site": {...}}."""

    login: str = ""
    name: str = ""
    dn: str = ""
    method: str = ""
    roles: dict[str, dict[str, set[str]]] = field(default_factory=dict)


def canonical(name: str) -> str:
    """CMSWEB's canonical form of role, group and site names."""
    return re.sub(r"[^a-z0-9]+", "-", name.lower())


def signed_message(headers: Mapping[str, str]) -> str:
    """The message the front end signs, from headers whose names are already lower case."""
    prefix = suffix = ""
    for name in sorted(headers):
        if name[:9] in ("cms-authn", "cms-authz") and name != HMAC_HEADER:
            value = headers[name]
            prefix += "h%xv%x" % (len(name), len(value))
            suffix += name + value
    return prefix + "#" + suffix


def sign(headers: Mapping[str, str], key: bytes) -> str:
    """Hex HMAC-SHA1 of the signed message; the front end's side, used by tests and tools."""
    lower = {k.lower(): v for k, v in headers.items()}
    return hmac.new(key, signed_message(lower).encode("utf-8"), hashlib.sha1).hexdigest()


class KeyFile:
    """The shared HMAC key, re-read when the file changes (key rotation)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._stamp: Optional[tuple[int, int]] = None
        self._key = b""
        self._lock = threading.Lock()

    def key(self) -> bytes:
        if not self.path:
            raise AuthError("no HMAC key configured (rest.hmac_key_file): authenticated calls are refused")
        try:
            st = os.stat(self.path)
        except OSError as exc:
            log.error("HMAC key file %s unreadable: %s", self.path, exc)
            raise AuthError("HMAC key unavailable") from None
        stamp = (st.st_mtime_ns, st.st_size)
        with self._lock:
            if stamp != self._stamp:
                with open(self.path, "rb") as fh:  # the raw bytes, as the front end reads them
                    self._key = fh.read()
                self._stamp = stamp
            return self._key


def user_from_headers(headers: Mapping[str, str], keyfile: KeyFile) -> User:
    """Verify the signed headers and return the user; raise AuthError (403) when missing or forged."""
    lower = {k.lower(): str(v) for k, v in headers.items()}
    status = lower.get(STATUS_HEADER)
    if status is None or HMAC_HEADER not in lower:
        raise AuthError("authentication headers missing")
    if status != "OK":
        raise AuthError(f"not authenticated ({STATUS_HEADER}: {status})")
    expected = hmac.new(keyfile.key(), signed_message(lower).encode("utf-8"), hashlib.sha1).hexdigest()
    if not hmac.compare_digest(expected, lower[HMAC_HEADER].strip().lower()):
        raise AuthError("authentication headers signature mismatch")
    user = User(login=lower.get("cms-authn-login", ""), name=lower.get("cms-authn-name", ""),
                dn=lower.get("cms-authn-dn", ""), method=lower.get("cms-authn-method", ""))
    for name, value in lower.items():
        if name.startswith("cms-authz-"):
            scopes: dict[str, set[str]] = {"group": set(), "site": set()}
            for item in value.split():
                kind, _, scope = item.partition(":")
                if kind in scopes and scope:
                    scopes[kind].add(canonical(scope))
            user.roles[canonical(name[len("cms-authz-"):])] = scopes
    return user


def parse_role(spec: str) -> tuple[str, str, str]:
    """'role:group:g' or 'role:site:s' or 'role' -> (role, kind, scope) in canonical form."""
    role, _, rest = spec.partition(":")
    kind, _, scope = rest.partition(":")
    if kind not in ("", "group", "site") or (kind and not scope):
        raise ValueError(f"bad role spec {spec!r}: expected role, role:group:<g> or role:site:<s>")
    return canonical(role), kind, canonical(scope) if scope else ""


def has_role(user: User, specs: list[str]) -> bool:
    """True if the user holds any of the roles (in the given group or site, when one is named)."""
    for spec in specs:
        role, kind, scope = parse_role(spec)
        held = user.roles.get(role)
        if held is not None and (not kind or scope in held[kind]):
            return True
    return False


class RateLimiter:
    """At most `per_minute` events per key in any sliding 60 s window."""

    def __init__(self, per_minute: int, window_s: float = 60.0) -> None:
        self.per_minute = per_minute
        self.window_s = window_s
        self._events: dict[str, collections.deque[float]] = collections.defaultdict(collections.deque)
        self._lock = threading.Lock()

    def allow(self, key: str, now: Optional[float] = None) -> tuple[bool, float]:
        """(allowed, seconds until the next event would be allowed)."""
        now = time.monotonic() if now is None else now
        with self._lock:
            events = self._events[key]
            while events and now - events[0] >= self.window_s:
                events.popleft()
            if len(events) >= self.per_minute:
                return False, self.window_s - (now - events[0])
            events.append(now)
            return True, 0.0


class Audit:
    """Append-only JSON lines of who asked for what, to a file (rest.audit_log) and the log."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._lock = threading.Lock()

    def write(self, **record: object) -> None:
        record = {"time": round(time.time(), 3), **record}
        line = json.dumps(record, sort_keys=True, default=str)
        audit_log.info(line)
        if self.path:
            with self._lock, open(self.path, "a", encoding="utf-8") as fh:
                fh.write(line + "\n")
