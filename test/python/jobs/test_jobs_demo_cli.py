"""`msunmerged demo`: the README's first command runs a full local cleanup of the sample site."""
from __future__ import annotations

from pathlib import Path

import pytest

from MSUnmerged.cli import main
from MSUnmerged.cli.demo import count_files


def test_demo_dry_run_then_apply(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    work = tmp_path / "demo"
    assert main(["demo", "--dir", str(work), "--files", "800"]) == 0
    out = capsys.readouterr().out
    assert "DRY RUN" in out and "files dry run" in out
    assert count_files(work / "storage") == 800  # nothing deleted
    assert main(["demo", "--dir", str(work), "--files", "800", "--apply"]) == 0
    out = capsys.readouterr().out
    deleted = int(next(line.split()[-1] for line in out.splitlines() if line.startswith("files deleted")).replace(",", ""))
    protected = int(next(line.split()[-1] for line in out.splitlines() if line.startswith("protected")).replace(",", ""))
    assert deleted > 0 and protected > 0
    # What is left is exactly what the plan kept: the protected (and excluded) files.
    assert count_files(work / "storage") == 800 - deleted
    assert "directories removed" in out
