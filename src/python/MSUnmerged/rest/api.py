"""JSON API under <base>/data/: answers in the WMCore envelope {"result": [...]}."""
from __future__ import annotations

import datetime
import functools
import importlib.metadata
import json
import logging
import re
import threading
import time
from typing import Any, Callable, Iterator, Optional

import cheroot.errors
import cherrypy
from pymongo.errors import PyMongoError

from MSUnmerged import sites
from MSUnmerged.config import Config
from MSUnmerged.dbwatch import DatabaseWatch
from MSUnmerged.ledger.retry import LedgerError, deadline
from MSUnmerged.ledger.states import EXPECTED_DIR_REASONS, SUBMITTED, DirState, FileState, dir_failed
from MSUnmerged.ledger.view import DIR_STATES, FILE_STATES, JOB_STATES, LedgerView
from MSUnmerged.rest.auth import AuthError, Audit, KeyFile, RateLimiter, User, claimed, has_role, user_from_headers
from MSUnmerged.rest.server import RAW_HEADERS  # cheroot folds '_' into '-' in names: the raw ones are there
from MSUnmerged.rest.triggers import REPLAYED, TriggerQueue, TriggerRefused
from MSUnmerged.statemachine import RSEState

log = logging.getLogger("MSUnmerged.rest")

# Patterns must match the whole value (`one` uses fullmatch: "$" would let a trailing newline through).
RSE_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,99}")
ERROR_CLASS_RE = re.compile(r"[A-Za-z0-9_.\-]{1,64}")
JOB_RE = re.compile(r"[A-Za-z0-9_.:\-]{1,128}")
REQUEST_ID_RE = re.compile(r"[A-Za-z0-9_.:\-]{8,128}")
# A page's cursor: a record's _id, "<rse>|<generation>|<path>" (worker.ids.file_id), as `next` gave it.
CURSOR_RE = re.compile(RSE_RE.pattern + r"\|[0-9]+\.[0-9]{3}\|/[^\n]{0,4096}")
ALL_DOCS = "all_docs"  # data/info?rse=ALL_DOCS, compared in lower case as WMCore does
MAX_PAGE = 10_000
STARTED = time.time()
VERSION = importlib.metadata.version("msunmerged")
# Any of these from the ledger, within rest.db_timeout_s: 503 on every endpoint.
DB_ERRORS = (PyMongoError, LedgerError)
DB_DOWN = "ledger database unavailable"

# WMCore MSUnmerged counter -> the ledger counter with the same meaning and type.
WMCORE_COUNTERS = {
    "totalNumFiles": "files_total",
    "totalNumDirs": "dirs_removable",  # WMCore: its directories at the depth it deletes; here the plan's
    "dirsToDelete": "dirs_removable",
    "filesToDelete": "to_delete",
    "filesDeletedSuccess": "deleted",
    "filesDeletedFail": "failed",
    "dirsDeletedSuccess": "dirs_removed",
    "dirsDeletedFail": "dirs_failed",
    "gfalErrors": "failed_by_message",  # {the storage's message: count}; ours by class beside (failed_by_class)
}
WMCORE_DICTS = ("gfalErrors",)
WMCORE_DIR_LISTS = ("toDelete", "protected", "deletedSuccess", "deletedFail")  # the others are numbers: 0, never null, when the ledger has none yet
# Parameters WMCore's Data API passes on and its MSUnmerged never reads: ignored on status and info (a client's
# `_` cache-buster, `rse_type` on info, ...), as WMCore does; our own calls still refuse unknown ones but `_`.
CACHE_BUSTER = "_"
# data/status?rse_type=<t>: WMCore's partitions (MSManager.status): an RSE's type from its name (sites.rse_type).
WMCORE_TIME = "%a, %d %b %Y %H:%M:%S UTC"  # WMCore's start_time/end_time (MSManager.updateTimeUTC)


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
                # Bounded, retries included: with the database away, answer 503 within db_timeout_s.
                with deadline(self.config.rest.db_timeout_s):
                    return fn(self, **params)
            except BadParam as exc:
                return _error(400, str(exc))
            except AuthError as exc:
                return _error(exc.status, str(exc))
            except DB_ERRORS as exc:
                log.warning("database error in %s: %s", fn.__name__, exc)
                return _error(503, DB_DOWN)
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


