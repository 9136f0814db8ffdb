"""Real WebDAV servers on 127.0.0.1: PyPI's WsgiDAV (cheroot) serving a folder, and the HTTP/WebDAV door of
Debian's xrootd (XrdHttp), which runs in its own network namespace (servers/xrootd.py) and is reached through a
NamespaceForward port."""
from __future__ import annotations

import json
import ssl
import sys
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Optional

import pytest

from servers import Process, free_port, server_dir
from servers.testca import TestCA
from servers.xrootd import NamespaceForward, XrootdServer, start_xrootd

# WsgiDAV serving argv[1] on 127.0.0.1:argv[2], anonymous read and write, with the options of argv[3] (JSON):
# "careless": behind a front that drops the conditions of every request (If-Match, Depth), a server that ignores
# them; "token": a front answering 401 to a request without `Authorization: Bearer <token>`; "tls": [cert, key].
_WSGIDAV = """
import json, sys
from cheroot import wsgi
from cheroot.ssl.builtin import BuiltinSSLAdapter
from wsgidav.wsgidav_app import WsgiDAVApp
options = json.loads(sys.argv[3])
app = WsgiDAVApp({"provider_mapping": {"/": sys.argv[1]}, "simple_dc": {"user_mapping": {"*": True}},
                  "verbose": 1, "logging": {"enable_loggers": []}})
def front(environ, start_response):
    if options.get("careless"):
        for name in ("HTTP_IF_MATCH", "HTTP_DEPTH"):
            environ.pop(name, None)
    if options.get("token") and environ.get("HTTP_AUTHORIZATION") != "Bearer " + options["token"]:
        start_response("401 Unauthorized", [("Content-Length", "0")])
        return [b""]
    return app(environ, start_response)
server = wsgi.Server(("127.0.0.1", int(sys.argv[2])), front)
if options.get("tls"):
    server.ssl_adapter = BuiltinSSLAdapter(*options["tls"])
server.start()
"""
XRDHTTP_PORT = 8080


@dataclass
class WebDavServer:
    data: Path  # what the server shows at "/"
    url: str  # dav://127.0.0.1:<port>, davs:// over TLS
    ca_dir: Optional[Path] = None  # TLS: the hashed CA folder its certificate is trusted with (X509_CERT_DIR)
    token: Optional[str] = None  # the bearer token it requires


def _wait(url: str, proc: Process, context: Optional[ssl.SSLContext] = None) -> None:
    deadline = time.monotonic() + 30
    while True:
        try:
            urllib.request.urlopen(urllib.request.Request(url, method="OPTIONS"), timeout=2, context=context).close()
            return
        except urllib.error.HTTPError:  # it answers (401 without a token)
            return
        except OSError:
            if not proc.alive() or time.monotonic() > deadline:
                raise RuntimeError(f"WebDAV server at {url} does not answer; see {proc.log}") from None
            time.sleep(0.1)


def _wsgidav(name: str, **options: object) -> Iterator[WebDavServer]:
    base = server_dir(name)
    data = base / "data"
    data.mkdir(parents=True, exist_ok=True)
    port = free_port()
    ca = None
    if options.pop("tls", False):
        ca = TestCA(base / "pki", name=f"MSUnmerged WebDAV CA {uuid.uuid4().hex[:8]}")
        host = ca.issue("localhost", server=True)
        options["tls"] = [str(host.cert), str(host.key)]
    proc = Process(name, [sys.executable, "-c", _WSGIDAV, str(data), str(port), json.dumps(options)], base)
    scheme = "https" if ca else "http"
    _wait(f"{scheme}://127.0.0.1:{port}/", proc, ssl.create_default_context(capath=str(ca.ca_dir)) if ca else None)
    yield WebDavServer(data, f"{'davs' if ca else 'dav'}://127.0.0.1:{port}", ca.ca_dir if ca else None,
                       str(options.get("token") or "") or None)
    proc.stop()


@pytest.fixture(scope="session")
def wsgidav_server() -> Iterator[WebDavServer]:
    yield from _wsgidav("wsgidav")


@pytest.fixture(scope="session")
def careless_wsgidav_server() -> Iterator[WebDavServer]:
    """WsgiDAV ignoring If-Match and Depth (a server that would delete a collection a file became)."""
    yield from _wsgidav("wsgidav-careless", careless=True)


@pytest.fixture(scope="session")
def token_wsgidav_server() -> Iterator[WebDavServer]:
    """WsgiDAV over TLS (a test CA's host certificate) that requires a bearer token."""
    yield from _wsgidav("wsgidav-token", tls=True, token=uuid.uuid4().hex)


@pytest.fixture(scope="session")
def xrdhttp_server() -> Iterator[tuple[XrootdServer, WebDavServer]]:
    proc, server = start_xrootd(server_dir("xrdhttp"), f"xrd.protocol XrdHttp:{XRDHTTP_PORT} libXrdHttp.so\n")
    forward = NamespaceForward(server.pid, XRDHTTP_PORT)
    url = f"http://127.0.0.1:{forward.port}"
    _wait(url + "/store/", proc)
    yield server, WebDavServer(server.data, f"dav://127.0.0.1:{forward.port}")
    forward.close()
    proc.stop()
