"""JSON API under <base>/data/: answers in the WMCore envelope {"result": [...]}."""
from __future__ import annotations

import functools
import json
import logging
import secrets
import time
from typing import Any, Callable, Iterator, Optional

import cheroot.errors
import cherrypy
from pymongo.errors import PyMongoError

from MSUnmerged import sites
from MSUnmerged.config import Config
from MSUnmerged.dbwatch import DatabaseWatch
from MSUnmerged.drainstatus import drain
from MSUnmerged.drainstatus import total as drain_total
from MSUnmerged.ledger.retry import LedgerError, deadline
from MSUnmerged.ledger.states import SUBMITTED
from MSUnmerged.ledger.view import DIR_STATES, FILE_STATES, JOB_STATES, LedgerView
from MSUnmerged.rest import wmcore
from MSUnmerged.rest.auth import AuthError, KeyFile, TriggerGate, User, user_from_headers
from MSUnmerged.rest.limits import CALLER
from MSUnmerged.rest.params import CURSOR_RE, ERROR_CLASS_RE, JOB_RE, MAX_PAGE, RSE_RE, BadParam, boolean, integer, \
    many, no_more, one
from MSUnmerged.rest.server import RAW_HEADERS  # cheroot folds '_' into '-' in names: the raw ones are there
from MSUnmerged.rest.triggers import REPLAYED, TriggerQueue, TriggerRefused
from MSUnmerged.ttlcache import TtlCache

log = logging.getLogger("MSUnmerged.rest")

STARTED = time.time()
# Any of these from the ledger, within rest.db_timeout_s: 503 on every endpoint.
DB_ERRORS = (PyMongoError, LedgerError)
DB_DOWN = "ledger database unavailable"


# json.dumps(obj, separators=(",", ":"), default=str) made once: the same text, without its per-call set-up nor
# the cycle check's bookkeeping per record (answers are built here, never cyclic).
_ENCODE = json.JSONEncoder(separators=(",", ":"), default=str, check_circular=False).encode


def envelope(result: list[Any], **extra: Any) -> bytes:
    return _ENCODE({"result": result, **extra}).encode()


def _error(status: int, message: str) -> bytes:
    """An error answer: JSON, and the headers WMCore's REST sets (REST/Error.py report_rest_error), which WMCore's
    clients read: X-Error-HTTP, X-Error-ID, X-Error-Detail (one line, at most 200 characters)."""
    cherrypy.response.status = status
    headers = cherrypy.response.headers
    headers["Content-Type"] = "application/json"
    detail = message.replace("\n", "; ")
    headers["X-Error-HTTP"] = str(status)
    headers["X-Error-ID"] = secrets.token_hex(16)
    headers["X-Error-Detail"] = detail if len(detail) <= 200 else detail[:197] + "..."
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
                # Bounded, retries included: with the database away, answer 503 within db_timeout_s.
                with deadline(self.config.rest.db_timeout_s):
                    return fn(self, **params)
            except BadParam as exc:
                return _error(400, str(exc))
            except AuthError as exc:
                if exc.retry_after is not None:
                    cherrypy.response.headers["Retry-After"] = str(exc.retry_after)
                return _error(exc.status, str(exc))
            except DB_ERRORS as exc:
                log.warning("database error in %s: %s", fn.__name__, exc)
                return _error(503, DB_DOWN)
        handler.exposed = True  # type: ignore[attr-defined]
        return handler
    return wrap


def read_body(limit: int) -> bytes:
    """The request body, at most `limit` bytes, whatever its framing (Content-Length or chunked): 413 when
    larger, 400 when its chunked framing is broken, 408 when it does not arrive within the deadline."""
    try:
        data = cherrypy.request.body.fp.read(limit + 1)
    except cheroot.errors.MaxSizeExceeded:
        raise AuthError(f"the body is larger than {limit} bytes", 413) from None
    except TimeoutError:
        raise AuthError("the body did not arrive in time (rest.request_deadline_s)", 408) from None
    except ValueError as exc:  # cheroot: a chunk size or chunk end that is not HTTP
        raise BadParam("body", f"broken chunked framing: {str(exc)[:80]}") from None
    except OSError as exc:  # cheroot: a chunk announced past the size limit, or the client went away
        if "Too Large" in str(exc):
            raise AuthError(f"the body is larger than {limit} bytes", 413) from None
        raise AuthError("the body could not be read", 400) from None
    if len(data) > limit:
        raise AuthError(f"the body is larger than {limit} bytes", 413)
    return data


