"""Running `msunmerged` as a real process on a state folder of its own, and finding its database server."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Mapping, Optional

from servers import REPO

LAUNCHER = [sys.executable, str(REPO / "bin" / "msunmerged")]


def cli_env(work: Path, **settings: str) -> dict[str, str]:
    """Environment of a command: an empty config file, the state folder under `work`, MSUNMERGED_* settings."""
    (work / "none.toml").touch()
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(work),
           "MSUNMERGED_CONFIG": str(work / "none.toml"), "MSUNMERGED_SERVICE__STATE_DIR": str(work / "state")}
    env.update({f"MSUNMERGED_{k.upper()}": v for k, v in settings.items()})
    return env


def msunmerged(*args: str, env: Mapping[str, str], timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(LAUNCHER + list(args), capture_output=True, text=True, timeout=timeout, env=dict(env))


def start(*args: str, env: Mapping[str, str], log: Path) -> subprocess.Popen:
    """A command in the background in its own session: stderr in `log`, stdout in `log` + '.out'."""
    with open(log, "ab") as err, open(f"{log}.out", "ab") as out:
        return subprocess.Popen(LAUNCHER + list(args), stdout=out, stderr=err, env=dict(env), start_new_session=True)


def servers_on(state: Path) -> list[int]:
    """PIDs of live SecantusDB servers whose data folder is `state`/db."""
    needle = str(state / "db").encode()
    pids = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                cmdline = (proc / "cmdline").read_bytes()
            except OSError:
                continue
            if b"secantusd" in cmdline and needle in cmdline.split(b"\0"):
                pids.append(int(proc.name))
    return pids


def recorded_server(state: Path) -> Optional[dict]:
    """What the embedded database's owner recorded (URL, port, PID), or None when none runs."""
    try:
        return json.loads((state / "db.json").read_text())
    except FileNotFoundError:
        return None
