"""A real HTTP server on 127.0.0.1 playing ConMon (`stats`, `files`) and WMStats (`protectedlfns`),
with switchable misbehaviour. Used by the source, service and end-to-end tests.

    with FakeCMSWeb.from_fixtures(wmcore_dir) as web:
        web.add_generated_rse("T2_US_Big", SampleSpec(files=2_000_000))
        web.fault("files", status=503, times=2)
        ConMonConfig(url=web.conmon_url) ...

Dumps are produced on the fly from an LFN factory, so a dump of any size costs no memory here.
"""
from __future__ import annotations

import json
import ssl
import threading
import time
import urllib.parse
import zlib
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Optional

from MSUnmerged import sample

FIXTURE_RSE = "T2_CH_CERN"  # the RSE that serves fixtures/wmcore/conmon-unmerged-files.json
ENDPOINTS = ("stats", "files", "protectedlfns", "t0/protectedlfns")
LINES_PER_WRITE = 2000


@dataclass
class Fault:
    """Misbehaviour of one endpoint; `times` requests are affected (None: all of them)."""

    status: int = 0  # answer this HTTP status instead
    delay_s: float = 0.0  # wait before the headers
    stall_s: float = 0.0  # wait after the first body bytes
    cut_after: Optional[int] = None  # close the connection after this many body bytes
    corrupt_tail: bool = False  # flip the last bytes of the body (gzip CRC / size)
    body: Optional[bytes] = None  # answer 200 with this body instead
    times: Optional[int] = None


class FakeCMSWeb:
    """ConMon under /rucioconmon/unmerged, WMStats under /wmstatsserver, Tier-0 under /t0wmstatsserver."""

    def __init__(self, tls: Optional[ssl.SSLContext] = None) -> None:
        """`tls`: serve HTTPS with this server context (as CMSWEB's front end: client certificates required)."""
        self.tls = tls
        self.peers: list[str] = []  # HTTPS: the subject of each request's client certificate
        self.stats: dict[str, dict[str, Any]] = {}
        self.dumps: dict[str, Callable[[], Iterable[str]]] = {}
        self.sized: set[str] = set()  # RSEs whose dump is a list: sent with Content-Length
        self.protected: list[str] = []
        self.t0_protected: list[str] = []
        self.faults: dict[str, Fault] = {}
        self.requests: list[tuple[str, dict[str, str], dict[str, str]]] = []  # (endpoint, query, headers)
        self._lock = threading.Lock()
        self._server: Optional[ThreadingHTTPServer] = None
        self._thread: Optional[threading.Thread] = None

    # -- content ------------------------------------------------------------------------------

    @classmethod
    def from_fixtures(cls, wmcore: Path, now: Optional[float] = None,
                      tls: Optional[ssl.SSLContext] = None) -> "FakeCMSWeb":
        """The real samples as they are: stats of 47 RSEs, the protected list (also as Tier-0's
        list, reduced to its first 10 bases), and the JSON dump as FIXTURE_RSE with a fresh scan."""
        web = cls(tls)
        web.stats = json.loads((wmcore / "conmon-stats.json").read_text())
        web.protected = json.loads((wmcore / "protectedLFNs.json").read_text())
        web.t0_protected = web.protected[:10]
        web.add_rse(FIXTURE_RSE, json.loads((wmcore / "conmon-unmerged-files.json").read_text()), end_time=now)
        return web

    def add_rse(self, rse: str, lfns: Iterable[str] | Callable[[], Iterable[str]], files: Optional[int] = None,
                end_time: Optional[float] = None, start_time: Optional[float] = None) -> None:
        """Serve a dump (a list, or a factory called per request) and a finished scan of it (sample.stats_for)."""
        if callable(lfns):
            factory = lfns
        else:
            lfns = list(lfns)
            factory = lambda: lfns  # noqa: E731
            files = len(lfns) if files is None else files
            self.sized.add(rse)
        self.dumps[rse] = factory
        self.stats.update(sample.stats_for(rse, files or 0, end_time, start_time))

    def add_generated_rse(self, rse: str, spec: sample.SampleSpec) -> sample.Sample:
        """A dump of `spec.files` generated lines (MSUnmerged.sample), never held in memory."""
        smp = sample.make_sample(spec)
        self.add_rse(rse, lambda: sample.iter_lfns(spec, smp), files=spec.files)
        return smp

    def fault(self, endpoint: str, **kwargs: Any) -> Fault:
        """Make `endpoint` (one of ENDPOINTS) misbehave; see Fault."""
        if endpoint not in ENDPOINTS:
            raise ValueError(f"unknown endpoint {endpoint!r}; one of {ENDPOINTS}")
        self.faults[endpoint] = Fault(**kwargs)
        return self.faults[endpoint]

    def clear_faults(self) -> None:
        self.faults.clear()

    def _take_fault(self, endpoint: str) -> Fault:
        with self._lock:
            fault = self.faults.get(endpoint)
            if fault is None:
                return Fault()
            if fault.times is not None:
                fault.times -= 1
                if fault.times <= 0:
                    del self.faults[endpoint]
            return fault

    # -- server -------------------------------------------------------------------------------

    @property
    def base(self) -> str:
        assert self._server is not None, "not started"
        scheme = "https" if self.tls else "http"
        return f"{scheme}://127.0.0.1:{self._server.server_address[1]}"

    @property
    def conmon_url(self) -> str:
        return f"{self.base}/rucioconmon/unmerged"

    @property
    def wmstats_url(self) -> str:
        return f"{self.base}/wmstatsserver"

    @property
    def t0_url(self) -> str:
        return f"{self.base}/t0wmstatsserver"

    def start(self) -> "FakeCMSWeb":
        handler = type("Handler", (_Handler,), {"web": self})
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        if self.tls is not None:
            # The handshake runs in the request's thread: a refused client does not stall the others.
            self._server.socket = self.tls.wrap_socket(self._server.socket, server_side=True,
                                                       do_handshake_on_connect=False)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="FakeCMSWeb", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> "FakeCMSWeb":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


