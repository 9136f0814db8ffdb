"""The CherryPy application: operator page at <base>/, JSON at <base>/data/, metrics at <base>/metrics."""
from __future__ import annotations

import json
import logging
import threading
import time
from typing import Any, Optional

import cherrypy
from cherrypy.process.servers import ServerAdapter

from MSUnmerged.config import Config
from MSUnmerged.dbwatch import DatabaseWatch
from MSUnmerged.ledger.retry import deadline
from MSUnmerged.ledger.view import LedgerView
from MSUnmerged.redact import REDACTED, redact, secret_header
from MSUnmerged.rest import metrics, page
from MSUnmerged.rest.api import DB_ERRORS, DataApi
from MSUnmerged.rest.auth import is_signed, parse_role
from MSUnmerged.rest.server import GuardedServer
from MSUnmerged.rest.triggers import TriggerQueue

log = logging.getLogger("MSUnmerged.rest")


def _html_headers() -> None:
    h = cherrypy.response.headers
    h["Content-Type"] = "text/html; charset=utf-8"
    h["Content-Security-Policy"] = page.CSP
    h["X-Content-Type-Options"] = "nosniff"
    h["Cache-Control"] = "no-store"


def _error_page(status: str, message: str, traceback: str, version: str) -> str:
    """Every error not answered by a handler: JSON, never a traceback."""
    cherrypy.response.headers["Content-Type"] = "application/json"
    return json.dumps({"result": [], "error": f"{status}: {message}"})


def log_redacted_headers() -> None:
    """On an error answer, log the request headers as CherryPy would, but never a credential: the signed ones
    (cms-authn-*/cms-authz-*, a credential that never expires), Authorization, Cookie, X-Rucio-Auth-Token and
    any header named like a secret are shown REDACTED, and every other value goes through `redact`."""
    lines = [f"  {k}: {REDACTED if is_signed(k.lower()) or secret_header(k) else redact(v)}"
             for k, v in cherrypy.serving.request.header_list]
    cherrypy.log("\nRequest Headers:\n" + "\n".join(lines), "HTTP")


cherrypy.tools.log_redacted_headers = cherrypy.Tool("before_error_response", log_redacted_headers)


def access_log_follows_level(app: cherrypy.Application) -> None:
    """The app's access log (one INFO line per request, cherrypy.access.<id>) follows the process's log level
    (service.log_level) like every other logger, instead of CherryPy's fixed INFO; below INFO the line is not
    even built (CherryPy formats it, with a fresh uuid4 per request, before the logger decides)."""
    logs = app.log
    for logger in (logs.access_log, cherrypy.log.access_log):  # cherrypy.access.<id> and its parent
        logger.setLevel(logging.NOTSET)
    built = logs.access

    def access() -> None:
        if logs.access_log.isEnabledFor(logging.INFO):
            built()

    logs.access = access  # type: ignore[method-assign]


class Root:
    """Pages and metrics; `data` holds the JSON API."""

    def __init__(self, config: Config, view: LedgerView, triggers: Optional[TriggerQueue],
                 watch: Optional[DatabaseWatch]) -> None:
        self.config = config
        self.base = config.rest.base.rstrip("/")
        self.ctx = page.Context.from_config(config)
        self.db_timeout_s = config.rest.db_timeout_s
        self.view = view
        self.watch = watch
        self.data = DataApi(config, view, triggers, watch)

    @cherrypy.expose
    def index(self, **params: Any) -> bytes:
        """The operator page; the query selects the RSE table's filter, order and page (page.Selection)."""
        _html_headers()
        try:
            with deadline(self.db_timeout_s):
                return page.index_page(self.view, self.ctx, params).encode()
        except DB_ERRORS:
            return self._db_down()

    def _db_down(self) -> bytes:
        cherrypy.response.status = 503
        return page.document("MSUnmerged", "<h1>Ledger database unavailable</h1>", self.ctx).encode()

    @cherrypy.expose
    def rse(self, name: str = "") -> bytes:
        _html_headers()
        if not isinstance(name, str) or not name:
            cherrypy.response.status = 400
            return page.document("MSUnmerged", "<h1>parameter 'name' (the RSE) is required</h1>", self.ctx).encode()
        try:
            with deadline(self.db_timeout_s):
                text = page.rse_page(self.view, self.ctx, name)
        except DB_ERRORS:
            return self._db_down()
        if text is None:
            cherrypy.response.status = 404
            return page.document("MSUnmerged", f"<h1>Unknown RSE {page.esc(name)}</h1>", self.ctx).encode()
        return text.encode()

    @cherrypy.expose
    def metrics(self) -> bytes:
        cherrypy.response.headers["Content-Type"] = metrics.CONTENT_TYPE
        extra = () if self.watch is None else (self.watch,)
        try:
            with deadline(self.db_timeout_s):
                return metrics.render(self.view, self.config, *extra).encode()
        except DB_ERRORS:
            return metrics.render_down(self.config, self.ctx.dry_run, *extra).encode()


