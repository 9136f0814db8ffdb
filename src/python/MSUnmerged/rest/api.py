"""JSON API under <base>/data/: answers in the WMCore envelope {"result": [...]}."""
from __future__ import annotations

import functools
import json
import logging
import re
import threading
import time
from typing import Any, Callable, Iterator, Optional

import cherrypy
import pymongo
from pymongo.errors import PyMongoError

from MSUnmerged.config import Config
from MSUnmerged.rest.auth import AuthError, Audit, KeyFile, RateLimiter, has_role, user_from_headers
from MSUnmerged.rest.triggers import TriggerQueue
from MSUnmerged.rest.view import DIR_STATES, FILE_STATES, JOB_STATES, LedgerView

log = logging.getLogger("MSUnmerged.rest")

RSE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,99}$")
ERROR_CLASS_RE = re.compile(r"^[A-Za-z0-9_.\-]{1,64}$")
JOB_RE = re.compile(r"^[A-Za-z0-9_.:\-]{1,128}$")
MAX_PAGE = 10_000
STARTED = time.time()

# Ledger counter name -> the existing WMCore MSUnmerged name where the meaning is the same.
WMCORE_COUNTERS = {
    "files_total": "totalNumFiles",
    "to_delete": "filesToDelete",
    "deleted": "filesDeletedSuccess",
    "failed": "filesDeletedFail",
    "dirs_removable": "dirsToDelete",
    "failed_by_class": "deletionErrors",  # WMCore: gfalErrors, a tally by error
}


class BadParam(Exception):
    """A request parameter is missing or invalid: answered with 400 naming the parameter."""

    def __init__(self, name: str, message: str) -> None:
        super().__init__(f"parameter '{name}': {message}")
        self.name = name


def envelope(result: list[Any], **extra: Any) -> bytes:
    return json.dumps({"result": result, **extra}, separators=(",", ":"), default=str).encode()


def _error(status: int, message: str) -> bytes:
    cherrypy.response.status = status
    cherrypy.response.headers["Content-Type"] = "application/json"
    return json.dumps({"result": [], "error": message}).encode()


def json_call(method: str = "GET") -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Expose a handler that answers JSON; maps BadParam/AuthError/database errors to 400/403/503."""

    def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def handler(self: "DataApi", *args: Any, **params: Any) -> Any:
            if cherrypy.request.method not in (method, "HEAD" if method == "GET" else method):
                cherrypy.response.headers["Allow"] = method
                return _error(405, f"use {method}")
            if args:
                return _error(404, "no such resource")
            cherrypy.response.headers["Content-Type"] = "application/json"
            cherrypy.response.headers["Cache-Control"] = "no-store"
            cherrypy.response.headers["X-Content-Type-Options"] = "nosniff"
            try:
                # Bounded: with the database away, answer 503 quickly instead of after server selection.
                with pymongo.timeout(self.config.rest.db_timeout_s):
                    return fn(self, **params)
            except BadParam as exc:
                return _error(400, str(exc))
            except AuthError as exc:
                return _error(exc.status, str(exc))
            except PyMongoError as exc:
                log.warning("database error in %s: %s", fn.__name__, exc)
                return _error(503, "ledger database unavailable")
        handler.exposed = True  # type: ignore[attr-defined]
        return handler
    return wrap


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
    if pattern is not None and not pattern.match(value):
        raise BadParam(name, f"invalid value {value[:80]!r}")
    return value


def integer(params: dict[str, Any], name: str, default: int, low: int, high: int) -> int:
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
    raw = one(params, name, choices=("true", "false", "1", "0"))
    return default if raw is None else raw in ("true", "1")


def no_more(params: dict[str, Any]) -> None:
    """Unknown parameters are refused rather than silently ignored."""
    if params:
        raise BadParam(sorted(params)[0], "unknown parameter")


class TtlCache:
    """Short-lived cache of rendered answers; one thread refreshes a key while others wait for it."""

    def __init__(self, ttl_s: float) -> None:
        self.ttl_s = ttl_s
        self._data: dict[Any, tuple[float, bytes]] = {}
        self._locks: dict[Any, threading.Lock] = {}
        self._guard = threading.Lock()

    def get(self, key: Any, build: Callable[[], bytes]) -> bytes:
        if self.ttl_s <= 0:
            return build()
        hit = self._data.get(key)
        if hit and hit[0] > time.monotonic():
            return hit[1]
        with self._guard:
            lock = self._locks.setdefault(key, threading.Lock())
        with lock:
            hit = self._data.get(key)
            if hit and hit[0] > time.monotonic():
                return hit[1]
            body = build()
            self._data[key] = (time.monotonic() + self.ttl_s, body)
            return body

    def clear(self) -> None:
        self._data.clear()


def wmcore_info(rse: dict[str, Any]) -> dict[str, Any]:
    """One RSE in the shape of the existing service's info document, plus our own fields."""
    plan = rse.get("plan") or {}
    counters = {"files_total": plan.get("files_total"), **(rse.get("counters") or {})}
    return {
        "name": rse["name"],
        "isClean": rse.get("state") == "clean",
        "state": rse.get("state"),
        "reason": rse.get("reason"),
        "detail": rse.get("detail"),
        "generation": rse.get("generation"),
        "timestamps": {
            "rseConsStatTime": rse.get("generation"),  # WMCore: the ConMon scan end_time used
            "planTime": plan.get("planned"),
            "updateTime": rse.get("updated"),
            "countTime": rse.get("counted_at"),
        },
        "counters": {WMCORE_COUNTERS.get(k, k): v for k, v in counters.items()},
    }


