"""The embedded default database: one SecantusDB server per state folder, shared by the processes using it.

It speaks the MongoDB wire protocol, so the service uses the same pymongo code as in production.

Ownership (files in the state folder):
- `db.users`: every process using the server holds a shared flock on it for as long as it does
  (`serve`, a `run`, a `status` next to them). The first user starts the server, the last one
  stops it: a `status` next to `serve` connects to serve's database and leaves it running, and
  when `serve` ends while a `run` still works, the database lives on until that `run` ends.
- `db.json`: the running server's URL, port and PID, written once it listens.
- `db.lock`: an exclusive flock held only while a process decides to start, attach or stop, so
  two processes never both start a server on the same files.
A server whose `db.users` lock nobody holds is stale (its users were killed): it is stopped by its
recorded PID (checked against its command line) and a new one is started.
"""
from __future__ import annotations

import atexit
import contextlib
import fcntl
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO, Any, Iterator, Optional

log = logging.getLogger(__name__)

EXECUTABLE = "secantusd-py"


class EmbeddedMongoError(RuntimeError):
    """The embedded server could not be started or reached; the message says why and where its log is."""


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


def command(port: int, storage: Path, *extra: str) -> list[str]:
    """The SecantusDB command line serving the data folder `storage` on 127.0.0.1:`port`; the one
    place it is written (the embedded database, the test fixtures and the benchmarks start it)."""
    return [_executable(), "--host", "127.0.0.1", "--port", str(port), "--storage-path", str(storage),
            "--standalone", "--log-level", "WARNING", *extra]


