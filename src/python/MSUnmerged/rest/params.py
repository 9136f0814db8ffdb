"""A request's parameters, validated: each value checked against its pattern or choices, and BadParam naming
the parameter when it is wrong (answered 400)."""
from __future__ import annotations

import json
import re
from typing import Any, Optional

# Patterns must match the whole value (`one` uses fullmatch: "$" would let a trailing newline through).
RSE_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,99}")
ERROR_CLASS_RE = re.compile(r"[A-Za-z0-9_.\-]{1,64}")
JOB_RE = re.compile(r"[A-Za-z0-9_.:\-]{1,128}")
REQUEST_ID_RE = re.compile(r"[A-Za-z0-9_.:\-]{8,128}")
# A page's cursor: a record's _id, "<rse>|<generation>|<path>" (worker.ids.file_id), as `next` gave it.
CURSOR_RE = re.compile(RSE_RE.pattern + r"\|[0-9]+\.[0-9]{3}\|/[^\n]{0,4096}")
# A client's `_` cache-buster, which WMCore's Data API passes on: every call ignores it (status and info ignore
# whatever WMCore ignores, wmcore.py; the other calls refuse any other unknown parameter).
CACHE_BUSTER = "_"
MAX_PAGE = 10_000  # records in one answer at most (a `limit`'s top)


class BadParam(Exception):
    """A request parameter is missing or invalid: answered with 400 naming the parameter."""

    def __init__(self, name: str, message: str) -> None:
        super().__init__(f"parameter '{name}': {message}")
        self.name = name


def one(params: dict[str, Any], name: str, default: Optional[str] = None, required: bool = False,
        pattern: Optional[re.Pattern[str]] = None, choices: Optional[tuple[str, ...]] = None) -> Optional[str]:
    """One string parameter, validated; BadParam names it when it is wrong."""
    value = params.pop(name, None)
    if isinstance(value, list):
        raise BadParam(name, "given more than once")
    if value is None or value == "":
        if required:
            raise BadParam(name, "required")
        return default
    if not isinstance(value, str):
        raise BadParam(name, "must be a string")
    if choices is not None and value not in choices:
        raise BadParam(name, f"must be one of {', '.join(choices)}")
    if pattern is not None and not pattern.fullmatch(value):
        raise BadParam(name, f"invalid value {value[:80]!r}")
    return value


def many(params: dict[str, Any], name: str, pattern: re.Pattern[str]) -> list[str]:
    """A parameter that may be given several times (rse=A&rse=B), each value validated."""
    raw = params.pop(name, None)
    values = raw if isinstance(raw, list) else [] if raw in (None, "") else [raw]
    for value in values:
        one({name: value}, name, required=True, pattern=pattern)
    return values


def integer(params: dict[str, Any], name: str, default: int, low: int, high: int) -> int:
    """An integer parameter between `low` and `high`; absent: the default."""
    raw = one(params, name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise BadParam(name, f"expected an integer, got {raw[:40]!r}") from None
    if not low <= value <= high:
        raise BadParam(name, f"must be between {low} and {high}")
    return value


def boolean(params: dict[str, Any], name: str, default: bool) -> bool:
    """true/false in any case (WMCore's strToBool: True, TRUE, false, ...) or 1/0."""
    raw = one(params, name)
    if raw is None:
        return default
    if raw.lower() not in ("true", "false", "1", "0"):
        raise BadParam(name, f"expected true or false, got {raw[:20]!r}")
    return raw.lower() in ("true", "1")


def no_more(params: dict[str, Any]) -> None:
    """Unknown parameters are refused rather than silently ignored (but a `_` cache-buster)."""
    params.pop(CACHE_BUSTER, None)
    if params:
        raise BadParam(sorted(params)[0], "unknown parameter")


def json_object(body: bytes) -> dict[str, str]:
    """A flat JSON object of strings (an empty body: {}); BadParam otherwise, whatever the body holds (its size
    is bounded by rest.max_body_bytes before it gets here)."""
    try:
        data = json.loads(body or b"{}")
    except RecursionError:  # arrays or objects nested thousands deep: refused like any other nesting
        raise BadParam("body", "nested too deeply: expected a JSON object of strings") from None
    except ValueError:  # also bytes that are not UTF-8, and integers of more digits than Python converts
        raise BadParam("body", "not valid JSON") from None
    if not isinstance(data, dict) or not all(isinstance(v, str) for v in data.values()):
        raise BadParam("body", "expected a JSON object of strings")
    return data
