"""The HTTP servers of the REST service (its port and the metrics port): cheroot, hardened against slow and
greedy clients (docs/rest.md, "Limits of the server" and "Limits per caller").

- A request's line and headers are gathered by the connection manager's thread, without waiting, as they
  arrive: a request takes a request thread only once its headers are complete, so slow clients hold no
  thread however many addresses they come from.
- A request's line, headers and body must all arrive within `rest.request_deadline_s`, however steadily
  the bytes trickle in (a socket timeout alone restarts with every byte): else 408 and the connection
  is closed.
- Each request's caller (rest/limits.py: the verified front-end login, else the address) has its share of
  requests and streams in progress and of request starts; over it, 429 with Retry-After, answered by the
  connection manager's thread without a request thread.
- At most `rest.max_connections_per_client` open connections per client address: more are answered 429
  at once, without a request thread.
- A body the application did not read (a refused trigger, a GET with a body) is never drained: the
  connection is closed after the answer.
- At most `rest.thread_pool` idle keep-alive connections are kept open (cheroot's default: 10).
- Request line and headers together are at most MAX_HEADER_BYTES (413/414); bodies at most
  `rest.max_body_bytes` (413 from Content-Length before the application runs).
The servers speak plain HTTP: TLS ends at the CMSWEB front end.
"""
from __future__ import annotations

import collections
import json
import logging
import selectors
import socket
import threading
import time
from typing import Any, Callable, Optional

import cheroot.makefile
import cheroot.server
import cheroot.wsgi

from MSUnmerged.config import RestConfig
from MSUnmerged.rest.auth import KeyFile
from MSUnmerged.rest.limits import CALLER, CallerLimits, Refusal, Slot, caller_of, is_stream

log = logging.getLogger("MSUnmerged.rest.server")

MAX_HEADER_BYTES = 256 * 1024  # the front end's cms-authz-* roles of a user with many roles fit many times
LISTEN_BACKLOG = 128
REFUSAL_LOG_EVERY_S = 60.0  # one warning per caller (or address) and minute, however many requests are refused
HEAD_END = b"\r\n\r\n"
READ_AHEAD = 65536  # bytes read at once while gathering a request's headers
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
        slot = self.req.conn.slot
        env[CALLER] = slot.caller if slot is not None else f"addr:{self.req.conn.remote_addr}"
        return env


GATEWAY = ("msunmerged-raw-headers", 1, 0)
cheroot.wsgi.wsgi_gateways[GATEWAY] = RawHeaderGateway


class _DeadlineIO(socket.SocketIO):
    """A connection's raw reader: first what was read ahead (`pending`, a request's headers gathered before it
    got a thread); while a request is read, no read waits past the request's deadline."""

    def __init__(self, sock: socket.socket, mode: str) -> None:
        super().__init__(sock, mode)
        self.idle_s = sock.gettimeout()  # the server's socket timeout, set on accepting
        self.deadline: Optional[float] = None  # monotonic time; None between requests
        self.pending = bytearray()

    def read_ahead(self) -> Optional[bytes]:
        """Whatever the socket holds now, without waiting (b"" when nothing; None when the peer closed)."""
        try:
            self._sock.settimeout(0.0)
            data = self._sock.recv(READ_AHEAD)
        except BlockingIOError:
            return b""
        except OSError:
            return None
        finally:
            self._sock.settimeout(self.idle_s)
        if not data:
            return None
        self.pending += data
        return data

    def readinto(self, b: Any) -> Optional[int]:
        if self.pending:
            n = min(len(b), len(self.pending))
            b[:n] = self.pending[:n]
            del self.pending[:n]
            return n
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

    def buffered(self) -> bytes:
        """What was read from the socket and not yet by the request: a pipelined request's start included."""
        return bytes(self._read_buf[self._read_pos:]) + bytes(self.raw.pending)

    def has_data(self) -> bool:
        return bool(super().has_data() or self.raw.pending)


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
    """One client connection: each request is read within the deadline; counted per client address, its request
    in progress per caller."""

    RequestHandlerClass = GuardedRequest
    counted = False  # whether the server counts it among its client's open connections
    head_started: Optional[float] = None  # monotonic time the request's first bytes were awaited
    slot: Optional[Slot] = None  # its request in progress, counted for its caller

    def __init__(self, server: "GuardedServer", sock: socket.socket, makefile: Callable[..., Any] = _makefile) -> None:
        super().__init__(server, sock, _makefile)  # plain HTTP only: the TLS makefile is never given here
        self.wfile = HeadWithBody(self.wfile)

    def communicate(self) -> bool:
        raw = self.rfile.raw
        raw.deadline = (self.head_started or time.monotonic()) + self.server.request_deadline_s
        try:
            return bool(super().communicate())
        finally:
            raw.deadline = self.head_started = None
            self.server.done(self)

    def close(self) -> None:
        self.server.done(self)
        self.server.release(self)
        super().close()


