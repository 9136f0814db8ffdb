"""A real xrootd server (Debian xrootd-server) on 127.0.0.1:1094 inside a private network namespace.

xrootd has no bind-address option and refuses to run as root, so it runs as `nobody` in a network
namespace of its own; its clients (xrdfs, the worker, gfal2) join that namespace with nsenter.

`token_xrootd` is a second one that authenticates with WLCG tokens only (ztn, which needs TLS: a server
certificate of a test CA) and authorizes with the SciTokens plugin: a token's storage.* scopes decide.
`gsi_xrootd` authenticates with X.509 (GSI) only: a host certificate and a user's RFC proxy of a test CA
(RSA keys: xrootd 5.5's GSI cannot use EC keys).

Clients that cannot join the namespace (a batch job in the HTCondor pool) reach a server through
`NamespaceForward`: a loopback port of the host relaying to the server's port in its namespace.
"""
from __future__ import annotations

import ctypes
import os
import pwd
import queue
import shutil
import socket
import subprocess
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Mapping, Optional, Sequence, TypeVar


from servers import Process, run_script, server_dir, server_fixture
from servers.fault_proxy import pipe
from servers.testca import Issued, TestCA
from servers.tokens import AUDIENCE, TokenIssuer

PORT = 1094
T = TypeVar("T")


@dataclass
class XrootdServer:
    pid: int
    data: Path  # oss.localroot: root://127.0.0.1:1094//store/... is <data>/store/...
    url: str = f"root://127.0.0.1:{PORT}"
    client_env: Optional[dict[str, str]] = None  # what its clients need besides a credential (trusted CAs)

    def run(self, argv: Sequence[str], env: Optional[Mapping[str, str]] = None, timeout: float = 120,
            **kw: object) -> subprocess.CompletedProcess:
        """Run a client inside the server's network namespace."""
        return subprocess.run(["nsenter", "-t", str(self.pid), "-n", *argv], env=dict(env or os.environ),
                              timeout=timeout, **kw)  # type: ignore[call-overload]

    def popen(self, argv: Sequence[str], **kw: object) -> subprocess.Popen:
        return subprocess.Popen(["nsenter", "-t", str(self.pid), "-n", *argv], **kw)  # type: ignore[call-overload]

    def put(self, path: str, content: bytes = b"x") -> Path:
        """Create a file in the server's storage, owned by the server's user."""
        target = self.data / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content)
        nobody = pwd.getpwnam("nobody")
        for p in [target, *target.relative_to(self.data).parents]:
            os.chown(self.data / p, nobody.pw_uid, nobody.pw_gid)
        return target


CLONE_NEWNET = 0x40000000


class NamespaceForward:
    """A port on the host's 127.0.0.1 relaying each connection to 127.0.0.1:`port` inside the network namespace of
    process `pid`. The upstream connections are opened by one thread that entered that namespace (setns acts on
    the calling thread only); the bytes are relayed as they are (TLS inside the xroot protocol included)."""

    def __init__(self, pid: int, port: int = PORT) -> None:
        self.port_inside = port
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(32)
        self.port = self.listener.getsockname()[1]
        self._pending: "queue.Queue[Optional[socket.socket]]" = queue.Queue()
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._error: Optional[OSError] = None
        threading.Thread(target=self._connector, args=(pid,), daemon=True, name="netns-connector").start()
        self._ready.wait(10)
        if self._error is not None:
            raise self._error
        threading.Thread(target=self._accept, daemon=True, name="netns-accept").start()

    def _connector(self, pid: int) -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        fd = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY)
        try:
            if libc.setns(fd, CLONE_NEWNET) != 0:
                self._error = OSError(ctypes.get_errno(), f"setns into the network namespace of {pid}")
        finally:
            os.close(fd)
            self._ready.set()
        while self._error is None:
            client = self._pending.get()
            if client is None:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.port_inside), timeout=10)
                upstream.settimeout(None)
            except OSError:
                client.close()
                continue
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=pipe, args=(a, b), daemon=True).start()

    def _accept(self) -> None:
        self.listener.settimeout(0.2)
        while not self._stop.is_set():
            try:
                self._pending.put(self.listener.accept()[0])
            except OSError:
                continue

    def close(self) -> None:
        self._stop.set()
        self._pending.put(None)
        self.listener.close()


def start_xrootd(base: Path, extra_config: str = "", env: Optional[Mapping[str, str]] = None,
                 client_env: Optional[dict[str, str]] = None) -> tuple[Process, XrootdServer]:
    """Install if needed, then start xrootd with an empty storage under `base`; wait until it answers
    (its clients get `client_env`, which must let them list /store)."""
    run_script("storage-tools.sh")
    data, logs = base / "data", base / "logs"
    shutil.rmtree(data, ignore_errors=True)
    for d in (data, logs, data / "store"):
        d.mkdir(parents=True, exist_ok=True)
        shutil.chown(d, "nobody", "nogroup")
    cfg = base / "xrootd.cfg"
    cfg.write_text(f"all.export /store\noss.localroot {data}\nxrd.port {PORT}\n{extra_config}")
    proc = Process("xrootd", ["unshare", "-n", "sh", "-c",
                              f"ip link set lo up && exec xrootd -R nobody -c {cfg} -l {logs}/xrootd.log"], base,
                   env=env)
    server = XrootdServer(proc.popen.pid, data, client_env=client_env)
    deadline = time.monotonic() + 30
    while True:
        if not proc.alive():
            raise RuntimeError(f"xrootd exited at start; see {proc.log} and {logs}")
        probe = server.run(["xrdfs", server.url, "ls", "/store"], capture_output=True, timeout=20,
                           env={**os.environ, "XRD_REQUESTTIMEOUT": "2", "XRD_CONNECTIONRETRY": "1",
                                **(client_env or {})})
        if probe.returncode == 0:
            return proc, server
        if time.monotonic() > deadline:
            proc.stop()
            raise TimeoutError(f"xrootd does not answer: {probe.stderr!r}")
        time.sleep(0.2)


