"""Who may do what: CMSWEB front-end authentication (HMAC over the cms-authn-*/cms-authz-* headers), roles,
rate limit, audit, and the trigger's gate that puts them together.

The front end (dmwm/cmsauth `GetHmac`) authenticates the user and passes the result in request headers,
signed with `cms-authn-hmac`: the hex HMAC-SHA1, keyed with the raw bytes of a file shared by front end
and back end, of `prefix + "#" + suffix` over the other cms-authn*/cms-authz* headers, taken in sorted
order of their Go-canonical names (`Cms-Authz-T0_operator`): prefix += "h%xv%x" % (len(name),
len(value in UTF-8 bytes)), suffix += lower-case name + value. `cms-auth-status` is `ok` (Go front
end) or `OK` (the older Apache one); `NONE` means not authenticated.

Expiry: the headers carry no timestamp and nothing per request, so a signature "expires" only when the
key rotates (the key file is re-read whenever its modification time or size changes). Headers are
therefore never logged, and a trigger carries a fresh `request_id` (ledger.requestids).
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
from typing import Any, Callable, Mapping, Optional

from MSUnmerged.config import RestConfig
from MSUnmerged.rest.params import REQUEST_ID_RE, RSE_RE, BadParam, json_object, no_more, one
from MSUnmerged.rest.triggers import TriggerMode

log = logging.getLogger("MSUnmerged.rest.auth")
audit_log = logging.getLogger("MSUnmerged.audit")

HMAC_HEADER = "cms-authn-hmac"
STATUS_HEADER = "cms-auth-status"
SIGNED_PREFIXES = ("cms-authn", "cms-authz")
AUTHENTICATED = "ok"  # compared case-insensitively: `ok` from the Go front end, `OK` from the Apache one
# A key is refused when, without whitespace and NUL bytes, it is shorter than this or one byte repeated:
# HMAC pads a short key with zeros, so a key file of NULs signs like the empty key anyone can use.
MIN_KEY_BYTES = 16
_NOT_KEY_MATERIAL = b" \t\n\r\x0b\x0c\x00"
ASKED = ("rse", "mode", "request_id")  # what a trigger asks, audited as claimed until the request is parsed
MAX_SUPPRESSED = 10_000  # callers whose unaudited refusals are counted at most
CLOSED = "triggers closed: rest.operator_logins empty"  # the audited reason while no operator is named


class AuthError(Exception):
    """The request may not do this; `status` is the HTTP status to answer with, `retry_after` (seconds) the
    Retry-After of a 429."""

    def __init__(self, message: str, status: int = 403, retry_after: Optional[int] = None) -> None:
        super().__init__(message)
        self.status = status
        self.retry_after = retry_after


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


def go_canonical(name: str) -> str:
    """Go's textproto.CanonicalMIMEHeaderKey: upper case at the start and after '-', lower case elsewhere."""
    out, upper = [], True
    for c in name:
        out.append(c.upper() if upper else c.lower())
        upper = c == "-"
    return "".join(out)


def is_signed(name: str) -> bool:
    """A header the front end signs (or the signature itself); `name` in lower case."""
    return name.startswith(SIGNED_PREFIXES)


def signed_message(headers: Mapping[str, bytes]) -> bytes:
    """The message the front end signs, from lower-case names and the values' raw bytes."""
    names = sorted((n for n in headers if is_signed(n) and n != HMAC_HEADER), key=go_canonical)
    prefix = "".join("h%xv%x" % (len(n), len(headers[n])) for n in names).encode()
    return prefix + b"#" + b"".join(n.encode() + headers[n] for n in names)


def sign(headers: Mapping[str, str], key: bytes) -> str:
    """Hex HMAC-SHA1 of the signed message, values as UTF-8: the front end's side, for tests and tools."""
    raw = {k.lower(): v.encode("utf-8") for k, v in headers.items()}
    return hmac.new(key, signed_message(raw), hashlib.sha1).hexdigest()


