"""Secrets in URLs kept out of whatever is shown: failure details (page, data/cycles, CLI) and logs.

A source URL may carry a credential (`https://user:pw@host/...`, `...?access_token=...`) and a failure
detail quotes the URL, often without its scheme (requests: "Max retries exceeded with url:
/files?token=..."). `redact` is the one function every place that shows such text goes through.
"""
from __future__ import annotations

import logging
import re
from typing import Any

REDACTED = "<redacted>"
# Query parameter names whose value is a secret: any name ending with one of these words, in any case
# (token, access_token, X-Amz-Security-Token, password, api_key, sig, X-Amz-Signature, authz, ...).
SECRET_NAME_ENDINGS = ("token", "secret", "password", "passwd", "pwd", "key", "sig", "signature", "credential",
                       "auth", "authz", "session", "sessionid")
_QUERY = re.compile(r"(?i)([?&;][A-Za-z0-9_.\-]*?(?:" + "|".join(SECRET_NAME_ENDINGS) + r")=)[^&;#\s'\"<>]*")
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.\-]*://)[^/\s@?#'\"<>]+@")
_BEARER = re.compile(r"(?i)\b(bearer\s+)[A-Za-z0-9\-._~+/]+=*")


def redact(text: str) -> str:
    """`text` with URL user info, the values of secret-named query parameters and bearer tokens replaced."""
    # A cheap test first: most text (LFNs, reasons, a page's 100 errors) holds none of these and is returned as it
    # is. Plain `in` tests: the case-insensitive regex `=|@|bearer` did the same at ~10x the cost (3.8 us against
    # 0.3 for a worker's error line); only ASCII letters match b, e, a, r case-insensitively, as lower() gives them.
    if "=" not in text and "@" not in text and "bearer" not in text.lower():
        return text
    text = _USERINFO.sub(lambda m: m.group(1) + REDACTED + "@", text)
    text = _QUERY.sub(lambda m: m.group(1) + REDACTED, text)
    return _BEARER.sub(lambda m: m.group(1) + REDACTED, text)


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
