"""The servers' plumbing: machine-wide servers shared between sessions, dead sessions' folders swept by PID."""
from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import ContextManager

import pytest

import servers
from servers import SESSION_LOCK, SESSION_PREFIX, shared_server

HERE = Path(__file__).resolve().parent


def _use(calls: list[str]) -> ContextManager[str]:
    """The shared server "selftest", whose start, attach and stop only say that they ran."""
    def step(name: str) -> str:
        calls.append(name)
        return f"{name}ed"
    return shared_server("selftest", lambda: step("start"), lambda: step("attach"), lambda: step("stop"))


def test_first_user_starts_the_last_one_stops(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(servers, "SHARED", tmp_path)
    calls: list[str] = []
    with _use(calls) as first:
        with _use(calls) as second:
            assert (first, second) == ("started", "attached")
        assert calls == ["start", "attach"]  # a user leaving while another stays stops nothing
    assert calls == ["start", "attach", "stop"]
    with _use(calls):
        pass
    assert calls[3:] == ["start", "stop"]


def test_a_killed_user_no_longer_counts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A session killed while using the server leaves no user behind: the last live one stops it."""
    monkeypatch.setattr(servers, "SHARED", tmp_path)
    inside = tmp_path / "inside"
    other = subprocess.Popen([sys.executable, "-c", f"""
import sys, time
sys.path[:0] = [{str(HERE.parent)!r}, {str(servers.REPO / 'src' / 'python')!r}]
import servers
from pathlib import Path
servers.SHARED = Path({str(tmp_path)!r})
with servers.shared_server("selftest", lambda: None, lambda: None, lambda: None):
    Path({str(inside)!r}).touch()
    time.sleep(300)
"""], start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while not inside.exists():
            assert other.poll() is None and time.monotonic() < deadline, "the other user did not start"
            time.sleep(0.05)
        calls: list[str] = []
        with _use(calls):
            assert calls == ["attach"]
            other.kill()
            other.wait(10)
        assert calls == ["attach", "stop"]
    finally:
        if other.poll() is None:
            other.kill()
            other.wait(10)


def _sleeper(*argv: str) -> subprocess.Popen:
    return subprocess.Popen(["sh", "-c", "sleep 300", *argv], start_new_session=True)


def test_dead_sessions_are_swept_by_pid(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    dead, live = tmp_path / f"{SESSION_PREFIX}dead", tmp_path / f"{SESSION_PREFIX}live"
    for folder in (dead, live):
        (folder / "srv").mkdir(parents=True)
        (folder / SESSION_LOCK).touch()
    ours = _sleeper(str(dead / "srv" / "data"))  # a server of the dead session: its command line names the folder
    stranger = _sleeper()  # the PID of a dead session's server, reused by another program
    live_server = _sleeper(str(live / "srv" / "data"))
    (dead / "srv" / "ours.pid").write_text(str(ours.pid))
    (dead / "srv" / "stranger.pid").write_text(str(stranger.pid))
    (live / "srv" / "server.pid").write_text(str(live_server.pid))
    try:
        with open(live / SESSION_LOCK, "ab") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # a live session holds its folder's lock
            servers._sweep_dead_sessions()
        assert ours.wait(10) == -signal.SIGKILL
        assert not dead.exists()
        assert stranger.poll() is None and live_server.poll() is None
        assert (live / "srv" / "server.pid").exists()
    finally:
        for proc in (ours, stranger, live_server):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
