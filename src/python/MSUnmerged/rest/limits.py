"""Each caller's share of the server (docs/rest.md, "Limits per caller"): who a request's caller is, and whether
it may start now. Behind the CMSWEB front end every user arrives from the same few front-end addresses, so the
caller is the authenticated login (or DN) when the front end's signed headers verify, the client address
otherwise. A caller may have at most `rest.max_requests_per_caller` requests in progress (a streamed answer
until its last byte), of them `rest.max_streams_per_caller` `stream=true` answers, and start
`rest.caller_requests_per_s` requests a second on average (bursts of `rest.caller_burst`); and all callers the
front end did not verify together (direct clients, from however many addresses) at most
`rest.max_requests_unverified` requests in progress, so that the other threads stay for the front end's users;
beyond, 429 with Retry-After."""
from __future__ import annotations

import collections
import math
import threading
import time
import urllib.parse
from dataclasses import dataclass
from typing import Mapping, Optional, Union

from MSUnmerged.config import RestConfig
from MSUnmerged.rest.auth import HMAC_HEADER, KeyFile, signature_ok, verified_status

# Callers whose token bucket is tracked at most; beyond, the full (idle) buckets are forgotten.
MAX_TRACKED = 10_000
# The environ key under which the request's caller (`caller_of`) reaches the application.
CALLER = "msunmerged.caller"
UNVERIFIED = "addr:"  # the prefix of a caller known only by its address


def caller_of(headers: Mapping[str, bytes], remote: str, keyfile: KeyFile) -> str:
    """`login:<login>` (or `dn:<dn>`) when the front end's signed headers (lower-case names, raw values) verify,
    else `addr:<remote>`. Quiet: a missing or weak key is reported where triggers are refused, not per request."""
    key = keyfile.usable()
    if key is not None and HMAC_HEADER in headers and verified_status(headers) and signature_ok(headers, key):
        for kind in ("login", "dn"):
            who = headers.get(f"cms-authn-{kind}", b"").decode("utf-8", "replace").strip()
            if who:
                return f"{kind}:{who[:200]}"
    return f"{UNVERIFIED}{remote}"


def is_stream(target: bytes) -> bool:
    """The request target asks for a streamed answer (`stream=true` or `1`, as params.boolean reads it)."""
    query = target.partition(b"?")[2].decode("latin-1")
    if "stream" not in query:
        return False
    values = urllib.parse.parse_qs(query, keep_blank_values=True).get("stream", [])
    return any(v.lower() in ("true", "1") for v in values)


@dataclass(frozen=True)
class Slot:
    """A request in progress, counted for its caller until `CallerLimits.done`."""

    caller: str
    stream: bool


@dataclass(frozen=True)
class Refusal:
    """A request over its caller's share: why, and the seconds to wait (Retry-After)."""

    reason: str
    retry_after: int


class CallerLimits:
    """Requests in progress, streams in progress and a token bucket of request starts, per caller."""

    def __init__(self, rest: RestConfig) -> None:
        self.max_requests = rest.max_requests_per_caller
        self.max_streams = rest.max_streams_per_caller
        self.max_unverified = rest.max_requests_unverified
        self._unverified = 0  # requests in progress of all unverified callers
        self.rate = rest.caller_requests_per_s
        self.burst = float(rest.caller_burst)
        self._busy: collections.Counter[str] = collections.Counter()
        self._streams: collections.Counter[str] = collections.Counter()
        self._buckets: dict[str, tuple[float, float]] = {}  # caller -> (tokens, when counted)
        self._lock = threading.Lock()

    def admit(self, caller: str, stream: bool, now: Optional[float] = None) -> Union[Slot, Refusal]:
        """A Slot to release with `done` when the request ends, or the Refusal (nothing counted)."""
        now = time.monotonic() if now is None else now
        with self._lock:
            if self._busy[caller] >= self.max_requests:
                return Refusal(f"{self.max_requests} requests of this caller in progress "
                               "(rest.max_requests_per_caller)", 1)
            unverified = caller.startswith(UNVERIFIED)
            if unverified and self._unverified >= self.max_unverified:
                return Refusal(f"{self.max_unverified} requests of callers the front end did not authenticate in "
                               "progress (rest.max_requests_unverified)", 1)
            if stream and self._streams[caller] >= self.max_streams:
                return Refusal(f"{self.max_streams} streamed answers of this caller in progress "
                               "(rest.max_streams_per_caller)", 1)
            tokens, then = self._buckets.get(caller, (self.burst, now))
            tokens = min(self.burst, tokens + (now - then) * self.rate)
            if tokens < 1.0:
                self._buckets[caller] = (tokens, now)
                return Refusal(f"more than {self.rate:g} requests a second from this caller "
                               "(rest.caller_requests_per_s)", math.ceil((1.0 - tokens) / self.rate))
            if caller not in self._buckets and len(self._buckets) >= MAX_TRACKED:
                self._forget_idle(now)
            self._buckets[caller] = (tokens - 1.0, now)
            self._busy[caller] += 1
            self._unverified += unverified
            if stream:
                self._streams[caller] += 1
        return Slot(caller, stream)

    def done(self, slot: Slot) -> None:
        """The request of `slot` ended (answered, failed or cut)."""
        with self._lock:
            _decrement(self._busy, slot.caller)
            self._unverified -= slot.caller.startswith(UNVERIFIED)
            if slot.stream:
                _decrement(self._streams, slot.caller)

    def _forget_idle(self, now: float) -> None:
        """Drop the buckets that have refilled (their callers are as if never seen)."""
        full_after = self.burst / self.rate
        for caller, (_, then) in list(self._buckets.items()):
            if now - then >= full_after and not self._busy[caller]:
                del self._buckets[caller]


def _decrement(counter: collections.Counter[str], key: str) -> None:
    counter[key] -= 1
    if counter[key] <= 0:
        del counter[key]
