"""A python3 for LocalBackend whose workers wait for the test: shared by the backend's and the service's tests."""
from __future__ import annotations

import sys
from pathlib import Path

from MSUnmerged.worker.ids import MANIFEST_NAME


class Gate:
    """A python3 for LocalBackend whose workers wait until the test opens the gate (at most `hang_s`, a bound on a
    hang): the first job stays running and those behind it queued for as long as the test needs, however slow the
    machine (a worker started after a fixed pause may have ended before the service's next step on a busy one).
    The backend's preflight (`--help`, outside a job folder) does not wait."""

    def __init__(self, base: Path, hang_s: float = 300.0) -> None:
        self.path = base / "gate-open"
        self.python = str(base / "gated-python")
        Path(self.python).write_text(f"""#!/bin/sh
if [ -f {MANIFEST_NAME} ]; then
    i=0
    while [ ! -e '{self.path}' ] && [ $i -lt {int(hang_s * 20)} ]; do sleep 0.05; i=$((i + 1)); done
fi
exec {sys.executable} "$@"
""")
        Path(self.python).chmod(0o755)

    def open(self) -> None:
        self.path.touch()
