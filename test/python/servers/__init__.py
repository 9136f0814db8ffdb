"""Shared machinery to install, start and stop the real servers the tests talk to.

Every server is started by a script in test/scripts/ or a command here, gets its own folder under
test/.servers/<name>/, records its PID there, and is stopped by that PID at the end of the session.
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Mapping, Optional, Sequence

REPO = Path(__file__).resolve().parents[3]
SCRIPTS = REPO / "test" / "scripts"
STATE = REPO / "test" / ".servers"


def server_dir(name: str) -> Path:
    path = STATE / name
    path.mkdir(parents=True, exist_ok=True)
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port: int, host: str = "127.0.0.1", timeout: float = 60.0, proc: Optional["Process"] = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and not proc.alive():
            raise RuntimeError(f"{proc.name} exited before listening on {host}:{port}; see {proc.log}")
        try:
            with socket.create_connection((host, port), timeout=1):
                return
        except OSError:
            time.sleep(0.1)
    raise TimeoutError(f"nothing listens on {host}:{port} after {timeout} s")


def run_script(script: str, *args: str, env: Optional[Mapping[str, str]] = None, timeout: float = 1800) -> str:
    """Run test/scripts/<script> (install steps are idempotent); returns its stdout."""
    result = subprocess.run(["bash", str(SCRIPTS / script), *args], capture_output=True, text=True,
                            env={**os.environ, **(env or {})}, timeout=timeout)
    if result.returncode != 0:
        raise RuntimeError(f"{script} {' '.join(args)} failed ({result.returncode}):\n{result.stdout[-3000:]}\n"
                           f"{result.stderr[-3000:]}")
    return result.stdout


class Process:
    """A server process started in its own session, its PID written to <dir>/<name>.pid."""

    def __init__(self, name: str, argv: Sequence[str], directory: Path, env: Optional[Mapping[str, str]] = None,
                 cwd: Optional[Path] = None) -> None:
        self.name = name
        self.directory = directory
        self.log = directory / f"{name}.log"
        self.pid_file = directory / f"{name}.pid"
        self._stop_stale()
        with open(self.log, "ab") as log:
            self.popen = subprocess.Popen(list(argv), stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                          env={**os.environ, **(env or {})}, cwd=cwd)
        self.pid_file.write_text(str(self.popen.pid))

    def _stop_stale(self) -> None:
        """A previous run that died left a PID file: stop that process group first."""
        if self.pid_file.exists():
            try:
                os.killpg(int(self.pid_file.read_text()), signal.SIGKILL)
            except (ValueError, ProcessLookupError, PermissionError):
                pass
            self.pid_file.unlink()

    def alive(self) -> bool:
        return self.popen.poll() is None

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 15.0) -> None:
        if self.alive():
            try:
                os.killpg(self.popen.pid, sig)
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.popen.pid, signal.SIGKILL)
                self.popen.wait(5)
            except ProcessLookupError:
                pass
        self.pid_file.unlink(missing_ok=True)
