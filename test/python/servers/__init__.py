"""Shared machinery to install, start and stop the real servers the tests talk to.

Where things live:
- built artefacts, kept between sessions: test/.servers/<name>/ (`built_dir`: the HTCondor pool's
  chroot, the Rucio venv, the python 3.9 chroot, fuzz crashes);
- the state of this session's own servers: a folder of its own, <tmp>/msunmerged-servers-XXXX/<name>/
  (`server_dir`), made traversable (0755) so that daemons dropped to `nobody` reach it wherever the
  checkout sits; removed at the end, kept when the session failed;
- machine-wide servers on fixed ports (HTCondor pool, Slurm) are shared by the sessions using them
  (`shared_server`): the first one starts them, the last one stops them; Slurm's state lives in
  <tmp>/msunmerged-shared/slurm.
Every server records its PID in a file next to its state and is stopped by that PID; a session that
was killed leaves its folder, whose servers the next session stops by PID before removing it.
"""
from __future__ import annotations

import atexit
import contextlib
import fcntl
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import IO, Any, Callable, Iterator, Mapping, Optional, Sequence, TypeVar

import pytest

from MSUnmerged.embedded_mongo import try_lock

REPO = Path(__file__).resolve().parents[3]
SCRIPTS = REPO / "test" / "scripts"
BUILT = REPO / "test" / ".servers"
SHARED = Path(tempfile.gettempdir()) / "msunmerged-shared"
SESSION_PREFIX = "msunmerged-servers-"
SESSION_LOCK = "session.lock"  # held (flock) by the session owning the folder, for as long as it lives
T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])
SERVER_FIXTURES: set[str] = set()  # the fixtures that start a real server (server_fixture); servers.markers checks them
MACHINE_WIDE: set[str] = set()  # those of them whose server the whole machine shares (machine_wide_fixture)


def server_fixture(function: F) -> F:
    """A session fixture that starts a real server: a test asking for it, itself or through other fixtures, must
    be marked `integration` (servers.markers fails it otherwise)."""
    SERVER_FIXTURES.add(function.__name__)
    return pytest.fixture(scope="session")(function)


def machine_wide_fixture(function: F) -> F:
    """A server_fixture whose server is the machine's (fixed ports, shared_server): the tests asking for it change
    what every user of it sees, so pytest-xdist runs them one at a time, in one worker (servers.markers)."""
    MACHINE_WIDE.add(function.__name__)
    return server_fixture(function)


def built_dir(name: str) -> Path:
    """test/.servers/<name>: what is built once and kept (chroots, virtual environments)."""
    path = BUILT / name
    path.mkdir(parents=True, exist_ok=True)
    return path


class _Session:
    """This process's folder for its servers' state, made on first use."""

    path: Optional[Path] = None
    lock: Optional[IO[bytes]] = None
    keep = False


def session_dir() -> Path:
    """The folder of this session's servers (0755 under the temporary folder); first sweeps dead sessions'."""
    if _Session.path is None:
        _sweep_dead_sessions()
        # Made under another name and renamed once locked, so that no sweep ever sees it unlocked.
        making = Path(tempfile.mkdtemp(prefix=f".{SESSION_PREFIX}"))
        making.chmod(0o755)
        _Session.lock = open(making / SESSION_LOCK, "ab")
        fcntl.flock(_Session.lock, fcntl.LOCK_EX)
        _Session.path = making.rename(making.with_name(making.name[1:]))
        atexit.register(_end_session)
    return _Session.path


def server_dir(name: str) -> Path:
    """<session folder>/<name>: one server's state, logs and PID file, this session's only."""
    path = session_dir() / name
    path.mkdir(parents=True, exist_ok=True)
    path.chmod(0o755)
    return path


def keep_session_dir() -> Optional[Path]:
    """Keep this session's folder (logs of a failed session) instead of removing it at exit."""
    _Session.keep = True
    return _Session.path


def _end_session() -> None:
    if _Session.path is not None and not _Session.keep:
        shutil.rmtree(_Session.path, ignore_errors=True)
    if _Session.lock is not None:
        _Session.lock.close()


def _sweep_dead_sessions() -> None:
    """Folders of sessions that ended without cleaning up: stop their servers by PID, then remove them."""
    for folder in Path(tempfile.gettempdir()).glob(f"{SESSION_PREFIX}*"):
        try:
            with open(folder / SESSION_LOCK, "rb") as lock:
                if not try_lock(lock, fcntl.LOCK_EX):
                    continue  # a live session's
                for pid_file in folder.rglob("*.pid"):
                    _kill_recorded(pid_file, folder)
                shutil.rmtree(folder, ignore_errors=True)
        except OSError:
            continue  # being made or removed by another session right now


def _kill_recorded(pid_file: Path, folder: Path) -> None:
    """Kill the process group recorded in pid_file when that process still names `folder` in its command
    line, environment or working folder (a PID reused by another program is left alone)."""
    try:
        pid = int(pid_file.read_text())
        proc = Path(f"/proc/{pid}")
        names = [(proc / "cmdline").read_bytes(), (proc / "environ").read_bytes(), os.readlink(proc / "cwd").encode()]
        if any(str(folder).encode() in text for text in names):
            os.killpg(pid, signal.SIGKILL)
    except (OSError, ValueError):
        pass


@contextlib.contextmanager
def shared_server(name: str, start: Callable[[], T], attach: Callable[[], T],
                  stop: Callable[[], object]) -> Iterator[T]:
    """Use a machine-wide server (fixed ports) together with other sessions: `start` it when no session
    uses it, else `attach`; the last user to leave runs `stop`. A shared flock on
    <tmp>/msunmerged-shared/<name>.users counts the users (the kernel drops a killed session's);
    <name>.lock makes start, attach and stop one session at a time."""
    shared = shared_dir()
    users = open(shared / f"{name}.users", "ab")
    try:
        with _exclusive(shared / f"{name}.lock"):
            found = start() if try_lock(users, fcntl.LOCK_EX) else attach()
            fcntl.flock(users, fcntl.LOCK_SH)  # exclusive to shared: nobody decides while we hold the lock
        yield found
    finally:
        with _exclusive(shared / f"{name}.lock"):
            fcntl.flock(users, fcntl.LOCK_UN)
            if try_lock(users, fcntl.LOCK_EX):
                stop()
        users.close()


def shared_dir(name: str = "") -> Path:
    """<tmp>/msunmerged-shared[/<name>]: the machine-wide servers' locks and state, reachable by every user."""
    path = SHARED / name
    path.mkdir(parents=True, exist_ok=True)
    for p in {SHARED, path}:
        p.chmod(0o755)
    return path


@contextlib.contextmanager
def _exclusive(path: Path) -> Iterator[None]:
    with open(path, "ab") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


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
    """Run test/scripts/<script> (install steps are idempotent); returns its stdout. One process of the machine at
    a time runs a given script (<tmp>/msunmerged-shared/scripts/<script>.lock): the sessions and pytest-xdist's
    workers that need the same thing built wait for the first to build it instead of building it twice at once."""
    with _exclusive(shared_dir("scripts") / f"{script}.lock"):
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
        with open(self.log, "ab") as log:
            self.popen = subprocess.Popen(list(argv), stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                          env={**os.environ, **(env or {})}, cwd=cwd)
        self.pid_file.write_text(str(self.popen.pid))

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