def json_object(body: bytes) -> dict[str, str]:
    """A JSON object of strings (an empty body: {}); BadParam otherwise."""
    try:
        data = json.loads(body or b"{}")
    except ValueError:  # also bytes that are not UTF-8
        raise BadParam("body", "not valid JSON") from None
    if not isinstance(data, dict) or not all(isinstance(v, str) for v in data.values()):
        raise BadParam("body", "expected a JSON object of strings")
    return data


def wmcore_boolean(params: dict[str, Any], name: str, default: bool) -> bool:
    """A WMCore call's flag as WMCore's Data.get reads `detail`: true (any case, or 1) is true, any other value
    false (never a 400: a caller of WMCore's API gets WMCore's answer); absent: the default."""
    raw = params.pop(name, None)
    if raw is None or raw == "":
        return default
    return isinstance(raw, str) and raw.lower() in ("true", "1")


def no_more(params: dict[str, Any]) -> None:
    """Unknown parameters are refused rather than silently ignored (but a `_` cache-buster)."""
    params.pop(CACHE_BUSTER, None)
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


def iso(ts: Any) -> str:
    """Epoch seconds as WMCore answers them: naive UTC ISO-8601 (missing: the epoch, as WMCore's 0.0)."""
    ts = ts if isinstance(ts, (int, float)) and not isinstance(ts, bool) else 0.0
    return datetime.datetime.fromtimestamp(ts, datetime.timezone.utc).replace(tzinfo=None).isoformat()


def wmcore_info(rse: dict[str, Any]) -> dict[str, Any]:
    """One RSE as WMCore's MSUnmerged document (MSUnmergedRSE), with the ledger's own fields beside."""
    plan = rse.get("plan") or {}
    ours = {"files_total": plan.get("files_total"), **(rse.get("counters") or {})}
    ours["failed_by_message"] = {e["message"]: e["n"] for e in ours.get("failed_by_message") or []}
    counters: dict[str, Any] = {name: ours.get(key) or ({} if name in WMCORE_DICTS else 0)
                                for name, key in WMCORE_COUNTERS.items()}
    counters.update((k, v) for k, v in ours.items() if k not in WMCORE_COUNTERS.values())
    gen = rse.get("generation")
    return {
        "name": rse["name"],
        "isClean": rse.get("state") == RSEState.CLEAN,
        "pfnPrefix": None,  # no central PFN: each job maps LFNs with its site's storage.json
        "rucioConMonStatus": "done" if gen is not None else None,  # a generation is a finished scan
        "timestamps": {
            "rseConsStatTime": iso(gen),  # the ConMon scan end_time of the generation worked on
            "prevStartTime": iso(None),
            "startTime": iso(plan.get("planned")),
            "prevEndTime": iso(None),
            "endTime": iso(rse.get("updated") if rse.get("state") == RSEState.CLEAN else None),
            "planTime": iso(plan.get("planned")),
            "updateTime": iso(rse.get("updated")),
            "countTime": iso(rse.get("counted_at")),
        },
        "counters": counters,
        "state": rse.get("state"),
        "reason": rse.get("reason"),
        "detail": rse.get("detail"),
        "generation": gen,
    }


def wmcore_time(ts: Any) -> Optional[str]:
    """Epoch seconds as WMCore's status report writes them; None stays None (no cycle yet)."""
    if not isinstance(ts, (int, float)) or isinstance(ts, bool):
        return None
    return time.strftime(WMCORE_TIME, time.gmtime(ts))


def cycle_error(cycle: dict[str, Any], alert: str) -> str:
    """The status report's `error`: empty when the last cycle had no failure, else what failed (and the
    failing-cycles alert when it is raised), as one line."""
    failures = cycle.get("failures") or []
    if not failures:
        return ""
    shown = "; ".join(f"{f.get('source')}/{f.get('reason')}" + (f" ({f.get('rse')})" if f.get("rse") else "")
                      + (f": {str(f.get('detail'))[:200]}" if f.get("detail") else "") for f in failures[:5])
    more = f"; and {len(failures) - 5} more" if len(failures) > 5 else ""
    return (f"{alert}. " if alert else "") + f"last cycle: {len(failures)} failures: {shown}{more}"