class GuardedServer(cheroot.wsgi.Server):
    """cheroot's WSGI server with the request deadline, headers gathered before a thread is taken, the limits per
    caller and per client address, and the limits above."""

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
        self.keyfile = KeyFile(rest.hmac_key_file)
        self.callers = CallerLimits(rest)
        self.refused = 0  # connections or requests answered 429 (per address or per caller)
        self._open: collections.Counter[str] = collections.Counter()
        self._warned: dict[str, float] = {}
        self._lock = threading.Lock()

    def process_conn(self, conn: GuardedConnection) -> None:
        """A connection beyond its address's cap is answered 429 and closed; a request goes to the request threads
        once its headers are all here (until then the connection waits in the connection manager's selector,
        holding no thread) and only within its caller's share (else 429)."""
        if not conn.counted:
            addr = str(conn.remote_addr)
            with self._lock:
                full = self._open[addr] >= self.per_client
                if not full:
                    self._open[addr] += 1
                    conn.counted = True
            if full:
                self._refuse(conn, f"addr:{addr}", Refusal(f"{self.per_client} connections from this address open "
                                                           "(rest.max_connections_per_client)", 1))
                return
        head = self._gather(conn)
        if head is None:
            return
        request_line, _, header_block = head.partition(b"\r\n")
        headers: dict[str, bytes] = {}
        for line in header_block.split(b"\r\n"):
            name, sep, value = line.partition(b":")
            if sep:
                headers[name.strip().decode("latin-1").lower()] = value.strip()
        caller = caller_of(headers, str(conn.remote_addr), self.keyfile)
        target = request_line.split(b" ")[1] if request_line.count(b" ") >= 2 else b""
        admitted = self.callers.admit(caller, is_stream(target))
        if isinstance(admitted, Refusal):
            self._refuse(conn, caller, admitted)
            return
        conn.slot = admitted
        super().process_conn(conn)

    def _gather(self, conn: GuardedConnection) -> Optional[bytes]:
        """The request's line and headers once they are all here; else None, the connection waiting for more in the
        selector (or answered 408 past the deadline, or closed by its peer). A head past MAX_HEADER_BYTES, or one
        that is not HTTP's CRLF, goes to a thread at once, for cheroot's own answer (413, 414, 400)."""
        raw = conn.rfile.raw
        if conn.head_started is None:
            conn.head_started = time.monotonic()
        peer_closed = raw.read_ahead() is None
        data = conn.rfile.buffered().lstrip(b"\r\n")  # HTTP allows empty lines before a request
        end = data.find(HEAD_END)
        first_line_end = data.find(b"\n")
        if end >= 0 or len(data) > MAX_HEADER_BYTES or (first_line_end >= 0 and data[first_line_end - 1:first_line_end]
                                                        != b"\r"):
            return data if end < 0 else data[:end]
        if peer_closed:
            conn.close()  # without a whole request
            return None
        if time.monotonic() - conn.head_started > self.request_deadline_s:
            self._answer(conn, "408 Request Timeout", {}, "the request's headers did not arrive in time "
                         "(rest.request_deadline_s)")
            return None
        conn.last_used = time.time()  # the manager drops it after rest.socket_timeout_s of silence
        self._connections._selector.register(conn.socket.fileno(), selectors.EVENT_READ, data=conn)
        return None

    def _refuse(self, conn: GuardedConnection, caller: str, refusal: Refusal) -> None:
        """429 with Retry-After, and the connection closed; a warning per caller and minute."""
        now = time.monotonic()
        with self._lock:
            self.refused += 1
            warn = now - self._warned.get(caller, -REFUSAL_LOG_EVERY_S) >= REFUSAL_LOG_EVERY_S
            if warn:
                if len(self._warned) > 10_000:
                    self._warned.clear()
                self._warned[caller] = now
        if warn:
            log.warning("requests of %s refused (429): %s", caller, refusal.reason)
        self._answer(conn, "429 Too Many Requests", {"Retry-After": str(refusal.retry_after)},
                     f"too many requests: {refusal.reason}; retry in {refusal.retry_after} s")

    def _answer(self, conn: GuardedConnection, status: str, headers: dict[str, str], error: str) -> None:
        """A short JSON error answer, written without waiting (it fits any socket buffer), then the connection
        closed: from the connection manager's thread, no request thread is taken."""
        body = json.dumps({"result": [], "error": error}).encode()
        head = [f"HTTP/1.1 {status}", "Content-Type: application/json", f"Content-Length: {len(body)}",
                "Connection: close", *(f"{k}: {v}" for k, v in headers.items())]
        try:
            conn.socket.setblocking(False)
            conn.socket.send(("\r\n".join(head) + "\r\n\r\n").encode() + body)
        except OSError:
            pass  # the client is gone or not reading: closed all the same
        conn.close()

    def done(self, conn: GuardedConnection) -> None:
        """The connection's request ended: it no longer counts for its caller (idempotent)."""
        slot, conn.slot = conn.slot, None
        if slot is not None:
            self.callers.done(slot)

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
