"""Real WebDAV servers on 127.0.0.1: PyPI's WsgiDAV (cheroot) serving a folder, and the HTTP/WebDAV door of
Debian's xrootd (XrdHttp), which runs in its own network namespace (servers/xrootd.py) and is reached through a
NamespaceForward port."""
from __future__ import annotations

import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pytest

from servers import Process, free_port, server_dir
from servers.xrootd import NamespaceForward, XrootdServer, start_xrootd

# WsgiDAV serving argv[1] on 127.0.0.1:argv[2], anonymous read and write; with argv[3] == "careless", behind a
# front that drops the conditions of every request (If-Match, Depth): a server that ignores them.
_WSGIDAV = """
import sys
from cheroot import wsgi
from wsgidav.wsgidav_app import WsgiDAVApp
app = WsgiDAVApp({"provider_mapping": {"/": sys.argv[1]}, "simple_dc": {"user_mapping": {"*": True}},
                  "verbose": 1, "logging": {"enable_loggers": []}})
def careless(environ, start_response):
    for name in ("HTTP_IF_MATCH", "HTTP_DEPTH"):
        environ.pop(name, None)
    return app(environ, start_response)
wsgi.Server(("127.0.0.1", int(sys.argv[2])), careless if sys.argv[3:] == ["careless"] else app).start()
"""
XRDHTTP_PORT = 8080


@dataclass
class WebDavServer:
    data: Path  # what the server shows at "/"
    url: str  # dav://127.0.0.1:<port>


def _wait(url: str, proc: Process) -> None:
    deadline = time.monotonic() + 30
    while True:
        try:
            urllib.request.urlopen(urllib.request.Request(url, method="OPTIONS"), timeout=2).close()
            return
        except OSError:
            if not proc.alive() or time.monotonic() > deadline:
                raise RuntimeError(f"WebDAV server at {url} does not answer; see {proc.log}") from None
            time.sleep(0.1)


def _wsgidav(name: str, *options: str) -> Iterator[WebDavServer]:
    base = server_dir(name)
    data = base / "data"
    data.mkdir(parents=True, exist_ok=True)
    port = free_port()
    proc = Process(name, [sys.executable, "-c", _WSGIDAV, str(data), str(port), *options], base)
    _wait(f"http://127.0.0.1:{port}/", proc)
    yield WebDavServer(data, f"dav://127.0.0.1:{port}")
    proc.stop()


@pytest.fixture(scope="session")
def wsgidav_server() -> Iterator[WebDavServer]:
    yield from _wsgidav("wsgidav")


@pytest.fixture(scope="session")
def careless_wsgidav_server() -> Iterator[WebDavServer]:
    """WsgiDAV ignoring If-Match and Depth (a server that would delete a collection a file became)."""
    yield from _wsgidav("wsgidav-careless", "careless")


@pytest.fixture(scope="session")
def xrdhttp_server() -> Iterator[tuple[XrootdServer, WebDavServer]]:
    proc, server = start_xrootd(server_dir("xrdhttp"), f"xrd.protocol XrdHttp:{XRDHTTP_PORT} libXrdHttp.so\n")
    forward = NamespaceForward(server.pid, XRDHTTP_PORT)
    url = f"http://127.0.0.1:{forward.port}"
    _wait(url + "/store/", proc)
    yield server, WebDavServer(server.data, f"dav://127.0.0.1:{forward.port}")
    forward.close()
    proc.stop()
