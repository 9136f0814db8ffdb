"""The CherryPy application: operator page at <base>/, JSON at <base>/data/, metrics at <base>/metrics."""
from __future__ import annotations

import json
import logging
from typing import Any, Optional

import cherrypy
import pymongo
from pymongo.errors import PyMongoError

from MSUnmerged.config import Config
from MSUnmerged.rest import metrics, page
from MSUnmerged.rest.api import DataApi
from MSUnmerged.rest.auth import parse_role
from MSUnmerged.rest.triggers import TriggerQueue
from MSUnmerged.rest.view import LedgerView

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


class Root:
    """Pages and metrics; `data` holds the JSON API."""

    def __init__(self, config: Config, view: LedgerView, triggers: Optional[TriggerQueue]) -> None:
        self.base = config.rest.base.rstrip("/")
        self.ctx = page.Context.from_config(config)
        self.db_timeout_s = config.rest.db_timeout_s
        self.view = view
        self.data = DataApi(config, view, triggers)

    @cherrypy.expose
    def index(self) -> bytes:
        _html_headers()
        try:
            with pymongo.timeout(self.db_timeout_s):
                return page.index_page(self.view, self.ctx).encode()
        except PyMongoError:
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
            with pymongo.timeout(self.db_timeout_s):
                text = page.rse_page(self.view, self.ctx, name)
        except PyMongoError:
            return self._db_down()
        if text is None:
            cherrypy.response.status = 404
            return page.document("MSUnmerged", f"<h1>Unknown RSE {page.esc(name)}</h1>", self.ctx).encode()
        return text.encode()

    @cherrypy.expose
    def metrics(self) -> bytes:
        cherrypy.response.headers["Content-Type"] = metrics.CONTENT_TYPE
        try:
            with pymongo.timeout(self.db_timeout_s):
                return metrics.render(self.view, self.ctx.dry_run, self.ctx.stale_after_s).encode()
        except PyMongoError:
            return metrics.render_down(self.ctx.dry_run).encode()


def mount(config: Config, view: LedgerView, triggers: Optional[TriggerQueue] = None) -> Root:
    """Mount the application on cherrypy.tree under rest.base; returns the root object."""
    for spec in config.rest.operator_roles:
        parse_role(spec)  # a bad role spec must stop the start, not every trigger
    root = Root(config, view, triggers)
    cherrypy.tree.mount(root, root.base, {"/": {
        "error_page.default": _error_page,
        "request.show_tracebacks": False,
        "tools.trailing_slash.on": True,
    }})
    return root


def configure_server(config: Config, port: Optional[int] = None) -> None:
    """Bind address and threads; CherryPy's own screen log and autoreload off (we log ourselves)."""
    cherrypy.config.update({
        "server.socket_host": config.rest.host,
        "server.socket_port": config.rest.port if port is None else port,
        "server.thread_pool": config.rest.thread_pool,
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
    cherrypy.engine.start()
    cherrypy.engine.wait(cherrypy.engine.states.STARTED)
    log.info("REST on http://%s:%s%s/", config.rest.host, cherrypy.server.socket_port, root.base)
    return root


def stop() -> None:
    cherrypy.engine.exit()
    for path in list(cherrypy.tree.apps):
        del cherrypy.tree.apps[path]


def block() -> Any:
    """Serve until SIGTERM/SIGINT (the CLI's `serve`)."""
    if hasattr(cherrypy.engine, "signal_handler"):
        cherrypy.engine.signal_handler.subscribe()
    cherrypy.engine.block()
