"""Pyflakes' checks (ruff's F rules: unused imports and variables, undefined names, shadowed imports) over the product
code, the tests and the benchmarks: a rewrite or a merge that leaves an import behind or a name undefined fails here,
not at a site."""
from __future__ import annotations

import subprocess
import sys

from servers import REPO


def test_no_pyflakes_finding_in_src_test_and_bench() -> None:
    run = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "--select", "F", "--output-format",
                          "concise", "--exclude", "test/.servers", "src", "test", "bench"],
                         cwd=REPO, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