class DataApi:
    """Handlers under <base>/data/."""

    def __init__(self, config: Config, view: LedgerView, triggers: Optional[TriggerQueue]) -> None:
        self.config = config
        self.view = view
        self.queue = triggers
        self.cache = TtlCache(config.rest.cache_ttl_s)
        self.keyfile = KeyFile(config.rest.hmac_key_file)
        self.limiter = RateLimiter(config.rest.trigger_rate_per_min)
        self.audit = Audit(config.rest.audit_log)

    # -- health and status -------------------------------------------------------------------

    @json_call()
    def health(self, **params: Any) -> bytes:
        """Liveness (probe=live: the process answers) or readiness (the ledger database answers)."""
        probe = one(params, "probe", "ready", choices=("live", "ready"))
        no_more(params)
        if probe == "live":
            return envelope([{"status": "ok"}])
        try:
            self.view.ping()
        except PyMongoError as exc:
            return _error(503, f"ledger database unreachable: {type(exc).__name__}")
        return envelope([{"status": "ok"}])

    @json_call()
    def status(self, **params: Any) -> bytes:
        """Service health and the last polling cycles."""
        cycles = integer(params, "cycles", 5, 0, 100)
        no_more(params)
        return self.cache.get(("status", cycles), lambda: envelope([self._status(cycles)]))

    def _status(self, n_cycles: int) -> dict[str, Any]:
        by_state: dict[str, int] = {}
        rses = self.view.rses()
        for r in rses:
            by_state[r["state"]] = by_state.get(r["state"], 0) + 1
        return {
            "service": "MSUnmerged",
            "status": "OK",
            "instance": self.config.service.instance,
            "dry_run": self.config.service.dry_run,
            "time": round(time.time(), 3),
            "uptime_s": round(time.time() - STARTED, 1),
            "rses": {"total": len(rses), "by_state": by_state},
            "cycles": self.view.cycles(n_cycles),
            "triggers": self.queue.summary() if self.queue else {"enabled": False},
        }

    @json_call()
    def info(self, **params: Any) -> bytes:
        """info?rse=<RSE>|ALL_DOCS&detail=true|false, as the existing service answers it."""
        rse = one(params, "rse", required=True, pattern=RSE_RE)
        detail = boolean(params, "detail", False)
        no_more(params)
        return self.cache.get(("info", rse, detail), lambda: envelope(self._info(rse, detail)))

    def _info(self, rse: str, detail: bool) -> list[dict[str, Any]]:
        found = self.view.rses() if rse == "ALL_DOCS" else [r for r in [self.view.rse(rse)] if r]
        docs = [wmcore_info(r) for r in found]
        if detail:
            for doc in docs:
                doc["jobs"] = self.view.jobs(doc["name"], None, 20)
                doc["files"] = {"deletedFail": list(self.view.files(doc["name"], "failed", None, None, None,
                                                                    None, 100))}
        return docs

    # -- per-file, jobs, cycles, plan --------------------------------------------------------

    @json_call()
    def files(self, **params: Any) -> Any:
        """Files by rse, state, error_class, dir prefix, job; `limit` + `after` pages, stream=true all."""
        return self._records(params, FILE_STATES, self.view.files)

    @json_call()
    def dirs(self, **params: Any) -> Any:
        """Directory outcomes, selected and paged like files (error_class: the refusal reason)."""
        return self._records(params, DIR_STATES, self.view.dirs)

    def _records(self, params: dict[str, Any], states: tuple[str, ...],
                 fetch: Callable[..., Iterator[dict[str, Any]]]) -> Any:
        rse = one(params, "rse", pattern=RSE_RE)
        state = one(params, "state", choices=states)
        error_class = one(params, "error_class", pattern=ERROR_CLASS_RE)
        dir_prefix = one(params, "dir")
        job = one(params, "job", pattern=JOB_RE)
        after = one(params, "after")
        stream = boolean(params, "stream", False)
        limit = integer(params, "limit", 100, 1, MAX_PAGE)
        no_more(params)
        if not rse and (not job or state == "submitted"):
            raise BadParam("rse", "required unless 'job' is given (and always with state=submitted)")
        if dir_prefix is not None and not dir_prefix.startswith("/store/unmerged/"):
            raise BadParam("dir", "must start with /store/unmerged/")
        if after is not None and len(after) > 4096:
            raise BadParam("after", "too long")
        query = (rse, state, error_class, dir_prefix, job)
        if stream:
            cherrypy.response.stream = True
            return self._stream(fetch(*query, after, 0))
        page = list(fetch(*query, after, limit))
        nxt = page[-1]["cursor"] if len(page) == limit else None
        return envelope(page, next=nxt)

    @staticmethod
    def _stream(records: Iterator[dict[str, Any]]) -> Iterator[bytes]:
        """One valid JSON envelope, written in pieces of about 64 KiB."""
        yield b'{"result":['
        buf: list[bytes] = []
        size = 0
        first = True
        for rec in records:
            item = json.dumps(rec, separators=(",", ":"), default=str).encode()
            buf.append(item if first else b"," + item)
            first = False
            size += len(item)
            if size >= 65536:
                yield b"".join(buf)
                buf, size = [], 0
        buf.append(b"]}")
        yield b"".join(buf)

    @json_call()
    def jobs(self, **params: Any) -> bytes:
        rse = one(params, "rse", pattern=RSE_RE)
        state = one(params, "state", choices=JOB_STATES)
        limit = integer(params, "limit", 100, 1, MAX_PAGE)
        no_more(params)
        return envelope(self.view.jobs(rse, state, limit))

    @json_call()
    def cycles(self, **params: Any) -> bytes:
        limit = integer(params, "limit", 20, 1, 1000)
        no_more(params)
        return envelope(self.view.cycles(limit))

    @json_call()
    def plan(self, **params: Any) -> bytes:
        """What would be deleted now on one RSE: the planned files of its current generation."""
        rse = one(params, "rse", required=True, pattern=RSE_RE)
        limit = integer(params, "limit", 1000, 0, MAX_PAGE)
        no_more(params)
        return envelope([self.view.plan_preview(rse, limit)])

    # -- trigger -----------------------------------------------------------------------------

    @json_call("POST")
    def trigger(self, **params: Any) -> bytes:
        """Start one RSE now (mode plan or apply). Operators only; rate-limited; audited."""
        remote = cherrypy.request.remote.ip
        try:
            user = user_from_headers(cherrypy.request.headers, self.keyfile)
        except AuthError as exc:
            self.audit.write(action="trigger", outcome="denied", reason=str(exc), remote=remote)
            raise
        who = {"login": user.login, "dn": user.dn, "remote": remote}
        if not has_role(user, self.config.rest.operator_roles):
            self.audit.write(action="trigger", outcome="denied", reason="no operator role", **who)
            raise AuthError("an operator role is required: " + ", ".join(self.config.rest.operator_roles))
        params = {**params, **self._json_body()}
        rse = one(params, "rse", required=True, pattern=RSE_RE)
        mode = one(params, "mode", "plan", choices=("plan", "apply"))
        no_more(params)
        if self.queue is None:
            return _error(503, "this instance runs no service loop: triggers are disabled")
        allowed, wait = self.limiter.allow(user.login or user.dn)
        if not allowed:
            self.audit.write(action="trigger", outcome="rate_limited", rse=rse, mode=mode, **who)
            cherrypy.response.headers["Retry-After"] = str(int(wait) + 1)
            return _error(429, f"rate limit of {self.config.rest.trigger_rate_per_min} triggers per minute "
                               f"reached; retry in {wait:.0f} s")
        record = self.queue.submit(rse, mode, user.login or user.dn)
        self.audit.write(action="trigger", outcome="accepted", rse=rse, mode=mode, id=record["id"], **who)
        cherrypy.response.status = 202
        return envelope([record])

    @staticmethod
    def _json_body() -> dict[str, Any]:
        """Accept a JSON object body as well as form parameters."""
        request = cherrypy.request
        if not request.headers.get("Content-Type", "").startswith("application/json"):
            return {}
        try:
            data = json.loads(request.body.read(65536) or b"{}")
        except ValueError:
            raise BadParam("body", "not valid JSON") from None
        if not isinstance(data, dict) or not all(isinstance(v, str) for v in data.values()):
            raise BadParam("body", "expected a JSON object of strings")
        return data

    @json_call()
    def triggers(self, **params: Any) -> bytes:
        """Recent triggers of this instance and their state."""
        no_more(params)
        return envelope(self.queue.recent() if self.queue else [])
