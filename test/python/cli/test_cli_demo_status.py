"""After `msunmerged demo` (what `make run` runs), `msunmerged status` leads to the demo's RSE."""
from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from cli_kit import cli_env, msunmerged
from MSUnmerged.samplesite import DEMO_RSE


@pytest.mark.integration  # the embedded SecantusDB server and real worker processes
def test_status_after_demo_shows_the_way_to_its_rse(tmp_path: Path) -> None:
    env = cli_env(tmp_path)
    demo = msunmerged("demo", "--files", "200", env=env, timeout=300)
    assert demo.returncode == 0, demo.stderr
    hint = next(line for line in demo.stdout.splitlines() if "msunmerged status" in line)
    status = msunmerged("status", env=env)  # the service's own, empty ledger
    assert status.returncode == 0 and DEMO_RSE not in status.stdout
    assert "the demo's: " in status.stderr
    # The command both print, run as an operator would paste it.
    command = status.stderr.split("the demo's: ", 1)[1].rstrip(")\n")
    assert command in hint
    words = shlex.split(command)
    settings = dict(w.split("=", 1) for w in words if "=" in w)
    shown = msunmerged(*words[len(settings) + 1:], env={**env, **settings})
    assert shown.returncode == 0 and DEMO_RSE in shown.stdout
