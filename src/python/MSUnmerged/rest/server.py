"""The HTTP servers of the REST service (its port and the metrics port): cheroot, hardened against slow and
greedy clients (docs/rest.md, "Limits of the server").

- A request's line, headers and body must all arrive within `rest.request_deadline_s`, however steadily
  the bytes trickle in (a socket timeout alone restarts with every byte): else 408 and the connection
  is closed, freeing its thread.
- At most `rest.max_connections_per_client` open connections per client address: more are answered 503
  at once, without a request thread, so one client never holds every thread.
- A body the application did not read (a refused trigger, a GET with a body) is never drained: the
  connection is closed after the answer.
- At most `rest.thread_pool` idle keep-alive connections are kept open (cheroot's default: 10).
- Request line and headers together are at most MAX_HEADER_BYTES (413/414); bodies at most
  `rest.max_body_bytes` (413 from Content-Length before the application runs).
The servers speak plain HTTP: TLS ends at the CMSWEB front end.
"""
from __future__ import annotations

import collections
import logging
import socket
import threading
import time
from typing import Any, Callable, Optional

import cheroot.makefile
import cheroot.server
import cheroot.wsgi

from MSUnmerged.config import RestConfig

log = logging.getLogger("MSUnmerged.rest.server")

MAX_HEADER_BYTES = 256 * 1024  # the front end's cms-authz-* roles of a user with many roles fit many times
LISTEN_BACKLOG = 128
REFUSAL_LOG_EVERY_S = 60.0  # one warning per client address and minute, however many connections are refused
# The request headers as sent (lower-case names, raw byte values), in the WSGI environ under this key.
RAW_HEADERS = "msunmerged.raw_headers"


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


class _DeadlineIO(socket.SocketIO):
    """A connection's raw reader: while a request is read, no read waits past the request's deadline."""

    def __init__(self, sock: socket.socket, mode: str) -> None:
        super().__init__(sock, mode)
        self.idle_s = sock.gettimeout()  # the server's socket timeout, set on accepting
        self.deadline: Optional[float] = None  # monotonic time; None between requests

    def readinto(self, b: Any) -> Optional[int]:
        if self.deadline is None:
            return super().readinto(b)
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise socket.timeout("timed out")  # cheroot's own timeout: it answers 408 and closes
        self._sock.settimeout(left if self.idle_s is None else min(self.idle_s, left))
        try:
            return super().readinto(b)
        finally:
            self._sock.settimeout(self.idle_s)  # writes keep the plain socket timeout


class _DeadlineReader(cheroot.makefile.StreamReader):
    """cheroot's buffered socket reader over a _DeadlineIO."""

    def __init__(self, sock: socket.socket, mode: str, bufsize: int) -> None:
        cheroot.makefile.io.BufferedReader.__init__(self, _DeadlineIO(sock, mode), bufsize)
        self.bytes_read = 0


def _makefile(sock: socket.socket, mode: str = "r", bufsize: int = cheroot.makefile.io.DEFAULT_BUFFER_SIZE) -> Any:
    return _DeadlineReader(sock, mode, bufsize) if "r" in mode else cheroot.makefile.MakeFile(sock, mode, bufsize)


def _body_consumed(rfile: Any) -> bool:
    """Whether the request's body was read to its end (a Content-Length or a chunked body)."""
    return getattr(rfile, "remaining", 0) <= 0 and getattr(rfile, "closed", True) is not False


class HeadWithBody:
    """A connection's writer that sends a response's headers with the first piece of its body: one send (one
    system call, one segment for a small answer) instead of two. cheroot writes the headers as soon as the body's
    first piece is there, so nothing waits longer; what is held is sent at the latest when the response ends."""

    def __init__(self, raw: Any) -> None:
        self.raw = raw
        self._hold = False  # the next write is the headers: keep them
        self._held: Optional[bytes] = None

    def hold_next(self) -> None:
        self._hold = True

    def write(self, data: bytes) -> None:
        if self._hold:
            self._hold = False
            self._held = bytes(data)
            return
        if self._held is not None:
            data, self._held = self._held + data, None
        self.raw.write(data)

    def release(self) -> None:
        """Send what is held (headers of an answer without a body, or of one that failed)."""
        self._hold = False
        if self._held is not None:
            held, self._held = self._held, None
            self.raw.write(held)

    def __getattr__(self, name: str) -> Any:  # close, flush, bytes_written, ... of cheroot's writer
        return getattr(self.raw, name)