_ROUTES = {"/rucioconmon/unmerged/stats": "stats", "/rucioconmon/unmerged/files": "files",
           "/wmstatsserver/data/protectedlfns": "protectedlfns",
           "/t0wmstatsserver/data/protectedlfns": "t0/protectedlfns"}


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # chunked bodies for streamed dumps
    web: FakeCMSWeb

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet test output
        pass

    def setup(self) -> None:
        if isinstance(self.request, ssl.SSLSocket):
            self.request.do_handshake()  # a refused client certificate ends the connection here
        super().setup()

    def do_GET(self) -> None:  # noqa: N802 - http.server naming
        if isinstance(self.connection, ssl.SSLSocket):
            subject = dict(x[0] for x in (self.connection.getpeercert() or {}).get("subject", ()))
            self.web.peers.append(subject.get("commonName", ""))
        url = urllib.parse.urlsplit(self.path)
        query = dict(urllib.parse.parse_qsl(url.query))
        endpoint = _ROUTES.get(url.path.rstrip("/"))
        self.web.requests.append((endpoint or url.path, query, dict(self.headers)))
        if endpoint is None:
            return self._send_whole(404, b"not found", "text/plain")
        fault = self.web._take_fault(endpoint)
        if fault.delay_s:
            time.sleep(fault.delay_s)
        if fault.status:
            return self._send_whole(fault.status, f"fault {fault.status}".encode(), "text/plain")
        if fault.body is not None:
            return self._send(200, [fault.body], "application/json", fault, len(fault.body))
        if endpoint == "stats":
            body = json.dumps(self.web.stats).encode()
            return self._send(200, [body], "application/json", fault, len(body))
        if endpoint.endswith("protectedlfns"):
            lfns = self.web.t0_protected if endpoint.startswith("t0") else self.web.protected
            body = json.dumps({"result": lfns}).encode()
            return self._send(200, [body], "application/json", fault, len(body))
        self._send_dump(query, fault)

    def _send_dump(self, query: dict[str, str], fault: Fault) -> None:
        rse = query.get("rse", "")
        factory = self.web.dumps.get(rse)
        if factory is None:
            return self._send_whole(404, b"no dump for this RSE", "text/plain")
        fmt = query.get("format", "raw")
        lfns = _filtered(factory(), query.get("include", ""), query.get("exclude", ""))
        formats = {"text": (_text, "text/plain", ""), "json": (_json, "application/json", ""),
                   "raw": (lambda x: _gzip(_text(x)), "application/octet-stream", "gzip")}
        if fmt not in formats:
            return self._send_whole(400, f"unknown format {fmt}".encode(), "text/plain")
        encode, ctype, encoding = formats[fmt]
        blocks = encode(lfns)
        if rse in self.web.sized:
            body = b"".join(blocks)
            return self._send(200, [body], ctype, fault, len(body), encoding)
        self._send(200, blocks, ctype, fault, encoding=encoding)

    def _send_whole(self, status: int, body: bytes, ctype: str) -> None:
        self._send(status, [body], ctype, Fault(), len(body))

    def _send(self, status: int, blocks: Iterable[bytes], ctype: str, fault: Fault,
              length: Optional[int] = None, encoding: str = "") -> None:
        """Send blocks with Content-Length when known, else chunked; apply cut/stall/corruption."""
        if fault.corrupt_tail:
            blocks = _corrupt_tail(blocks)
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        if encoding:
            self.send_header("Content-Encoding", encoding)
        chunked = length is None
        self.send_header("Transfer-Encoding" if chunked else "Content-Length", "chunked" if chunked else str(length))
        self.end_headers()
        sent = 0
        try:
            for block in blocks:
                if fault.cut_after is not None and sent + len(block) >= fault.cut_after:
                    self._write(block[:fault.cut_after - sent], chunked)
                    self.close_connection = True  # no final chunk, or fewer bytes than announced
                    return
                self._write(block, chunked)
                if fault.stall_s and sent == 0:
                    time.sleep(fault.stall_s)
                sent += len(block)
            if chunked:
                self.wfile.write(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):  # the client gave up (timeout test)
            self.close_connection = True

    def _write(self, block: bytes, chunked: bool) -> None:
        if not block:
            return
        self.wfile.write(b"%x\r\n%s\r\n" % (len(block), block) if chunked else block)
        self.wfile.flush()