def request_headers() -> dict[str, bytes]:
    """The request's headers: lower-case names as sent, values as the raw bytes sent."""
    request = cherrypy.request
    raw = request.wsgi_environ.get(RAW_HEADERS) if request.wsgi_environ else None
    if raw is not None:
        return dict(raw)
    # Not behind the app's gateway: names as CherryPy has them, values back to the bytes sent.
    return {k.lower(): str(v).encode("latin-1", "replace") for k, v in request.headers.items()}


class DataApi:
    """Handlers under <base>/data/."""

    def __init__(self, config: Config, view: LedgerView, triggers: Optional[TriggerQueue],
                 watch: Optional[DatabaseWatch] = None) -> None:
        self.config = config
        self.view = view
        self.queue = triggers
        self.watch = watch  # serve's: liveness fails once the database is silent for rest.db_dead_s
        self.cache: TtlCache[bytes] = TtlCache(config.rest.cache_ttl_s)
        self.keyfile = KeyFile(config.rest.hmac_key_file)
        self.gate = TriggerGate(config.rest, self.keyfile)

    # -- health and status -------------------------------------------------------------------

    @json_call()
    def health(self, **params: Any) -> bytes:
        """Liveness (probe=live: the process answers, and serve's database has not been silent for
        rest.db_dead_s) or readiness (the ledger database answers)."""
        probe = one(params, "probe", "ready", choices=("live", "ready"))
        no_more(params)
        if probe == "live":
            dead = self.watch.dead() if self.watch else None
            return _error(503, dead) if dead else envelope([{"status": "ok"}])
        self.view.ping()  # a database error is answered 503 by json_call
        return envelope([{"status": "ok"}])

    @json_call()
    def status(self, **params: Any) -> bytes:
        """WMCore's status report (detail, rse_type as WMCore takes them); with detail, ours beside it."""
        detail = wmcore.flag(params, "detail", True)
        raw_type = params.pop("rse_type", None)
        rse_type = raw_type if isinstance(raw_type, str) and raw_type else None
        cycles = integer(params, "cycles", 5, 0, 100)  # ours: a wrong value is still a 400
        # Anything else is ignored, as WMCore does.
        return self.cache.get(("status", detail, rse_type, cycles),
                              lambda: envelope([self._status(detail, rse_type, cycles)]))

    def _status(self, detail: bool, rse_type: Optional[str], n_cycles: int) -> dict[str, Any]:
        rses = self.view.rses()
        if rse_type is not None:  # only the RSEs of that type count (an unknown type: none)
            rses = [r for r in rses if sites.rse_type(r["name"]) == rse_type.lower()]
        recent = self.view.cycles(max(n_cycles, 1))
        last = next((c for c in recent if c.get("finished") is not None), None)
        health = self.view.health(self.config.service.stale_after_s)
        report = wmcore.report(rses, last, self.config.service.instance, health["alert"])
        if rse_type is not None:
            report["rse_type"] = rse_type
        if not detail:
            return report
        by_state: dict[str, int] = {}
        for r in rses:
            by_state[r["state"]] = by_state.get(r["state"], 0) + 1
        now = time.time()
        drains = {r["name"]: drain(r, now, self.config.service.interval_s) for r in rses}
        return {
            **report,
            "service": "MSUnmerged",
            "status": "OK",
            "instance": self.config.service.instance,
            "dry_run": self.config.service.dry_run,
            "time": round(time.time(), 3),
            "uptime_s": round(time.time() - STARTED, 1),
            "rses": {"total": len(rses), "by_state": by_state},
            "drain": {"total": drain_total(list(drains.values())), "rses": drains},
            "cycles": recent[:n_cycles],
            "health": health,
            "triggers": self.queue.summary() if self.queue else {"enabled": False},
        }

    @json_call()
    def info(self, **params: Any) -> bytes:
        """info?rse=<RSE>|ALL_DOCS[&rse=...]&detail=true|false, answered as WMCore's getStatsFromMongoDB."""
        rses = many(params, "rse", RSE_RE)  # none (or empty): WMCore answers the versions alone
        detail = wmcore.flag(params, "detail", False)
        # Anything else is ignored (rse_type, `_`, ...), as WMCore does.
        return self.cache.get(("info", tuple(rses), detail), lambda: envelope([wmcore.info(self.view, rses, detail)]))

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
        after = one(params, "after", pattern=CURSOR_RE)
        stream = boolean(params, "stream", False)
        limit = integer(params, "limit", 100, 1, MAX_PAGE)
        no_more(params)
        if not rse and (not job or state == SUBMITTED):
            raise BadParam("rse", "required unless 'job' is given (and always with state=submitted)")
        if dir_prefix is not None and not dir_prefix.startswith("/store/unmerged/"):
            raise BadParam("dir", "must start with /store/unmerged/")
        query = (rse, state, error_class, dir_prefix, job)
        if stream:
            records = fetch(*query, after, 0)
            first = next(records, None)  # here an outage still answers 503, before the 200 is sent
            cherrypy.response.stream = True
            return self._stream(first, records, self.config.rest.db_timeout_s)
        page = list(fetch(*query, after, limit))
        nxt = page[-1]["cursor"] if len(page) == limit else None
        return envelope(page, next=nxt)

    @staticmethod
    def _stream(first: Optional[dict[str, Any]], rest: Iterator[dict[str, Any]], timeout_s: float) -> Iterator[bytes]:
        """One JSON envelope written in pieces of about 64 KiB; each ledger page within `timeout_s`.
        A database error mid-stream ends the envelope with an "error" member (never a hang)."""
        yield b'{"result":['
        buf: list[bytes] = []
        size = 0
        rec, sep = first, b""
        try:
            while rec is not None:
                item = _ENCODE(rec).encode()
                buf.append(sep + item)
                sep = b","
                size += len(item)
                if size >= 65536:
                    yield b"".join(buf)
                    buf, size = [], 0
                with deadline(timeout_s):
                    rec = next(rest, None)
        except DB_ERRORS as exc:
            log.warning("database error while streaming files: %s", exc)
            buf.append(b'],"error":' + json.dumps(DB_DOWN).encode() + b"}")
            yield b"".join(buf)
            return
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
        """Start one RSE now (mode plan or apply): a JSON body with rse, mode and a fresh request_id, admitted by
        the trigger's gate (rest/auth.py); each request_id once (the queue); audited."""
        request = cherrypy.request
        ask = self.gate.admit(request_headers(), request.headers.get("Content-Type", ""), request.remote.ip, params,
                              read_body, request.wsgi_environ.get(CALLER, "") if request.wsgi_environ else "")
        if self.queue is None:
            return _error(503, "this instance runs no service loop: triggers are disabled")
        wait = self.gate.rate_limited(ask)
        if wait is not None:
            cherrypy.response.headers["Retry-After"] = str(int(wait) + 1)
            return _error(429, f"rate limit of {self.config.rest.trigger_rate_per_min} triggers per minute "
                               f"reached; retry in {wait:.0f} s")
        try:
            record = self.queue.submit(ask.rse, ask.mode, ask.who, ask.request_id)
        except TriggerRefused as refused:
            self.gate.record(ask, "denied" if refused.reason == REPLAYED else "refused", reason=refused.reason)
            return _error(refused.status, str(refused))
        except DB_ERRORS:  # the request_id cannot be claimed: nothing is queued (503 from json_call)
            self.gate.record(ask, "refused", reason=DB_DOWN)
            raise
        self.gate.record(ask, "accepted", id=record["id"], merged_into=record["merged_into"])
        cherrypy.response.status = 202
        return envelope([record])

    def _caller(self) -> Optional[User]:
        """The verified caller, or None (anonymous, or headers that do not verify)."""
        try:
            return user_from_headers(request_headers(), self.keyfile)
        except AuthError:
            return None

    @json_call()
    def triggers(self, **params: Any) -> bytes:
        """Recent triggers of this instance and their state; who asked only for authenticated callers."""
        no_more(params)
        records = self.queue.recent() if self.queue else []
        if records and self._caller() is None:
            records = [{k: v for k, v in r.items() if k != "user"} for r in records]
        return envelope(records)
