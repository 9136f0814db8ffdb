"""WMCore's own code run beside ours: a test's script run on the PYTHONPATH of the `wmcore` fixture (conftest.py)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any


def ask(path: str, script: str, requests: list[Any]) -> list[Any]:
    """`script`'s answers to `requests` (a JSON list on its stdin; one JSON list on the last line of its stdout), run
    with WMCore's code at `path`."""
    done = subprocess.run([sys.executable, "-c", script], input=json.dumps(requests), capture_output=True, text=True,
                          timeout=300, env={**os.environ, "PYTHONPATH": path})
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])
