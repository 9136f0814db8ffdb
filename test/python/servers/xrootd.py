"""A real xrootd server (Debian xrootd-server) on 127.0.0.1:1094 inside a private network namespace.

xrootd has no bind-address option and refuses to run as root, so it runs as `nobody` in a network
namespace of its own; its clients (xrdfs, the worker, gfal2) join that namespace with nsenter.
"""
from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Mapping, Optional, Sequence

import pytest

from servers import Process, run_script, server_dir

PORT = 1094


@dataclass
class XrootdServer:
    pid: int
    data: Path  # oss.localroot: root://127.0.0.1:1094//store/... is <data>/store/...
    url: str = f"root://127.0.0.1:{PORT}"

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


def start_xrootd(base: Path) -> tuple[Process, XrootdServer]:
    """Install if needed, then start xrootd with an empty storage under `base`; wait until it answers."""
    run_script("storage-tools.sh")
    data, logs = base / "data", base / "logs"
    shutil.rmtree(data, ignore_errors=True)
    for d in (data, logs, data / "store"):
        d.mkdir(parents=True, exist_ok=True)
        shutil.chown(d, "nobody", "nogroup")
    cfg = base / "xrootd.cfg"
    cfg.write_text(f"all.export /store\noss.localroot {data}\nxrd.port {PORT}\n")
    proc = Process("xrootd", ["unshare", "-n", "sh", "-c",
                              f"ip link set lo up && exec xrootd -R nobody -c {cfg} -l {logs}/xrootd.log"], base)
    server = XrootdServer(proc.popen.pid, data)
    deadline = time.monotonic() + 30
    while True:
        if not proc.alive():
            raise RuntimeError(f"xrootd exited at start; see {proc.log} and {logs}")
        probe = server.run(["xrdfs", server.url, "ls", "/store"], capture_output=True, timeout=20,
                           env={**os.environ, "XRD_REQUESTTIMEOUT": "2", "XRD_CONNECTIONRETRY": "1"})
        if probe.returncode == 0:
            return proc, server
        if time.monotonic() > deadline:
            proc.stop()
            raise TimeoutError(f"xrootd does not answer: {probe.stderr!r}")
        time.sleep(0.2)


@pytest.fixture(scope="session")
def xrootd_server() -> Iterator[XrootdServer]:
    proc, server = start_xrootd(server_dir("xrootd"))
    yield server
    proc.stop()