def _serve(start: Callable[[Path], tuple[Process, T]], name: str) -> Iterator[T]:
    """A session fixture's body: start in server_dir(name), hand out what started, stop it after."""
    proc, found = start(server_dir(name))
    yield found
    proc.stop()


@server_fixture
def xrootd_server() -> Iterator[XrootdServer]:
    yield from _serve(start_xrootd, "xrootd")


@dataclass
class TokenXrootd:
    server: XrootdServer
    issuer: TokenIssuer
    ca: TestCA


def _host_pki(base: Path, rsa_keys: bool = False) -> tuple[TestCA, Issued]:
    """A fresh test CA and a host certificate the server (running as nobody) can read."""
    shutil.rmtree(base / "pki", ignore_errors=True)
    # A name of its own: a session's CA may be trusted where another session's is too (the pool's trust store).
    ca = TestCA(base / "pki", name=f"MSUnmerged Test CA {uuid.uuid4().hex[:8]}", rsa_keys=rsa_keys)
    host = ca.issue("localhost", server=True)
    for path in (base / "pki", host.cert, host.key):
        shutil.chown(path, "nobody", "nogroup")
    return ca, host


def start_token_xrootd(base: Path) -> tuple[Process, TokenXrootd]:
    """xrootd accepting WLCG tokens of a local issuer only (ztn over TLS, SciTokens authorization)."""
    ca, host = _host_pki(base)
    issuer = TokenIssuer()
    cache = base / "cache"
    shutil.rmtree(cache, ignore_errors=True)
    issuer.seed_key_cache(cache)
    (base / "scitokens.cfg").write_text(f"[Global]\naudience = {AUDIENCE}\n\n"
                                        f"[Issuer test]\nissuer = {issuer.issuer}\nbase_path = /\n")
    for path in [cache, *cache.rglob("*")]:
        shutil.chown(path, "nobody", "nogroup")  # the plugin reads its key cache as nobody
    config = (f"xrd.tls {host.cert} {host.key}\nxrd.tlsca certdir {ca.ca_dir}\n"
              "xrootd.seclib libXrdSec.so\nsec.protocol ztn\nsec.protbind * only ztn\n"
              f"ofs.authorize 1\nofs.authlib libXrdAccSciTokens.so config={base / 'scitokens.cfg'}\n")
    probe = base / "probe.token"
    probe.write_text(issuer.mint("storage.read:/store"))
    probe.chmod(0o600)  # the ztn client refuses a token file others may read
    client_env = {"X509_CERT_DIR": str(ca.ca_dir), "BEARER_TOKEN_FILE": str(probe), "XrdSecPROTOCOL": "ztn"}
    proc, server = start_xrootd(base, config, {"XDG_CACHE_HOME": str(cache)}, client_env)
    server.client_env = {"X509_CERT_DIR": str(ca.ca_dir)}  # credentials are each test's own
    return proc, TokenXrootd(server, issuer, ca)


@server_fixture
def token_xrootd() -> Iterator[TokenXrootd]:
    yield from _serve(start_token_xrootd, "xrootd-tokens")


@dataclass
class GsiXrootd:
    server: XrootdServer
    ca: TestCA
    proxy: Path  # a valid RFC proxy of a user of the test CA


def start_gsi_xrootd(base: Path) -> tuple[Process, GsiXrootd]:
    """xrootd accepting X.509 proxies of a test CA only (GSI, no delegation, no VOMS, no CRLs)."""
    ca, host = _host_pki(base, rsa_keys=True)
    proxy = ca.proxy(ca.issue("msunmerged robot"))
    config = (f"xrootd.seclib libXrdSec.so\nsec.protocol gsi -certdir:{ca.ca_dir} -cert:{host.cert} "
              f"-key:{host.key} -crl:0 -gmapopt:10 -vomsat:0 -dlgpxy:0\nsec.protbind * only gsi\n")
    client_env = {"X509_CERT_DIR": str(ca.ca_dir), "X509_USER_PROXY": str(proxy), "XrdSecPROTOCOL": "gsi"}
    proc, server = start_xrootd(base, config, client_env=client_env)
    server.client_env = {"X509_CERT_DIR": str(ca.ca_dir)}
    return proc, GsiXrootd(server, ca, proxy)


@server_fixture
def gsi_xrootd() -> Iterator[GsiXrootd]:
    yield from _serve(start_gsi_xrootd, "xrootd-gsi")
