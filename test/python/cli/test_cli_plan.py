"""`msunmerged plan` end to end through the installed launcher: files, exit codes, messages."""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from servers import REPO

LAUNCHER = [sys.executable, str(REPO / "bin" / "msunmerged")]


def msunmerged(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(LAUNCHER + list(args), capture_output=True, text=True, timeout=120,
                          env={"PATH": "/usr/bin:/bin", "MSUNMERGED_GUARDS__MAX_DELETE_FRACTION": "1.0"})


@pytest.fixture
def dump(tmp_path, conmon_dump_lfns) -> Path:
    path = tmp_path / "dump.txt"
    path.write_text("\n".join(conmon_dump_lfns) + "\n")
    return path


def test_plan_from_real_samples(tmp_path, dump, wmcore_fixtures):
    out = tmp_path / "plan"
    res = msunmerged("plan", "--rse", "T1_DE_KIT_Disk", "--dump", str(dump),
                     "--protected", str(wmcore_fixtures / "protectedLFNs.json"), "--out", str(out))
    assert res.returncode == 0, res.stderr
    summary = json.loads((out / "summary.json").read_text())
    for key in ("rse", "files_total", "files_to_delete", "files_protected", "files_excluded", "files_invalid",
                "dirs_removable", "jobs", "guard"):
        assert key in summary
    assert summary["guard"] is None and summary["files_total"] == 11938
    jobs = sorted((out / "jobs").iterdir())
    assert len(jobs) == summary["jobs"] > 0
    lines = [ln for j in jobs for ln in j.read_text().splitlines()]
    assert len(lines) == summary["files_to_delete"] and all(ln.startswith("/store/unmerged/") for ln in lines)
    assert (out / "dirs.txt").read_text().count("\n") == summary["dirs_removable"]
    assert "to delete" in res.stdout and "no --stats given" in res.stderr


def test_stale_stats_exit_2_with_reason(tmp_path, dump, wmcore_fixtures):
    res = msunmerged("plan", "--rse", "T1_DE_KIT_Disk", "--dump", str(dump),
                     "--protected", str(wmcore_fixtures / "protectedLFNs.json"),
                     "--stats", str(wmcore_fixtures / "conmon-stats.json"), "--out", str(tmp_path / "p"))
    assert res.returncode == 2 and "scan_stale" in res.stderr and "nothing will be deleted" in res.stderr
    assert list((tmp_path / "p" / "jobs").iterdir()) == []


def test_fresh_stats_gzip_dump_and_json_output(tmp_path, conmon_dump_lfns, wmcore_fixtures):
    import gzip
    dump = tmp_path / "dump.raw"
    dump.write_bytes(gzip.compress(("\n".join(conmon_dump_lfns) + "\n").encode()))
    stats = tmp_path / "stats.json"
    stats.write_text(json.dumps({"T1_X": {"status": "done", "start_time": time.time() - 600, "end_time": time.time() - 60,
                                          "files": 11938}}))
    protected = tmp_path / "protected.json"
    protected.write_text(json.dumps(json.loads((wmcore_fixtures / "protectedLFNs.json").read_text())))  # bare list
    res = msunmerged("plan", "--rse", "T1_X", "--dump", str(dump), "--protected", str(protected),
                     "--stats", str(stats), "--out", str(tmp_path / "p"), "--json")
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["scan_checked"] and out["files_to_delete"] == 10934


@pytest.mark.parametrize("protected_body, message", [
    ('{"result": [1, 2]}', "expected"),
    ("not json", "not readable JSON"),
    ('{"other": []}', "expected"),
])
def test_unusable_protected_file_exit_3(tmp_path, dump, protected_body, message):
    protected = tmp_path / "p.json"
    protected.write_text(protected_body)
    res = msunmerged("plan", "--rse", "X", "--dump", str(dump), "--protected", str(protected), "--out",
                     str(tmp_path / "p"))
    assert res.returncode == 3 and message in res.stderr and str(protected) in res.stderr


def test_missing_dump_and_bad_config(tmp_path, wmcore_fixtures):
    res = msunmerged("plan", "--rse", "X", "--dump", str(tmp_path / "nope"),
                     "--protected", str(wmcore_fixtures / "protectedLFNs.json"), "--out", str(tmp_path / "p"))
    assert res.returncode == 3 and "dump file not found" in res.stderr
    cfg = tmp_path / "c.toml"
    cfg.write_text("[planner]\nfiles_per_job = -1\n")
    res = msunmerged("--config", str(cfg), "plan", "--rse", "X", "--dump", str(tmp_path / "nope"),
                     "--protected", "x", "--out", "y")
    assert res.returncode == 3 and "planner.files_per_job" in res.stderr


def test_empty_protected_list_refuses(tmp_path, dump):
    protected = tmp_path / "p.json"
    protected.write_text('{"result": []}')
    res = msunmerged("plan", "--rse", "X", "--dump", str(dump), "--protected", str(protected), "--out",
                     str(tmp_path / "p"))
    assert res.returncode == 2 and "protected_list_empty" in res.stderr