def _filtered(lfns: Iterable[str], include: str, exclude: str) -> Iterator[str]:
    inc = tuple(p for p in include.split(",") if p)
    exc = tuple(p for p in exclude.split(",") if p)
    for lfn in lfns:
        if (not inc or lfn.startswith(inc)) and not (exc and lfn.startswith(exc)):
            yield lfn


def _batches(lfns: Iterable[str]) -> Iterator[list[str]]:
    batch: list[str] = []
    for lfn in lfns:
        batch.append(lfn)
        if len(batch) >= LINES_PER_WRITE:
            yield batch
            batch = []
    if batch:
        yield batch


def _text(lfns: Iterable[str]) -> Iterator[bytes]:
    for batch in _batches(lfns):
        yield ("\n".join(batch) + "\n").encode()


def _json(lfns: Iterable[str]) -> Iterator[bytes]:
    yield b"["
    sep = ""
    for batch in _batches(lfns):
        yield (sep + ",".join(json.dumps(lfn) for lfn in batch)).encode()
        sep = ","
    yield b"]"


def _gzip(blocks: Iterable[bytes]) -> Iterator[bytes]:
    comp = zlib.compressobj(6, zlib.DEFLATED, 31)  # wbits 31: gzip header and trailer
    for block in blocks:
        out = comp.compress(block)
        if out:
            yield out
    yield comp.flush()


def _corrupt_tail(blocks: Iterable[bytes]) -> Iterator[bytes]:
    """Hold back one block so the last one can be altered (for gzip: the CRC32 and size)."""
    previous: Optional[bytes] = None
    for block in blocks:
        if previous is not None:
            yield previous
        previous = block
    if previous:
        tail = bytes(b ^ 0xFF for b in previous[-8:])
        yield previous[:-8] + tail