def key_weakness(key: bytes) -> Optional[str]:
    """Why `key` must not be used to verify signatures, or None when it is strong enough."""
    material = key.translate(None, _NOT_KEY_MATERIAL)
    if not material:
        return "empty"
    if len(material) < MIN_KEY_BYTES:
        return f"too short ({len(material)} bytes without whitespace and NULs, at least {MIN_KEY_BYTES})"
    if len(set(material)) == 1:
        return "one byte repeated"
    return None


class KeyFile:
    """The shared HMAC key, re-read when the file changes (key rotation); unreadable or weak: no key."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._stamp: Optional[tuple[int, int]] = None
        self._key = b""
        self._lock = threading.Lock()

    def problem(self) -> Optional[str]:
        """Why no authenticated call can succeed now, or None when the key is usable."""
        try:
            self.key()
        except AuthError as exc:
            return str(exc)
        return None

    def key(self) -> bytes:
        """The key's raw bytes (any trailing newline included, as the front end reads them); AuthError, logged,
        when there is no usable key."""
        if not self.path:
            raise AuthError("no HMAC key configured (rest.hmac_key_file): authenticated calls are refused")
        try:
            key = self._read()
        except OSError as exc:
            log.error("HMAC key file %s unreadable: %s", self.path, exc.strerror)
            raise AuthError("HMAC key unavailable: authenticated calls are refused") from None
        weakness = key_weakness(key)
        if weakness:  # anyone can compute a signature with an empty or guessable key
            log.error("HMAC key file %s refused: %s", self.path, weakness)
            raise AuthError(f"HMAC key {weakness}: authenticated calls are refused")
        return key

    def usable(self) -> Optional[bytes]:
        """The key, or None when there is none usable (not logged: for counting callers, rest/limits.py)."""
        try:
            key = self._read() if self.path else b""
        except OSError:
            return None
        return None if key_weakness(key) else key

    def _read(self) -> bytes:
        st = os.stat(self.path)
        stamp = (st.st_mtime_ns, st.st_size)
        with self._lock:
            if stamp != self._stamp:
                with open(self.path, "rb") as fh:
                    self._key = fh.read()
                self._stamp = stamp
            return self._key


def claimed(headers: Mapping[str, bytes]) -> dict[str, str]:
    """The identity the headers claim, verified or not (for the audit of denials)."""
    return {k: headers.get(f"cms-authn-{k}", b"").decode("utf-8", "replace")[:200] for k in ("login", "dn")}


def verified_status(headers: Mapping[str, bytes]) -> bool:
    """The front end says it authenticated the user (`cms-auth-status: ok`, any case)."""
    return headers.get(STATUS_HEADER, b"").decode("latin-1").strip().lower() == AUTHENTICATED


def signature_ok(headers: Mapping[str, bytes], key: bytes) -> bool:
    """`cms-authn-hmac` is the front end's signature, with `key`, of the other signed headers."""
    expected = hmac.new(key, signed_message(headers), hashlib.sha1).hexdigest()
    return hmac.compare_digest(expected.encode(), headers.get(HMAC_HEADER, b"").strip().lower())


def user_from_headers(headers: Mapping[str, bytes], keyfile: KeyFile) -> User:
    """Verify the signed headers (lower-case names, raw byte values) and return the user; AuthError if not."""
    status = headers.get(STATUS_HEADER)
    if status is None or HMAC_HEADER not in headers:
        raise AuthError("authentication headers missing")
    if not verified_status(headers):
        raise AuthError(f"not authenticated ({STATUS_HEADER}: {status.decode('latin-1')[:20]})")
    if not signature_ok(headers, keyfile.key()):
        raise AuthError("authentication headers signature mismatch")
    text = {k: v.decode("utf-8", "replace") for k, v in headers.items() if is_signed(k)}
    user = User(login=text.get("cms-authn-login", ""), name=text.get("cms-authn-name", ""),
                dn=text.get("cms-authn-dn", ""), method=text.get("cms-authn-method", ""))
    for name, value in text.items():
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

    def allow(self, key: str, now: Optional[float] = None, record: bool = True) -> tuple[bool, float]:
        """(allowed, seconds until the next event would be allowed); the event counted when allowed and `record`."""
        now = time.monotonic() if now is None else now
        with self._lock:
            events = self._events[key]
            while events and now - events[0] >= self.window_s:
                events.popleft()
            if len(events) >= self.per_minute:
                return False, self.window_s - (now - events[0])
            if record:
                events.append(now)
            elif not events:
                del self._events[key]  # keys seen only for a look are not kept
            return True, 0.0