def wmcore_report(rses: list[dict[str, Any]], cycle: Optional[dict[str, Any]], instance: str,
                  alert: str = "") -> dict[str, Any]:
    """WMCore's UNMERGED_REPORT (DataStructs/DefaultStructs) from the ledger and the last polling cycle."""
    cycle = cycle or {}
    return {
        "wmcore_version": VERSION,
        "microservice_version": VERSION,
        "microservice": "MSUnmerged",
        "status": "OK",
        "thread_id": instance,
        "start_time": wmcore_time(cycle.get("started")),
        "end_time": wmcore_time(cycle.get("finished")),
        "execution_time": cycle.get("duration_s"),
        "error": cycle_error(cycle, alert),
        "total_num_rses": len(rses),
        "total_num_files": sum((r.get("plan") or {}).get("files_total") or 0 for r in rses),
        "num_rses_cleaned": sum(r.get("state") == RSEState.CLEAN for r in rses),
        "num_files_deleted": sum((r.get("counters") or {}).get("deleted") or 0 for r in rses),
    }


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
        self.cache = TtlCache(config.rest.cache_ttl_s)
        self.keyfile = KeyFile(config.rest.hmac_key_file)
        self.limiter = RateLimiter(config.rest.trigger_rate_per_min)
        self.audit = Audit(config.rest.audit_log)

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
        detail = wmcore_boolean(params, "detail", True)
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
        report = wmcore_report(rses, last, self.config.service.instance, health["alert"])
        if rse_type is not None:
            report["rse_type"] = rse_type
        if not detail:
            return report
        by_state: dict[str, int] = {}
        for r in rses:
            by_state[r["state"]] = by_state.get(r["state"], 0) + 1
        return {
            **report,
            "service": "MSUnmerged",
            "status": "OK",
            "instance": self.config.service.instance,
            "dry_run": self.config.service.dry_run,
            "time": round(time.time(), 3),
            "uptime_s": round(time.time() - STARTED, 1),
            "rses": {"total": len(rses), "by_state": by_state},
            "cycles": recent[:n_cycles],
            "health": health,
            "triggers": self.queue.summary() if self.queue else {"enabled": False},
        }

    @json_call()
    def info(self, **params: Any) -> bytes:
        """info?rse=<RSE>|ALL_DOCS[&rse=...]&detail=true|false, answered as WMCore's getStatsFromMongoDB."""
        rses = many(params, "rse", RSE_RE)
        if not rses:
            raise BadParam("rse", "required")
        detail = wmcore_boolean(params, "detail", False)
        # Anything else is ignored (rse_type, `_`, ...), as WMCore does.
        query = f"rse={rses[0] if len(rses) == 1 else rses}&detail={detail}"
        return self.cache.get(("info", tuple(rses), detail), lambda: envelope([{
            "wmcore_version": VERSION, "microservice_version": VERSION, "microservice": "MSUnmerged",
            "query": query, "rseData": self._info(rses, detail)}]))

    def _info(self, names: list[str], detail: bool) -> list[dict[str, Any]]:
        if any(n.lower() == ALL_DOCS for n in names):
            found = self.view.rses()
        else:
            found = [r for r in map(self.view.rse, names) if r]
        docs = [wmcore_info(r) for r in found]
        if detail:
            for doc in docs:
                doc["dirs"] = self._wmcore_dirs(doc["name"])
                doc["jobs"] = self.view.jobs(doc["name"], None, 20)
                doc["files"] = {"deletedFail": list(self.view.files(doc["name"], FileState.FAILED, None, None, None,
                                                                    None, 100))}
        return docs

    def _wmcore_dirs(self, rse: str) -> dict[str, Any]:
        """WMCore's `dirs` of an RSE (lists of directories, each at most MAX_PAGE long) from the plan and the
        jobs' directory outcomes: toDelete (holding files still to delete), protected (kept by a protected or
        kept path), deletedSuccess (removed), deletedFail (not removed for an error), allUnmerged (all these)."""
        preview = self.view.plan_preview(rse, MAX_PAGE)
        out: dict[str, Any] = {"allUnmerged": [], "toDelete": [d["dir"] for d in preview["directories"]],
                               "protected": [], "deletedSuccess": [], "deletedFail": []}
        for record in self.view.dirs(rse, None, None, None, None, None, MAX_PAGE):
            state, reason = record.get("state"), record.get("error_class") or ""
            if state == DirState.REMOVED:
                out["deletedSuccess"].append(record["dir"])
            elif state == DirState.REFUSED and reason in EXPECTED_DIR_REASONS:
                out["protected"].append(record["dir"])
            elif dir_failed(str(state), reason):
                out["deletedFail"].append(record["dir"])
        out["allUnmerged"] = sorted({d for key in WMCORE_DIR_LISTS for d in out[key]})[:MAX_PAGE]
        out["toDeleteComplete"] = preview["shown"] >= preview["files_to_delete"]
        return out

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
                item = json.dumps(rec, separators=(",", ":"), default=str).encode()
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
        """Start one RSE now (mode plan or apply): a JSON body with rse, mode and a fresh request_id.
        Operators only, `apply` only for rest.operator_logins; same-origin; each request_id once;
        rate-limited; audited. Everything the headers decide is decided before the body is read."""
        headers = request_headers()
        what: dict[str, Any] = {"remote": cherrypy.request.remote.ip, **claimed(headers)}

        def refuse(reason: str, error: Exception, outcome: str = "denied") -> Exception:
            self.audit.write(action="trigger", outcome=outcome, reason=reason, **what)
            return error

        # Before the body is read only the query string says what is asked: audited as claimed, like the identity.
        what.update({k: v[:200] for k, v in params.items()
                     if k in ("rse", "mode", "request_id") and isinstance(v, str)})
        origin = headers.get("origin", b"").decode("latin-1")
        if origin and origin not in self.config.rest.allowed_origins:
            raise refuse(f"foreign origin {origin[:100]}",
                         AuthError(f"requests from origin {origin[:100]!r} are refused"))
        if cherrypy.request.headers.get("Content-Type", "").split(";")[0].strip().lower() != "application/json":
            raise refuse("not a JSON body", AuthError("the body must be a JSON object (Content-Type: "
                                                      "application/json)", 415))
        try:
            user = user_from_headers(headers, self.keyfile)
        except AuthError as exc:
            raise refuse(str(exc), exc) from None
        what.update(login=user.login, dn=user.dn)
        rest = self.config.rest
        if not has_role(user, rest.operator_roles):
            raise refuse("no operator role",
                         AuthError("an operator role is required: " + ", ".join(rest.operator_roles)))
        if rest.operator_logins and user.login not in rest.operator_logins:
            raise refuse("login not in rest.operator_logins",
                         AuthError("this login may not trigger (rest.operator_logins)"))
        try:
            params = self._merge_body(params, rest.max_body_bytes)
            rse = one(params, "rse", required=True, pattern=RSE_RE)
            mode = one(params, "mode", "plan", choices=("plan", "apply"))
            request_id = one(params, "request_id", required=True, pattern=REQUEST_ID_RE)
            no_more(params)
        except (BadParam, AuthError) as exc:
            raise refuse(str(exc), exc, "refused") from None
        what.update(rse=rse, mode=mode, request_id=request_id)
        if mode == "apply" and not rest.operator_logins:
            raise refuse("apply closed: rest.operator_logins empty", AuthError(
                "apply triggers are refused until rest.operator_logins names the logins that may apply"))
        if self.queue is None:
            return _error(503, "this instance runs no service loop: triggers are disabled")
        allowed, wait = self.limiter.allow(user.login or user.dn)
        if not allowed:
            self.audit.write(action="trigger", outcome="rate_limited", **what)
            cherrypy.response.headers["Retry-After"] = str(int(wait) + 1)
            return _error(429, f"rate limit of {rest.trigger_rate_per_min} triggers per minute "
                               f"reached; retry in {wait:.0f} s")
        try:
            record = self.queue.submit(rse, mode, user.login or user.dn, request_id)
        except TriggerRefused as refused:
            self.audit.write(action="trigger", outcome="denied" if refused.reason == REPLAYED else "refused",
                             reason=refused.reason, **what)
            return _error(refused.status, str(refused))
        except DB_ERRORS:  # the request_id cannot be claimed: nothing is queued (503 from json_call)
            self.audit.write(action="trigger", outcome="refused", reason=DB_DOWN, **what)
            raise
        self.audit.write(action="trigger", outcome="accepted", id=record["id"], **what)
        cherrypy.response.status = 202
        return envelope([record])

    @staticmethod
    def _merge_body(params: dict[str, Any], limit: int) -> dict[str, Any]:
        """Query parameters plus the JSON object body (at most `limit` bytes, within the request deadline);
        a name given in both with different values is refused, never silently overridden."""
        data = json_object(read_body(limit))
        for name, value in data.items():
            if name in params and params[name] != value:
                raise BadParam(name, "given in the query and the body with different values")
        return {**params, **data}

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
