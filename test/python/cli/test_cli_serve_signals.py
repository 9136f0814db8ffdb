"""`msunmerged serve` stopped by SIGTERM (as Kubernetes stops it) or Ctrl-C: exit 130 with one line of its own and no
traceback, after its REST API, loop and embedded database server are stopped.

A real process (the installed launcher) on the real embedded SecantusDB; Rucio's address answers nothing, so
its polling loop records failed cycles and keeps serving.
"""
from __future__ import annotations

import os
import signal
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from cli_kit import cli_env, recorded_server, servers_on, start
from MSUnmerged.cli import EXIT_INTERRUPTED
from servers import free_port

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=5) as reply:
            return reply.status == 200
    except (urllib.error.URLError, OSError):  # not listening yet
        return False


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["sigterm", "ctrl-c"])
def test_serve_ends_interrupted_with_its_database_stopped(tmp_path: Path, sig: signal.Signals) -> None:
    port, nobody = free_port(), f"http://127.0.0.1:{free_port()}"
    env = cli_env(tmp_path, REST__PORT=str(port), RUCIO__HOST=nobody, RUCIO__AUTH_HOST=nobody,
                  SERVICE__INTERVAL_S="3600")
    state, log = tmp_path / "state", tmp_path / "serve.log"
    serve = start("serve", env=env, log=log)
    try:
        deadline = time.monotonic() + 90  # bounds a hang of the start-up, not its speed
        while serve.poll() is None and time.monotonic() < deadline and not (
                recorded_server(state) and answers(f"http://127.0.0.1:{port}/ms-unmerged/data/status")):
            time.sleep(0.2)
        assert serve.poll() is None and recorded_server(state) is not None, log.read_text()[-2000:]
        database = recorded_server(state)["pid"]
        assert servers_on(state) == [database]
        serve.send_signal(sig)
        serve.wait(60)  # bounds a hang at shutdown
    finally:
        if serve.poll() is None:
            serve.kill()
            serve.wait(10)
        left = servers_on(state)
        for pid in left:  # a failed test leaves no server behind
            os.kill(pid, signal.SIGTERM)
    text = log.read_text()
    assert serve.returncode == EXIT_INTERRUPTED, text[-2000:]
    assert "Traceback" not in text, text[-3000:]
    assert text.splitlines()[-1] == "msunmerged serve: interrupted", text[-2000:]
    assert left == [] and recorded_server(state) is None  # the server it started is stopped
