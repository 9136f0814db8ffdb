"""The embedded default database: a SecantusDB server on a loopback port, data under the state dir.

It speaks the MongoDB wire protocol, so the service uses the same pymongo code as in production.
"""
from __future__ import annotations

import atexit
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

log = logging.getLogger(__name__)

EXECUTABLE = "secantusd-py"


class EmbeddedMongoError(RuntimeError):
    """The embedded server could not be started; the message says why and where its log is."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _executable() -> str:
    # Prefer the one installed next to this interpreter (virtual environments).
    local = Path(sys.executable).with_name(EXECUTABLE)
    found = str(local) if local.exists() else shutil.which(EXECUTABLE)
    if not found:
        raise EmbeddedMongoError(f"{EXECUTABLE} not found: pip install secantusdb, or set mongo.url")
    return found


class EmbeddedMongo:
    """Starts SecantusDB with its files in `<state_dir>/db` and stops it by PID on `stop()` or exit."""

    def __init__(self, state_dir: Path, port: int = 0) -> None:
        self.state_dir = Path(state_dir)
        self.db_dir = self.state_dir / "db"
        self.pid_file = self.state_dir / "db.pid"
        self.log_file = self.state_dir / "db.log"
        self.port = port or _free_port()
        self.proc: Optional[subprocess.Popen[bytes]] = None

    @property
    def url(self) -> str:
        return f"mongodb://127.0.0.1:{self.port}/?directConnection=true"

    def start(self, timeout: float = 60.0) -> str:
        """Start the server and wait until it accepts connections; returns the URL."""
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self._stop_stale()
        argv = [_executable(), "--host", "127.0.0.1", "--port", str(self.port), "--storage-path",
                str(self.db_dir), "--standalone", "--log-level", "WARNING"]
        with open(self.log_file, "ab") as out:
            self.proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        self.pid_file.write_text(str(self.proc.pid))
        atexit.register(self.stop)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise EmbeddedMongoError(f"{EXECUTABLE} exited with {self.proc.returncode}; see {self.log_file}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    log.info("embedded database on 127.0.0.1:%d, data in %s", self.port, self.db_dir)
                    return self.url
            except OSError:
                time.sleep(0.1)
        self.stop()
        raise EmbeddedMongoError(f"{EXECUTABLE} did not listen on port {self.port} in {timeout} s; see {self.log_file}")

    def _stop_stale(self) -> None:
        """A previous run that was killed left its server running on our files: stop it first."""
        if not self.pid_file.exists():
            return
        try:
            pid = int(self.pid_file.read_text())
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            if EXECUTABLE.encode() in cmdline and str(self.db_dir).encode() in cmdline:
                os.killpg(pid, signal.SIGTERM)
                for _ in range(100):
                    os.kill(pid, 0)
                    time.sleep(0.1)
        except (ValueError, OSError):
            pass
        self.pid_file.unlink(missing_ok=True)

    def stop(self, timeout: float = 15.0) -> None:
        """Stop the server by its PID (TERM, then KILL); safe to call twice."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(5)
            except ProcessLookupError:
                pass
        self.pid_file.unlink(missing_ok=True)