class MetricsRoot:
    """Only <metrics port>/metrics: CMSWEB scrapes a separate port (18242), which exposes nothing else."""

    def __init__(self, root: Root) -> None:
        self.metrics = root.metrics


HALT_S = 10.0  # bounds waiting for a server's thread to end at stop


class _Adapter(ServerAdapter):
    """CherryPy's server adapter that can also halt a server whose start was cut short."""

    thread: Optional[threading.Thread] = None
    halting = False

    def _start_http_thread(self) -> None:
        self.thread = threading.current_thread()
        if not self.halting:
            super()._start_http_thread()

    def halt(self) -> None:
        """Stop serving, also when a Ctrl-C/SIGTERM during the engine's start left the server unmarked as
        running: CherryPy's stop then skips it, and its thread (not a daemon) would keep the process alive."""
        self.halting = True
        end = time.monotonic() + HALT_S
        while self.thread is not None and self.thread.is_alive() and time.monotonic() < end:
            self.httpserver.stop()  # nothing while it is not serving yet: tried again until its thread ends
            self.thread.join(0.1)


# The servers this module started (the API's, the metrics port's), subscribed to CherryPy's engine.
_SERVERS: list[_Adapter] = []
# Every request, on both ports: no traceback shown, no header logged but the unsigned ones, and CherryPy never
# reads a body itself (a form post's included): the trigger authenticates from the headers first.
APP_CONFIG = {
    "error_page.default": _error_page,
    "request.show_tracebacks": False,
    "request.process_request_body": False,
    "tools.log_headers.on": False,
    "tools.log_redacted_headers.on": True,
}


def _serve(config: Config, app: Any, port: int) -> None:
    """A GuardedServer for `app` on rest.host:port, started and stopped with CherryPy's engine."""
    bind = (config.rest.host, port)
    adapter = _Adapter(cherrypy.engine, GuardedServer(bind, app, config.rest), bind)
    adapter.subscribe()
    _SERVERS.append(adapter)


def mount(config: Config, view: LedgerView, triggers: Optional[TriggerQueue] = None,
          watch: Optional[DatabaseWatch] = None) -> Root:
    """Mount the application on cherrypy.tree under rest.base; returns the root object."""
    for spec in config.rest.operator_roles:
        parse_role(spec)  # a bad role spec must stop the start, not every trigger
    root = Root(config, view, triggers, watch)
    problem = root.data.keyfile.problem()
    if problem:
        log.error("%s: every trigger will be refused until rest.hmac_key_file holds the CMSWEB key", problem)
    if not config.rest.operator_logins:
        log.warning("rest.operator_logins is empty: every trigger is refused until it names the operators")
    access_log_follows_level(cherrypy.tree.mount(root, root.base, {"/": {**APP_CONFIG, "tools.trailing_slash.on": True}}))
    return root


def start(config: Config, view: LedgerView, triggers: Optional[TriggerQueue] = None,
          port: Optional[int] = None, watch: Optional[DatabaseWatch] = None) -> Root:
    """Mount and serve in background threads (stop with `stop()`): the tree on rest.port (or `port`), the
    metrics alone on rest.metrics_port, each by a GuardedServer (rest/server.py); CherryPy's own server,
    screen log and autoreload off (we log ourselves)."""
    root = mount(config, view, triggers, watch)
    cherrypy.config.update({"engine.autoreload.on": False, "checker.on": False, "log.screen": False,
                            "request.show_tracebacks": False})
    cherrypy.server.unsubscribe()
    listen = config.rest.port if port is None else port
    _serve(config, cherrypy.tree, listen)
    if config.rest.metrics_port:
        metrics_app = cherrypy.Application(MetricsRoot(root), "", {"/": APP_CONFIG})
        access_log_follows_level(metrics_app)
        _serve(config, metrics_app, config.rest.metrics_port)
    cherrypy.engine.start()
    cherrypy.engine.wait(cherrypy.engine.states.STARTED)
    log.info("REST on http://%s:%s%s/", config.rest.host, listen, root.base)
    return root


def stop() -> None:
    cherrypy.engine.stop()  # first: exit() during a start that Ctrl-C/SIGTERM cut short ends the process (exit 70)
    cherrypy.engine.exit()
    while _SERVERS:
        adapter = _SERVERS.pop()
        adapter.halt()
        adapter.unsubscribe()
    for path in list(cherrypy.tree.apps):
        del cherrypy.tree.apps[path]


def block() -> None:
    """Serve until the engine exits. Ctrl-C, or SIGTERM that the CLI makes one, raises KeyboardInterrupt here for
    the caller to clean up and end as interrupted (CherryPy's own block and signal handlers end as a success)."""
    cherrypy.engine.wait(cherrypy.engine.states.EXITING, interval=0.5, channel="main")
