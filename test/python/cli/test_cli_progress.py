"""Progress of `msunmerged plan`: on a terminal (a pseudo-terminal here) a bar with percentage, rate and time
left; off a terminal, plain lines."""
from __future__ import annotations

import io
import json
import os
import pty
import re
import subprocess
import time
from pathlib import Path

from cli_kit import LAUNCHER, cli_env
from MSUnmerged import sample
from MSUnmerged.cli.output import Progress

ANSI = re.compile(rb"\x1b\[[0-9;?]*[A-Za-z]")


def test_plan_progress_on_a_terminal(tmp_path: Path) -> None:
    spec = sample.SampleSpec(files=600_000)
    inputs = sample.write_sample_inputs(tmp_path / "in", "T2_XX_Big", spec)
    parent, child = pty.openpty()
    proc = subprocess.Popen(LAUNCHER + ["plan", "--rse", "T2_XX_Big", "--dump", str(inputs["dump"]), "--protected",
                                        str(inputs["protected"]), "--stats", str(inputs["stats"]),
                                        "--out", str(tmp_path / "plan"), "--json"],
                            stdout=subprocess.PIPE, stderr=child,
                            # The pure engine: the compiled one plans these 600,000 lines in ~0.1 s, faster
                            # than the bar refreshes, so no partway state would be seen.
                            env={**cli_env(tmp_path), "COLUMNS": "160", "MSUNMERGED_PLANNER__ENGINE": "pure"})
    os.close(child)
    seen = b""
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        try:
            block = os.read(parent, 65536)
        except OSError:  # the child closed its end
            break
        if not block:
            break
        seen += block
    os.close(parent)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0 and json.loads(out)["files_total"] == spec.files
    text = ANSI.sub(b"", seen).decode("utf-8", errors="replace")
    percents = {int(p) for p in re.findall(r"(\d+)%", text)}
    assert 100 in percents and any(0 < p < 100 for p in percents), text[-2000:]  # partway, then done
    assert re.search(r"eta \d+:\d\d:\d\d", text), text[-2000:]  # time left
    assert re.search(r"[\d.]+ [kM]B/s", text), text[-2000:]  # rate
    assert "planning T2_XX_Big" in text


def test_plain_progress_lines_off_a_terminal() -> None:
    out = io.StringIO()
    progress = Progress("planning X", total=2_000_000, unit="bytes", every=0, out=out)
    progress.start -= 10  # ten seconds in
    progress(500_000)
    line = out.getvalue().strip()
    assert line.startswith("planning X: 25% (500.0 kB of 2.0 MB), 50.0 kB/s, about 30 s left"), line
    lines = Progress("planning Y", every=0, out=io.StringIO())
    lines(1234)
    assert re.fullmatch(r"planning Y: 1,234 lines, [\d,]+ lines/s\n", lines.out.getvalue())
