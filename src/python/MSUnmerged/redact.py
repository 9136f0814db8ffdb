"""Credentials kept out of whatever is shown: failure details (page, data/cycles, CLI, alerts), logs and error dumps.

A source URL may carry a credential (`https://user:pw@host/...`, `...?access_token=...`) and a failure
detail quotes the URL, often without its scheme (requests: "Max retries exceeded with url:
/files?token=..."); an error or a header dump may quote a credential itself (`Authorization: Basic ...`,
`password=...`, `token: ...`, a bare JWT, `X-Rucio-Auth-Token: ...`, `Cookie: ...`). `redact` is the one
function every place that shows such text goes through; `secret_header` says which request headers are
credentials whole.
"""
from __future__ import annotations

import logging
import re
from typing import Any

REDACTED = "<redacted>"
# Names whose value is a secret: any name ending with one of these words, in any case (token, access_token,
# X-Amz-Security-Token, X-Rucio-Auth-Token, password, api_key, sig, X-Amz-Signature, authz, ...), as a URL's
# query parameter (`?token=v`) or anywhere as `name=v`, `name: v`, `"name": "v"`.
SECRET_NAME_ENDINGS = ("token", "secret", "password", "passwd", "pwd", "key", "sig", "signature", "credential",
                       "credentials", "auth", "authz", "authorization", "session", "sessionid", "cookie")
# Request headers that are a credential whole (besides the front end's signed cms-authn-*/cms-authz-*).
SECRET_HEADERS = frozenset({"authorization", "proxy-authorization", "cookie", "set-cookie", "x-rucio-auth-token"})
_NAMES = "|".join(SECRET_NAME_ENDINGS)
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.\-]*://)[^/\s@?#'\"<>]+@")
_SCHEME = re.compile(r"(?i)\b((?:bearer|basic)\s+)[A-Za-z0-9\-._~+/]+=*")
# `name=value` (a URL's query parameter too), `name: value`, `"name": "value"` (a quoted value whole), the name
# starting a word; not a scheme's token (done before) nor what is redacted already.
_NAMED = re.compile(r"(?i)(?<![A-Za-z0-9_.\-])([A-Za-z0-9_.\-]*?(?:" + _NAMES + r")[\"']?\s*[:=]\s*+)"
                    r"(?!(?:bearer|basic)\s|" + re.escape(REDACTED) + r")(?:\"[^\"]*\"|'[^']*'|[^\s&;#'\"<>]*)")
_COOKIES = re.compile(r"(?i)\b((?:set-)?cookie2?\s*:\s*)[^\r\n]+")  # every cookie of the header
_JWT = re.compile(r"\beyJ[A-Za-z0-9_\-]{2,}\.[A-Za-z0-9_\-]{2,}\.[A-Za-z0-9_\-]*")


def redact(text: str) -> str:
    """`text` with every credential form above replaced by REDACTED."""
    # A cheap test first: most text (LFNs, reasons, a page's 100 errors) holds none of these and is returned as it
    # is. Plain `in` tests: the case-insensitive regex `=|@|bearer` did the same at ~10x the cost (3.8 us against
    # 0.3 for a worker's error line). A `name: value` needs a secret's name right before a ':' (str.endswith with
    # the tuple: 0.9 us for a worker's error line, against 2 us for `any(name in low ...)`).
    if "=" not in text and "@" not in text and "eyJ" not in text:
        low = text.lower()
        if "bearer" not in low and "basic" not in low and (":" not in text or not any(
                before.rstrip().rstrip("\"'").endswith(SECRET_NAME_ENDINGS) for before in low.split(":")[:-1])):
            return text
    return substitute(text)


def substitute(text: str) -> str:
    """Every substitution of `redact`, without its cheap first test; each pattern only where its literal part is
    (a URL with a secret: 5.4 us before the forms of issue 38, 14 with all five patterns run, 8 with these tests)."""
    low = text.lower()
    if "@" in text:
        text = _USERINFO.sub(lambda m: m.group(1) + REDACTED + "@", text)
    if "cookie" in low:
        text = _COOKIES.sub(lambda m: m.group(1) + REDACTED, text)
    if "bearer" in low or "basic" in low:
        text = _SCHEME.sub(lambda m: m.group(1) + REDACTED, text)
    text = _NAMED.sub(lambda m: m.group(1) + REDACTED, text)
    return _JWT.sub(REDACTED, text) if "eyJ" in text else text


def secret_header(name: str) -> bool:
    """A request header whose value is a credential whole (a dump shows REDACTED in its place)."""
    low = name.lower()
    return low in SECRET_HEADERS or low.endswith(SECRET_NAME_ENDINGS)


# Values with nothing to redact: passed over without a call (an RSE's counters are mostly numbers).
_LEAVES = frozenset({int, float, bool, type(None)})


def redact_all(value: Any) -> Any:
    """`redact` applied to every string in a JSON-like value (dicts, lists), keys left as they are."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {k: v if type(v) in _LEAVES else redact_all(v) for k, v in value.items()}
    if isinstance(value, list):
        return [v if type(v) in _LEAVES else redact_all(v) for v in value]
    return value


class RedactingFilter(logging.Filter):
    """A handler filter: each record's message, arguments merged, and its exception text, redacted."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        clean = redact(message)
        if clean != message:
            record.msg, record.args = clean, None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact(record.exc_text)
        return True


def redact_logs(handler: logging.Handler) -> None:
    """Every record `handler` writes goes through `redact` first (idempotent)."""
    if not any(isinstance(f, RedactingFilter) for f in handler.filters):
        handler.addFilter(RedactingFilter())