class Audit:
    """Append-only JSON lines of who asked for what, to the log (MSUnmerged.audit) and a file (rest.audit_log,
    mode 0600) rotated by size: `<file>.1` ... `<file>.<files>`, the oldest dropped."""

    def __init__(self, path: str, max_bytes: int, files: int) -> None:
        self.path = path
        self.max_bytes = max_bytes
        self.files = files
        self._lock = threading.Lock()

    def write(self, **record: object) -> None:
        record = {"time": round(time.time(), 3), **record}
        line = json.dumps(record, sort_keys=True, default=str)
        audit_log.info(line)
        if not self.path:
            return
        data = (line + "\n").encode("utf-8")
        with self._lock:
            for _ in range(2):  # the second time into a fresh file, after rotating a full one
                fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
                try:
                    size = os.fstat(fd).st_size
                    if size and size + len(data) > self.max_bytes:
                        self._rotate()
                        continue
                    os.fchmod(fd, 0o600)  # also an audit log created before with a wider mode
                    os.write(fd, data)
                    return
                finally:
                    os.close(fd)

    def _rotate(self) -> None:
        """<file>.N-1 -> <file>.N, ..., <file> -> <file>.1 (with no file kept, <file> is emptied)."""
        if not self.files:
            os.truncate(self.path, 0)
            return
        for n in range(self.files - 1, 0, -1):
            if os.path.exists(f"{self.path}.{n}"):
                os.replace(f"{self.path}.{n}", f"{self.path}.{n + 1}")
        os.replace(self.path, f"{self.path}.1")


@dataclass
class TriggerAsk:
    """An admitted trigger: who asks to start which RSE in which mode, and what its audit lines say."""

    user: User
    rse: str
    mode: TriggerMode
    request_id: str
    audited: dict[str, Any]

    @property
    def who(self) -> str:
        return self.user.login or self.user.dn


