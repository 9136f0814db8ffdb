"""Start-up of the command line: only the command given is loaded, and Ctrl-C at any moment, the imports
included, ends it with one line and exit code 130 (no traceback)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from cli_kit import LAUNCHER, cli_env
from servers import REPO
from MSUnmerged import sample
from MSUnmerged.cli import EXIT_INTERRUPTED

HEAVY = ["pymongo", "cherrypy", "rich", "requests", "MSUnmerged.ledger", "MSUnmerged.service", "MSUnmerged.planner"]


def loaded_after(*argv: str) -> list[str]:
    """The HEAVY modules loaded once `msunmerged argv` has run, in a fresh interpreter."""
    code = ("import sys; from MSUnmerged.cli import main; main(sys.argv[1:]); "
            f"print('LOADED', [m for m in {HEAVY!r} if m in sys.modules])")
    done = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(REPO / "src" / "python")})
    line = next(line for line in done.stdout.splitlines() if line.startswith("LOADED"))
    return eval(line[len("LOADED"):])  # noqa: S307 (our own print of a list of names)


def test_version_and_help_load_no_command() -> None:
    assert loaded_after("--version") == []
    assert loaded_after("--help") == []


def test_a_command_loads_what_it_needs_only() -> None:
    assert "MSUnmerged.planner" in loaded_after("plan", "--help")
    assert "cherrypy" not in loaded_after("plan", "--help")  # serve's, not plan's


IMPORT_TIME = "import time:"  # the lines PYTHONPROFILEIMPORTTIME=1 writes to stderr as each import ends


def _wait_for_site(proc: subprocess.Popen, lines: list[str]) -> threading.Event:
    """Collect proc's stderr lines; the event is set once the launcher's code runs: its first import of ours is
    done. Before it, Ctrl-C lands in Python's own start-up (the `site` import ends in a fatal error, the check of
    argv[0] as an import path prints a traceback and carries on), where no program can take it."""
    ready = threading.Event()

    def read() -> None:
        for raw in proc.stderr:
            line = raw.decode(errors="replace")
            lines.append(line)
            if line.startswith(IMPORT_TIME) and line.split("|")[-1].strip() == "MSUnmerged":
                ready.set()
        ready.set()

    threading.Thread(target=read, daemon=True).start()
    return ready


@pytest.mark.parametrize("delay_s", [0.0, 0.01, 0.03, 0.06, 0.1, 0.2, 0.4, 0.8, 1.5])
def test_ctrl_c_at_any_moment_is_one_line_and_130(tmp_path: Path, delay_s: float) -> None:
    """`plan` reading a dump from a FIFO that never ends: SIGINT `delay_s` after Python's start-up lands in the
    imports, the parsing, or the planning with its threads; each ends the same way."""
    fifo = tmp_path / "dump"
    os.mkfifo(fifo)
    protected = tmp_path / "protected.json"
    protected.write_text(json.dumps(["/store/unmerged/A/B/C/D-v1"]))
    stats = tmp_path / "stats.json"  # given, so that no warning line comes before the one line
    stats.write_text(json.dumps(sample.stats_for("T2_XX_Int", 1)))
    cmd = LAUNCHER + ["plan", "--rse", "T2_XX_Int", "--dump", str(fifo), "--protected", str(protected),
                      "--stats", str(stats), "--out", str(tmp_path / "plan")]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            env={**cli_env(tmp_path), "PYTHONPROFILEIMPORTTIME": "1"})
    stderr: list[str] = []
    started = _wait_for_site(proc, stderr)
    stop_writing = threading.Event()

    def feed() -> None:  # the dump keeps coming until the test is done with the command
        try:
            with open(fifo, "wb") as dump:
                n = 0
                while not stop_writing.is_set():
                    dump.write(b"".join(b"/store/unmerged/E/P/T/S-v%d/000/%d.root\n" % (n % 50, n + i)
                                        for i in range(1000)))
                    n += 1000
        except BrokenPipeError:  # the command is gone (also when the last write is flushed at close)
            return

    feeder = threading.Thread(target=feed, daemon=True)
    feeder.start()
    try:
        assert started.wait(60) and proc.poll() is None, "".join(stderr)[-2000:]
        time.sleep(delay_s)
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)  # bounds a hang (a thread left blocked at exit)
    finally:
        stop_writing.set()
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)
        try:  # release a feeder blocked on a FIFO nobody reads any more
            os.close(os.open(fifo, os.O_RDONLY | os.O_NONBLOCK))
        except OSError:
            pass
    time.sleep(0.2)  # the reader's last lines
    text = "".join(line for line in stderr if not line.startswith(IMPORT_TIME))
    lines = [line for line in text.splitlines() if line.strip()]
    assert proc.returncode == EXIT_INTERRUPTED, text[-2000:]
    assert "Traceback" not in text and len(lines) == 1 and lines[0].startswith("msunmerged") \
        and lines[0].endswith("interrupted"), text[-2000:]