def _listens(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


class EmbeddedMongo:
    """One user of the SecantusDB server with its files in `<state_dir>/db` (see the module docstring)."""

    def __init__(self, state_dir: Path, port: int = 0) -> None:
        self.state_dir = Path(state_dir)
        self.db_dir = self.state_dir / "db"
        self.info_file = self.state_dir / "db.json"
        self.log_file = self.state_dir / "db.log"
        self.port = port
        self.proc: Optional[subprocess.Popen[bytes]] = None  # set in the process that started the server
        self._users: Optional[IO[bytes]] = None  # our shared lock on db.users while we use the server

    @property
    def url(self) -> str:
        return f"mongodb://127.0.0.1:{self.port}/?directConnection=true"

    def start(self, timeout: float = 60.0) -> str:
        """Attach to the server of this state folder, starting it when nobody uses it; returns its URL."""
        self.state_dir.mkdir(parents=True, exist_ok=True)
        users = open(self.state_dir / "db.users", "ab")
        try:
            with self._deciding(timeout):
                if try_lock(users, fcntl.LOCK_EX):
                    self._stop_stale()
                    self._launch(timeout)
                    # Exclusive to shared: not atomic, but nobody decides while we hold db.lock.
                    fcntl.flock(users, fcntl.LOCK_SH)
                else:
                    fcntl.flock(users, fcntl.LOCK_SH)  # other users hold it shared: never blocks
                    self._attach()
        except BaseException:
            users.close()  # releases our lock
            self._terminate_own()
            raise
        self._users = users
        atexit.register(self.stop)
        return self.url

    def stop(self, timeout: float = 15.0) -> None:
        """Stop using the server; the last user stops it (TERM, then KILL). Safe to call twice."""
        users, self._users = self._users, None
        if users is None:
            return
        try:
            with self._deciding(timeout):
                fcntl.flock(users, fcntl.LOCK_UN)
                if try_lock(users, fcntl.LOCK_EX):
                    self._terminate(self._recorded().get("pid"), timeout)
                    self.info_file.unlink(missing_ok=True)
                else:  # worth a line only from the process that started it (a short command next to serve: not)
                    log.log(logging.INFO if self.proc is not None else logging.DEBUG,
                            "embedded database in %s left running for its other users", self.state_dir)
        except EmbeddedMongoError as exc:  # db.lock held too long by another process: leave it to them
            log.warning("embedded database in %s not stopped: %s", self.state_dir, exc)
        finally:
            users.close()

    def revive(self, timeout: float = 60.0) -> bool:
        """While processes use the server of this state folder (`serve` watches its own): start it again on
        its recorded port and data when it is gone (killed, crashed, or no longer listening); True when it
        was started. EmbeddedMongoError when nobody uses it, its port is taken by another program or it
        does not start."""
        if not in_use(self.state_dir):  # else the server started here would have no user to stop it
            raise EmbeddedMongoError(f"the embedded database in {self.state_dir} is not in use: nothing to restart")
        with self._deciding(timeout):
            info = self._recorded()
            port, pid = info.get("port"), info.get("pid")
            if isinstance(port, int) and self._is_server(pid) and _listens(port):
                return False
            self._terminate(pid, 15.0)  # one that lives on but no longer listens
            if isinstance(port, int):
                self.port = port  # the clients' URL names it
            self._launch(timeout)
        log.warning("embedded database in %s started again on 127.0.0.1:%d", self.state_dir, self.port)
        return True

    # -- the steps, each under db.lock -----------------------------------------------------------

    def _launch(self, timeout: float) -> None:
        if self.port and _listens(self.port):  # else that program's answer would pass for our server's
            raise EmbeddedMongoError(f"mongo.embedded_port {self.port} is in use by another program")
        self.port = self.port or _free_port()
        with open(self.log_file, "ab") as out:
            self.proc = subprocess.Popen(command(self.port, self.db_dir), stdout=out, stderr=subprocess.STDOUT,
                                         start_new_session=True)
        # Reaped the moment it ends, whoever notices (serve's watch revives it through another EmbeddedMongo of
        # the same folder, which never held this Popen): else a killed server stays a zombie until we exit.
        threading.Thread(target=self.proc.wait, name=f"msunmerged-reap-{self.proc.pid}", daemon=True).start()
        deadline = time.monotonic() + timeout
        while not _listens(self.port):
            if self.proc.poll() is not None:
                raise EmbeddedMongoError(f"{EXECUTABLE} exited with {self.proc.returncode} (port "
                                         f"{self.port} in use?); see {self.log_file}")
            if time.monotonic() > deadline:
                raise EmbeddedMongoError(f"{EXECUTABLE} did not listen on port {self.port} in {timeout:g} s; "
                                         f"see {self.log_file}")
            time.sleep(0.1)
        tmp = self.info_file.with_suffix(".tmp")
        tmp.write_text(json.dumps({"url": self.url, "port": self.port, "pid": self.proc.pid}))
        os.replace(tmp, self.info_file)
        log.debug("embedded database started on 127.0.0.1:%d, data in %s", self.port, self.db_dir)

    def _attach(self) -> None:
        info = self._recorded()
        port, pid = info.get("port"), info.get("pid")
        if not (isinstance(port, int) and self._is_server(pid) and _listens(port)):
            raise EmbeddedMongoError(f"the embedded database in {self.state_dir} is in use by other processes "
                                     f"but does not answer (recorded: {info or 'nothing'}); see {self.log_file}")
        self.port = port
        log.debug("using the embedded database on 127.0.0.1:%d started by another process", port)

    def _stop_stale(self) -> None:
        """Nobody uses the server: a process that was killed may have left it running on our files."""
        self._terminate(self._recorded().get("pid"), 15.0)
        self.info_file.unlink(missing_ok=True)
        (self.state_dir / "db.pid").unlink(missing_ok=True)  # written by versions before db.json

    def _recorded(self) -> dict[str, Any]:
        try:
            info = json.loads(self.info_file.read_text())
            return info if isinstance(info, dict) else {}
        except (OSError, ValueError):
            return {}

    def _is_server(self, pid: Any) -> bool:
        """The PID is a live SecantusDB on our files (a zombie or a reused PID is not)."""
        if not isinstance(pid, int) or pid <= 0:
            return False
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            return False
        return EXECUTABLE.encode() in cmdline and str(self.db_dir).encode() in cmdline

    def _terminate(self, pid: Any, timeout: float) -> None:
        """Stop the server with this PID by its process group: TERM, then KILL."""
        for sig in (signal.SIGTERM, signal.SIGKILL):
            if not self._is_server(pid):
                break
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, sig)
            deadline = time.monotonic() + timeout
            while self._is_server(pid) and time.monotonic() < deadline:
                if self.proc is not None and self.proc.pid == pid:
                    self.proc.poll()  # reap our own child, so that it does not linger as a zombie
                time.sleep(0.05)
        if self.proc is not None and self.proc.pid == pid:
            self.proc.poll()
            self.proc = None

    def _terminate_own(self) -> None:
        """A failed start stops whatever it started."""
        if self.proc is not None:
            self._terminate(self.proc.pid, 15.0)

    @contextlib.contextmanager
    def _deciding(self, timeout: float) -> Iterator[None]:
        """Hold db.lock: one process at a time starts, attaches to or stops the server."""
        with open(self.state_dir / "db.lock", "ab") as lock:
            deadline = time.monotonic() + timeout
            while not try_lock(lock, fcntl.LOCK_EX):
                if time.monotonic() > deadline:
                    raise EmbeddedMongoError(f"{self.state_dir / 'db.lock'} held by another process for "
                                             f"{timeout:g} s")
                time.sleep(0.05)
            yield  # closing the file releases the lock


def in_use(state_dir: Path) -> bool:
    """Some process uses the embedded database of this state folder now."""
    try:
        with open(Path(state_dir) / "db.users", "rb") as users:
            return not try_lock(users, fcntl.LOCK_EX)
    except FileNotFoundError:
        return False


def try_lock(fh: IO[bytes], kind: int) -> bool:
    """Take the flock `kind` without waiting; False when another open file holds it (the tests use it too)."""
    try:
        fcntl.flock(fh, kind | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