class GuardedRequest(cheroot.server.HTTPRequest):
    """As CherryPy's own request (absolute request URIs allowed), never draining an unread body; the headers
    go out with the body's first piece (HeadWithBody)."""

    def __init__(self, server: cheroot.server.HTTPServer, conn: cheroot.server.HTTPConnection) -> None:
        super().__init__(server, conn, proxy_mode=True)

    def send_headers(self) -> None:
        if not _body_consumed(self.rfile):
            self.close_connection = True  # cheroot would read the rest first: a slow body would hold the thread
        wfile = self.conn.wfile
        if isinstance(wfile, HeadWithBody):
            wfile.hold_next()
        super().send_headers()

    def respond(self) -> None:
        try:
            super().respond()
        finally:
            wfile = self.conn.wfile
            if isinstance(wfile, HeadWithBody):
                wfile.release()


class GuardedConnection(cheroot.server.HTTPConnection):
    """One client connection: each request is read within the deadline; counted per client address."""

    RequestHandlerClass = GuardedRequest
    counted = False  # whether the server counts it among its client's open connections

    def __init__(self, server: "GuardedServer", sock: socket.socket, makefile: Callable[..., Any] = _makefile) -> None:
        super().__init__(server, sock, _makefile)  # plain HTTP only: the TLS makefile is never given here
        self.wfile = HeadWithBody(self.wfile)

    def communicate(self) -> bool:
        raw = self.rfile.raw
        raw.deadline = time.monotonic() + self.server.request_deadline_s
        try:
            return bool(super().communicate())
        finally:
            raw.deadline = None

    def close(self) -> None:
        self.server.release(self)
        super().close()


class GuardedServer(cheroot.wsgi.Server):
    """cheroot's WSGI server with the request deadline, the per-client cap and the limits above."""

    wsgi_version = GATEWAY
    ConnectionClass = GuardedConnection

    def __init__(self, bind: tuple[str, int], app: Any, rest: RestConfig) -> None:
        super().__init__(bind, app, numthreads=rest.thread_pool, max=rest.thread_pool,
                         request_queue_size=LISTEN_BACKLOG, timeout=rest.socket_timeout_s,
                         accepted_queue_size=rest.queue_size, accepted_queue_timeout=rest.socket_timeout_s)
        self.max_request_header_size = MAX_HEADER_BYTES
        self.max_request_body_size = rest.max_body_bytes
        # Idle keep-alive connections kept open (cheroot's default, 10, closed the 11th client's connection after
        # each answer: 20 clients reconnected for many requests). They hold no thread, only a socket until
        # rest.socket_timeout_s, and each client address has at most rest.max_connections_per_client.
        self.keep_alive_conn_limit = max(10, rest.thread_pool)
        self.request_deadline_s = rest.request_deadline_s
        self.per_client = rest.max_connections_per_client
        self.refused = 0  # connections answered 503 by the per-client cap
        self._open: collections.Counter[str] = collections.Counter()
        self._warned: dict[str, float] = {}
        self._lock = threading.Lock()

    def process_conn(self, conn: GuardedConnection) -> None:
        """A new connection beyond its client's cap is answered 503 by cheroot's own thread for that, and
        closed; a counted one (new, or kept alive and readable again) goes to the request threads."""
        if not conn.counted:
            addr = str(conn.remote_addr)
            with self._lock:
                full = self._open[addr] >= self.per_client
                if full:
                    self.refused += 1
                    warn = time.monotonic() - self._warned.get(addr, -REFUSAL_LOG_EVERY_S) >= REFUSAL_LOG_EVERY_S
                    if warn:
                        self._warned[addr] = time.monotonic()
                else:
                    self._open[addr] += 1
                    conn.counted = True
            if full:
                if warn:
                    log.warning("connections from %s refused (503): %d open, the most one client may have "
                                "(rest.max_connections_per_client)", addr, self.per_client)
                self._unservicable_conns.put(conn)
                return
        super().process_conn(conn)

    def release(self, conn: GuardedConnection) -> None:
        """The connection is closed: it no longer counts for its client (idempotent)."""
        with self._lock:
            if conn.counted:
                conn.counted = False
                addr = str(conn.remote_addr)
                self._open[addr] -= 1
                if self._open[addr] <= 0:
                    del self._open[addr]

    def error_log(self, msg: str = "", level: int = logging.INFO, traceback: bool = False) -> None:
        log.log(level, "%s", msg, exc_info=traceback)