class TriggerGate:
    """Who may start an RSE now, decided in this order: the same origin, a JSON body, headers that verify, an
    operator role, a login in rest.operator_logins (empty: every trigger refused), a valid request (rse, mode,
    a request_id); then a rate limit per user. Everything the headers decide is decided
    before the body is read; every outcome is audited, and refusals up to rest.refusals_per_min per caller: a
    caller past it is answered 429 at once, its attempts counted (`suppressed`) in its next audited line."""

    def __init__(self, rest: RestConfig, keyfile: KeyFile) -> None:
        self.rest = rest
        self.keyfile = keyfile
        self.limiter = RateLimiter(rest.trigger_rate_per_min)
        self.refusals = RateLimiter(rest.refusals_per_min)
        self.suppressed: collections.Counter[str] = collections.Counter()  # per caller, since its last line
        self.audit = Audit(rest.audit_log, rest.audit_log_max_bytes, rest.audit_log_files)

    def admit(self, headers: Mapping[str, bytes], content_type: str, remote: str, params: dict[str, Any],
              read_body: Callable[[int], bytes], caller: str = "") -> TriggerAsk:
        """The request admitted, or AuthError / BadParam (audited). `headers`: lower-case names, raw values;
        `read_body(limit)` is called only once the headers passed; `caller`: who the server counts the request
        for (rest/limits.py; default: the address)."""
        caller = caller or f"addr:{remote}"
        allowed, wait = self.refusals.allow(caller, record=False)
        if not allowed:
            if len(self.suppressed) >= MAX_SUPPRESSED:
                self.suppressed.clear()  # a bound on memory: the counts are only ever a report
            self.suppressed[caller] += 1
            raise AuthError(f"more than {self.rest.refusals_per_min} refused trigger attempts in a minute "
                            f"(rest.refusals_per_min); retry in {wait:.0f} s", 429, int(wait) + 1)
        what: dict[str, Any] = {"remote": remote, "caller": caller, **claimed(headers)}
        forwarded = headers.get("x-forwarded-for")
        if forwarded is not None:  # the chain as the front end passed it on (not verified: what it says)
            what["forwarded_for"] = forwarded.decode("latin-1")[:500]

        def refuse(reason: str, error: Exception, outcome: str = "denied") -> Exception:
            self.refusals.allow(caller)
            more = {"suppressed": self.suppressed.pop(caller)} if caller in self.suppressed else {}
            self.audit.write(action="trigger", outcome=outcome, reason=reason, **more, **what)
            return error

        # Before the body is read only the query string says what is asked: audited as claimed, like the identity.
        what.update({k: v[:200] for k, v in params.items() if k in ASKED and isinstance(v, str)})
        origin = headers.get("origin", b"").decode("latin-1")
        if origin and origin not in self.rest.allowed_origins:
            raise refuse(f"foreign origin {origin[:100]}",
                         AuthError(f"requests from origin {origin[:100]!r} are refused"))
        if content_type.split(";")[0].strip().lower() != "application/json":
            raise refuse("not a JSON body", AuthError("the body must be a JSON object (Content-Type: "
                                                      "application/json)", 415))
        try:
            user = user_from_headers(headers, self.keyfile)
        except AuthError as exc:
            raise refuse(str(exc), exc) from None
        what.update(login=user.login, dn=user.dn)
        if not has_role(user, self.rest.operator_roles):
            raise refuse("no operator role",
                         AuthError("an operator role is required: " + ", ".join(self.rest.operator_roles)))
        if not self.rest.operator_logins:
            raise refuse(CLOSED, AuthError("triggers are refused until rest.operator_logins names the logins "
                                           "that may trigger"))
        if user.login not in self.rest.operator_logins:
            raise refuse("login not in rest.operator_logins",
                         AuthError("this login may not trigger (rest.operator_logins)"))
        try:
            params = merge_body(params, json_object(read_body(self.rest.max_body_bytes)))
            rse = one(params, "rse", required=True, pattern=RSE_RE)
            mode = TriggerMode(one(params, "mode", TriggerMode.PLAN, choices=tuple(TriggerMode)))
            request_id = one(params, "request_id", required=True, pattern=REQUEST_ID_RE)
            no_more(params)
        except (BadParam, AuthError) as exc:
            raise refuse(str(exc), exc, "refused") from None
        what.update(rse=rse, mode=mode, request_id=request_id)
        return TriggerAsk(user, rse, mode, request_id, what)

    def rate_limited(self, ask: TriggerAsk) -> Optional[float]:
        """None while the user may trigger; else the seconds to wait (audited as rate_limited)."""
        allowed, wait = self.limiter.allow(ask.who)
        if allowed:
            return None
        self.record(ask, "rate_limited")
        return wait

    def record(self, ask: TriggerAsk, outcome: str, **more: Any) -> None:
        """One audit line of what became of an admitted trigger."""
        self.audit.write(action="trigger", outcome=outcome, **more, **ask.audited)


def merge_body(params: dict[str, Any], body: dict[str, str]) -> dict[str, Any]:
    """Query parameters plus the body's; a name given in both with different values is refused, never
    silently overridden."""
    for name, value in body.items():
        if name in params and params[name] != value:
            raise BadParam(name, "given in the query and the body with different values")
    return {**params, **body}
