"""What the REST server does per request beyond the answer: the access log follows the configured level, the
headers go out with the body's first piece, and idle keep-alive connections are kept for many clients."""
from __future__ import annotations

import http.client
import logging
import threading
from typing import Any, Iterator

import pytest

from MSUnmerged.config import RestConfig
from MSUnmerged.rest.server import GuardedServer, HeadWithBody

from servers import free_port


def _get(url: str, path: str, method: str = "GET") -> tuple[int, bytes, Any]:
    host = url.split("//", 1)[1].split("/", 1)[0]
    base = "/" + url.split("//", 1)[1].split("/", 1)[1]
    conn = http.client.HTTPConnection(host, timeout=30)
    try:
        conn.request(method, f"{base}/{path}")
        resp = conn.getresponse()
        return resp.status, resp.read(), resp.headers
    finally:
        conn.close()


def _access_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name.startswith("cherrypy.access")]


@pytest.mark.integration
def test_access_log_follows_the_level(rest_app: Any, caplog: pytest.LogCaptureFixture) -> None:
    """Before: CherryPy's access logger was fixed at INFO, so a service at WARNING still wrote (and built, a uuid4
    included) one INFO line per request."""
    with caplog.at_level(logging.WARNING):
        assert _get(rest_app.url, "data/health?probe=live")[0] == 200
    assert _access_lines(caplog) == []
    caplog.clear()
    with caplog.at_level(logging.INFO):
        assert _get(rest_app.url, "data/health?probe=live")[0] == 200
    (line,) = _access_lines(caplog)
    assert '"GET /ms-unmerged/data/health?probe=live HTTP/1.1" 200' in line


@pytest.mark.integration
@pytest.mark.parametrize("method", ["GET", "HEAD"])
def test_answers_whole_with_and_without_a_body(rest_app: Any, method: str) -> None:
    status, body, headers = _get(rest_app.url, "data/health?probe=live", method)
    assert status == 200 and headers["Content-Type"] == "application/json"
    assert body == (b'{"result":[{"status":"ok"}]}' if method == "GET" else b"")
    status, body, headers = _get(rest_app.url, "data/nothing")
    assert status == 404 and body.startswith(b'{"result": [], "error": "404 Not Found')


class _Recorder:
    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.bytes_written = 0

    def write(self, data: bytes) -> None:
        self.writes.append(bytes(data))


def test_headers_go_with_the_first_piece_of_body() -> None:
    raw = _Recorder()
    out = HeadWithBody(raw)
    out.hold_next()
    out.write(b"HTTP/1.1 200 OK\r\n\r\n")
    assert raw.writes == []
    out.write(b"{first}")
    out.write(b"{second}")
    out.release()  # nothing held: nothing more
    assert raw.writes == [b"HTTP/1.1 200 OK\r\n\r\n{first}", b"{second}"]
    assert out.bytes_written == 0  # the rest of cheroot's writer is reached through


def test_headers_of_an_answer_without_body_are_sent_at_its_end() -> None:
    raw = _Recorder()
    out = HeadWithBody(raw)
    out.write(b"unheld")
    out.hold_next()
    out.write(b"HTTP/1.1 204 No Content\r\n\r\n")
    out.release()
    out.release()
    assert raw.writes == [b"unheld", b"HTTP/1.1 204 No Content\r\n\r\n"]


@pytest.fixture()
def plain_server() -> Iterator[tuple[int, RestConfig]]:
    """A GuardedServer with the shipped thread pool over a trivial WSGI app."""
    rest = RestConfig()
    rest.max_connections_per_client = 20

    def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "2")])
        return [b"ok"]

    port = free_port()
    server = GuardedServer(("127.0.0.1", port), app, rest)
    server.prepare()
    thread = threading.Thread(target=server.serve, daemon=True)
    thread.start()
    try:
        yield port, rest
    finally:
        server.stop()
        thread.join(10)


def test_many_idle_keep_alive_connections_stay_open(plain_server: tuple[int, RestConfig]) -> None:
    """Before: cheroot kept at most 10 idle keep-alive connections and told the 11th client on to close after its
    answer, so 20 clients reconnected for many of their requests."""
    port, rest = plain_server
    conns = [http.client.HTTPConnection("127.0.0.1", port, timeout=30) for _ in range(16)]
    try:
        for _ in range(2):
            for conn in conns:
                conn.request("GET", "/")
                resp = conn.getresponse()
                assert resp.read() == b"ok" and resp.status == 200
                assert not resp.will_close and resp.headers.get("Connection", "").lower() != "close"
    finally:
        for conn in conns:
            conn.close()
