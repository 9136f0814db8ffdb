"""`msunmerged demo`: the README's first command runs the service on the sample site, end to end."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from MSUnmerged.cli import main
from MSUnmerged.samplesite import DEMO_RSE, count_files
from MSUnmerged.sources.offline import PROTECTED_FILE, dump_file


def value(out: str, label: str) -> int:
    line = next(line for line in out.splitlines() if line.startswith(label))
    return int(line[len(label):].split()[0].replace(",", ""))


def protected_files_exist(work: Path) -> bool:
    bases = [b.rstrip("/") for b in json.loads((work / "sources" / PROTECTED_FILE).read_text())["result"]]
    lfns = dump_file(work / "sources", DEMO_RSE).read_text().split()
    covered = [x for x in lfns if any(x == b or x.startswith(b + "/") for b in bases)]
    assert covered
    return all((work / "storage" / x.lstrip("/")).is_file() for x in covered)


@pytest.mark.integration  # the embedded SecantusDB server and real worker processes
def test_demo_dry_run_then_apply(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    work = tmp_path / "demo"
    assert main(["demo", "--dir", str(work), "--files", "800"]) == 0
    out = capsys.readouterr().out
    assert "DRY RUN" in out
    assert value(out, "files would delete (dry run)") == value(out, "files to delete (planned)") > 0
    assert value(out, "files deleted") == 0
    assert count_files(work / "storage") == 800  # nothing deleted

    assert main(["demo", "--dir", str(work), "--files", "800", "--apply"]) == 0
    out = capsys.readouterr().out
    deleted, protected = value(out, "files deleted"), value(out, "files protected")
    assert deleted == value(out, "files to delete (planned)") > 0 and protected > 0
    assert value(out, "files failed") == value(out, "files unknown") == 0
    # What is left is exactly what the plan kept: the protected and excluded files.
    assert count_files(work / "storage") == 800 - deleted == protected + value(out, "files excluded")
    assert protected_files_exist(work)
    assert "state" in out and "clean" in out
