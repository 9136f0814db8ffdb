"""The CherryPy application: operator page at <base>/, JSON at <base>/data/, metrics at <base>/metrics."""
from __future__ import annotations

import json
import logging
from typing import Any, Optional

import cheroot.wsgi
import cherrypy
from cherrypy.process.servers import ServerAdapter

from MSUnmerged.config import Config
from MSUnmerged.ledger.retry import deadline
from MSUnmerged.ledger.view import LedgerView
from MSUnmerged.rest import metrics, page
from MSUnmerged.rest.api import DB_ERRORS, RAW_HEADERS, DataApi
from MSUnmerged.rest.auth import is_signed, parse_role
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


class RawHeaderGateway(cheroot.wsgi.Gateway_10):
    """WSGI 1.0, plus the request headers as sent (lower-case names, raw byte values) in environ.

    The WSGI environ cannot carry them: HTTP_CMS_AUTHZ_T0_OPERATOR is both `t0_operator` and
    `t0-operator`, and the front end signs the name as sent and the value's raw UTF-8 bytes.
    """

    def get_environ(self) -> dict[str, Any]:
        env = super().get_environ()
        env[RAW_HEADERS] = {k.decode("latin-1").lower(): v for k, v in self.req.inheaders.items()}
        return env


GATEWAY = ("msunmerged-raw-headers", 1, 0)
cheroot.wsgi.wsgi_gateways[GATEWAY] = RawHeaderGateway
REDACTED = "<redacted>"


def log_redacted_headers() -> None:
    """On an error answer, log the request headers as CherryPy would, but never the signed ones
    (cms-authn-*/cms-authz-*): they are a credential that never expires."""
    lines = [f"  {k}: {REDACTED if is_signed(k.lower()) else v}" for k, v in cherrypy.serving.request.header_list]
    cherrypy.log("\nRequest Headers:\n" + "\n".join(lines), "HTTP")


cherrypy.tools.log_redacted_headers = cherrypy.Tool("before_error_response", log_redacted_headers)


class Root:
    """Pages and metrics; `data` holds the JSON API."""

    def __init__(self, config: Config, view: LedgerView, triggers: Optional[TriggerQueue]) -> None:
        self.config = config
        self.base = config.rest.base.rstrip("/")
        self.ctx = page.Context.from_config(config)
        self.db_timeout_s = config.rest.db_timeout_s
        self.view = view
        self.data = DataApi(config, view, triggers)

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
        try:
            with deadline(self.db_timeout_s):
                return metrics.render(self.view, self.config).encode()
        except DB_ERRORS:
            return metrics.render_down(self.ctx.dry_run).encode()


class MetricsRoot:
    """Only <metrics port>/metrics: CMSWEB scrapes a separate port (18242), which exposes nothing else."""

    def __init__(self, root: Root) -> None:
        self.metrics = root.metrics


_METRICS_SERVERS: list[ServerAdapter] = []


def serve_metrics(config: Config, root: Root) -> None:
    """Serve the root's metrics on rest.metrics_port, started and stopped with CherryPy's engine."""
    bind = (config.rest.host, config.rest.metrics_port)
    app = cherrypy.Application(MetricsRoot(root), "", {"/": {
        "error_page.default": _error_page, "request.show_tracebacks": False, "tools.log_headers.on": False}})
    server = cheroot.wsgi.Server(bind, app, numthreads=2, timeout=int(config.rest.socket_timeout_s) or 1)
    adapter = ServerAdapter(cherrypy.engine, server, bind)
    adapter.subscribe()
    _METRICS_SERVERS.append(adapter)


def mount(config: Config, view: LedgerView, triggers: Optional[TriggerQueue] = None) -> Root:
    """Mount the application on cherrypy.tree under rest.base; returns the root object."""
    for spec in config.rest.operator_roles:
        parse_role(spec)  # a bad role spec must stop the start, not every trigger
    root = Root(config, view, triggers)
    problem = root.data.keyfile.problem()
    if problem:
        log.error("%s: every trigger will be refused until rest.hmac_key_file holds the CMSWEB key", problem)
    cherrypy.tree.mount(root, root.base, {"/": {
        "error_page.default": _error_page,
        "request.show_tracebacks": False,
        "tools.trailing_slash.on": True,
        "tools.log_headers.on": False,
        "tools.log_redacted_headers.on": True,
    }})
    return root


def configure_server(config: Config, port: Optional[int] = None) -> None:
    """Bind address; a fixed pool of threads with a bounded queue and socket timeout, so slow clients
    hold a thread for at most socket_timeout_s; bodies over max_body_bytes refused (413) before the
    application runs; CherryPy's own screen log and autoreload off (we log ourselves)."""
    rest = config.rest
    cherrypy.config.update({
        "server.socket_host": rest.host,
        "server.socket_port": rest.port if port is None else port,
        "server.thread_pool": rest.thread_pool,
        "server.thread_pool_max": rest.thread_pool,
        "server.accepted_queue_size": rest.queue_size,
        "server.accepted_queue_timeout": rest.socket_timeout_s,
        "server.socket_timeout": rest.socket_timeout_s,
        "server.max_request_body_size": rest.max_body_bytes,
        "server.wsgi_version": GATEWAY,
        "server.socket_queue_size": 128,
        "engine.autoreload.on": False,
        "checker.on": False,
        "log.screen": False,
        "request.show_tracebacks": False,
    })


def start(config: Config, view: LedgerView, triggers: Optional[TriggerQueue] = None,
          port: Optional[int] = None) -> Root:
    """Mount and start serving in background threads (stop with `stop()`)."""
    root = mount(config, view, triggers)
    configure_server(config, port)
    if config.rest.metrics_port:
        serve_metrics(config, root)
    cherrypy.engine.start()
    cherrypy.engine.wait(cherrypy.engine.states.STARTED)
    log.info("REST on http://%s:%s%s/", config.rest.host, cherrypy.server.socket_port, root.base)
    return root


def stop() -> None:
    cherrypy.engine.exit()
    while _METRICS_SERVERS:
        _METRICS_SERVERS.pop().unsubscribe()
    for path in list(cherrypy.tree.apps):
        del cherrypy.tree.apps[path]


def block() -> Any:
    """Serve until SIGTERM/SIGINT (the CLI's `serve`)."""
    if hasattr(cherrypy.engine, "signal_handler"):
        cherrypy.engine.signal_handler.subscribe()
    cherrypy.engine.block()
