"""`msunmerged serve` stopped by SIGTERM (as Kubernetes stops it): exit 0, by Ctrl-C (SIGINT, also when a script
started it in the background, with SIGINT ignored): exit 130; each with one line of its own and no traceback, after
its REST API, loop and embedded database server are stopped.

A real process (the installed launcher) on the real embedded SecantusDB; Rucio's address answers nothing, so
its polling loop records failed cycles and keeps serving.
"""
from __future__ import annotations

import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from cli_kit import LAUNCHER, cli_env, recorded_server, servers_on, start
from MSUnmerged.cli import EXIT_INTERRUPTED, EXIT_OK
from servers import free_port

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=5) as reply:
            return reply.status == 200
    except (urllib.error.URLError, OSError):  # not listening yet
        return False


# (signal, started as a script's background job, exit code, its one line)
ENDINGS = [(signal.SIGTERM, False, EXIT_OK, "msunmerged serve: stopped (SIGTERM)"),
           (signal.SIGINT, False, EXIT_INTERRUPTED, "msunmerged serve: interrupted"),
           (signal.SIGINT, True, EXIT_INTERRUPTED, "msunmerged serve: interrupted")]


def in_background(env: dict[str, str], log: Path) -> tuple[subprocess.Popen, int]:
    """serve as a shell script's background job (`msunmerged serve &`), which starts with SIGINT ignored (the shell
    does so without job control; `trap '' INT` makes sure of it whatever started the test); the script waits for
    it and ends with its exit code. Returns the script and serve's PID."""
    # A probe started the same way just before serve shows the mask serve started with (serve itself takes SIGINT
    # back at once, so its own mask may already show the handler when it is read).
    script = 'trap "" INT; sleep 60 & echo $! > "$PROBE"; "$@" & echo $! > "$PIDFILE"; wait $!'
    pidfile, probefile = log.with_suffix(".pid"), log.with_suffix(".probe")
    with open(log, "ab") as err:
        shell = subprocess.Popen(["sh", "-c", script, "sh", *LAUNCHER, "serve"], stdout=err, stderr=err,
                                 env={**env, "PIDFILE": str(pidfile), "PROBE": str(probefile)},
                                 start_new_session=True)
    deadline = time.monotonic() + 30
    while not pidfile.read_text().strip() if pidfile.exists() else True:
        assert time.monotonic() < deadline and shell.poll() is None, log.read_text()[-2000:]
        time.sleep(0.05)
    pid, probe = int(pidfile.read_text()), int(probefile.read_text())
    try:
        ignored = int(Path(f"/proc/{probe}/status").read_text().split("SigIgn:")[1].split()[0], 16)
    finally:
        os.kill(probe, signal.SIGKILL)
    assert ignored & (1 << (signal.SIGINT - 1)), "the shell did not start its background jobs with SIGINT ignored"
    return shell, pid


@pytest.mark.parametrize("sig,background,code,last", ENDINGS, ids=["sigterm", "ctrl-c", "ctrl-c-background-job"])
def test_serve_ends_with_its_database_stopped(tmp_path: Path, sig: signal.Signals, background: bool, code: int,
                                              last: str) -> None:
    port, nobody = free_port(), f"http://127.0.0.1:{free_port()}"
    env = cli_env(tmp_path, REST__PORT=str(port), RUCIO__HOST=nobody, RUCIO__AUTH_HOST=nobody,
                  SERVICE__INTERVAL_S="3600")
    state, log = tmp_path / "state", tmp_path / "serve.log"
    if background:
        serve, pid = in_background(env, log)
    else:
        serve = start("serve", env=env, log=log)
        pid = serve.pid
    try:
        deadline = time.monotonic() + 90  # bounds a hang of the start-up, not its speed
        while serve.poll() is None and time.monotonic() < deadline and not (
                recorded_server(state) and answers(f"http://127.0.0.1:{port}/ms-unmerged/data/status")):
            time.sleep(0.2)
        assert serve.poll() is None and recorded_server(state) is not None, log.read_text()[-2000:]
        database = recorded_server(state)["pid"]
        assert servers_on(state) == [database]
        os.kill(pid, sig)
        serve.wait(60)  # bounds a hang at shutdown
    finally:
        if serve.poll() is None:
            os.killpg(serve.pid, signal.SIGKILL)
            serve.wait(10)
        left = servers_on(state)
        for server in left:  # a failed test leaves no server behind
            os.kill(server, signal.SIGTERM)
    text = log.read_text()
    assert serve.returncode == code, text[-2000:]
    assert "Traceback" not in text, text[-3000:]
    assert text.splitlines()[-1] == last, text[-2000:]
    assert left == [] and recorded_server(state) is None  # the server it started is stopped
