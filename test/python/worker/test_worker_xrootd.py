"""The worker zipapp against a real xrootd server: `xrdfs rm` (many paths per call) and gfal2 over root://."""
from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import pytest

from worker_kit import (HOSTILE, SYSTEM_PYTHON, changes, dirs, files, hostile_site, make_site, manifest, run_worker,
                        scan_start, snapshot, summary, world_dir)

pytestmark = pytest.mark.integration

BASE = "/store/unmerged/Run3Summer23DRPremix/ZeroBias/AODSIM/130X-v1"


def xrootd_site(root: Path, url: str, command: str) -> Path:
    return make_site(root, [{"protocol": "XRootD", "access": "global-rw",
                             "rules": [{"lfn": "/+(.*)", "pfn": url + "//$1"}]}],
                     [{"volume": "Test_Disk", "protocol": "XRootD", "command": command}])


@pytest.mark.parametrize("command,python,deleter", [
    ("xrdcp", sys.executable, "xrootd"),
    ("gfal2", SYSTEM_PYTHON, "gfal2"),  # the Debian python3-gfal2 module, bulk unlink
    ("gfal2", sys.executable, "gfal-rm"),  # no gfal2 module in this python: gfal-rm --bulk
])
def test_deletes_on_xrootd(xrootd_server, tmp_path: Path, command: str, python: str, deleter: str) -> None:
    base = f"{BASE}-{deleter}"
    lfns = [f"{base}/00000/f{i}.root" for i in range(250)] + [f"{base}/00001/g{i}.root" for i in range(3)]
    paths = [xrootd_server.put(lfn) for lfn in lfns]
    other = xrootd_server.put(f"{base}/00001/other-job.root")
    paths[5].unlink()  # already gone
    sc = xrootd_site(world_dir("msunmerged-xrd-"), xrootd_server.url, command)
    man = manifest(lfns, remove_dirs=[f"{base}/00000", f"{base}/00001", base], scan_started=scan_start())
    rc, lines = run_worker(tmp_path / "job", man, sc, python=python, prefix=["nsenter", "-t", str(xrootd_server.pid), "-n"])
    assert lines[0]["start"]["method"]["deleter"] == deleter
    out = files(lines)
    assert out[lfns[5]]["outcome"] == "missing", out[lfns[5]]
    assert {out[lfn]["outcome"] for lfn in lfns if lfn != lfns[5]} == {"deleted"}
    assert out[lfns[0]]["pfn"] == f"{xrootd_server.url}/{lfns[0]}"
    assert not any(p.exists() for p in paths) and other.exists()
    d = dirs(lines)
    if deleter == "gfal-rm":  # no non-recursive rmdir in gfal-rm: left for the next cycle, said so
        assert {x["outcome"] for x in d.values()} == {"not_attempted"}
        assert rc == 0
    else:
        assert d[f"{base}/00000"]["outcome"] == "removed"
        assert d[f"{base}/00001"]["outcome"] == "not_empty" and d[base]["outcome"] == "not_empty"
        assert not (xrootd_server.data / f"{base}/00000".lstrip("/")).exists()
        assert rc == 0, summary(lines)


@pytest.mark.parametrize("command,python", [("xrdcp", sys.executable), ("gfal2", SYSTEM_PYTHON)])
def test_permission_denied_by_the_xrootd_server(xrootd_server, tmp_path: Path, command: str, python: str) -> None:
    base = f"{BASE}-denied-{command}"
    lfns = [f"{base}/00000/f{i}.root" for i in range(6)]
    paths = [xrootd_server.put(lfn) for lfn in lfns]
    paths[0].parent.chmod(0o555)  # the server runs as nobody: a real EACCES from its file system
    try:
        sc = xrootd_site(world_dir("msunmerged-xrd-"), xrootd_server.url, command)
        rc, lines = run_worker(tmp_path / "job", manifest(lfns, max_consecutive_denied=4, scan_started=scan_start()), sc, python=python,
                               prefix=["nsenter", "-t", str(xrootd_server.pid), "-n"])
    finally:
        paths[0].parent.chmod(0o755)
    assert rc == 1
    outcomes = [files(lines)[lfn]["outcome"] for lfn in lfns]
    assert outcomes == ["permission_denied"] * 4 + ["not_attempted"] * 2
    assert all(p.exists() for p in paths)


@pytest.mark.slow
def test_unresponsive_server_gives_timeouts_after_bounded_retries(xrootd_server, tmp_path: Path) -> None:
    base = f"{BASE}-stopped"
    lfns = [f"{base}/00000/f{i}.root" for i in range(3)]
    paths = [xrootd_server.put(lfn) for lfn in lfns]
    sc = xrootd_site(world_dir("msunmerged-xrd-"), xrootd_server.url, "xrdcp")
    os.kill(xrootd_server.pid, signal.SIGSTOP)  # accepts connections (kernel), never answers
    try:
        rc, lines = run_worker(tmp_path / "job", manifest(lfns, file_timeout_s=2, retries=1, backoff_s=0.1, scan_started=scan_start()), sc,
                               prefix=["nsenter", "-t", str(xrootd_server.pid), "-n"],
                               env={"XRD_CONNECTIONRETRY": "1", "XRD_STREAMTIMEOUT": "2"})
    finally:
        os.kill(xrootd_server.pid, signal.SIGCONT)
    assert rc == 1
    out = files(lines)
    assert {out[lfn]["outcome"] for lfn in lfns} == {"timeout"}
    # The look before deleting (xrdfs stat) already gets no answer: no deletion is tried without it.
    assert {out[lfn]["attempts"] for lfn in lfns} == {0} and all("stat" in out[lfn]["error"] for lfn in lfns)
    assert all(p.exists() for p in paths)


@pytest.mark.parametrize("variant", HOSTILE)
@pytest.mark.parametrize("command,python", [("xrdcp", sys.executable), ("gfal2", SYSTEM_PYTHON), ("gfal2", sys.executable)],
                         ids=["xrdfs", "gfal2", "gfal-rm"])
def test_hostile_mapping_on_xrootd_deletes_nothing_outside(xrootd_server, tmp_path: Path, variant: str,
                                                           command: str, python: str) -> None:
    base = f"{BASE}-{variant}-{command}-{'sys' if python == SYSTEM_PYTHON else 'venv'}"
    ok = [f"{base}/00000/f{i}.root" for i in range(2)]
    other = [f"{base}/00001/g{i}.root" for i in range(2)]
    kept = [xrootd_server.put(lfn.replace("/store/unmerged/", "/store/data/")) for lfn in ok + other]
    plain = [xrootd_server.put(lfn) for lfn in ok + other]
    before = snapshot(xrootd_server.data)
    sc = hostile_site(world_dir("msunmerged-xrd-"), xrootd_server.url + "/", "XRootD", command, variant)
    rc, lines = run_worker(tmp_path / "job", manifest(ok + other, remove_dirs=[f"{base}/00001"], scan_started=scan_start()), sc, python=python,
                           prefix=["nsenter", "-t", str(xrootd_server.pid), "-n"])
    assert rc == 1, summary(lines)
    out = files(lines)
    refused = other if variant == "one_dataset" else ok + other
    assert {(out[x]["outcome"], out[x]["reason"]) for x in refused} == {("refused", "pfn_outside_unmerged")}
    assert {out[x]["outcome"] for x in ok if x not in refused} <= {"deleted"}
    gone, changed = changes(before, snapshot(xrootd_server.data))
    assert all(p.exists() for p in kept) and not changed
    assert gone == {str(p) for p, x in zip(plain, ok + other) if x not in refused}


@pytest.mark.parametrize("rucio,agrees", [("root://127.0.0.1/store/unmerged", True),
                                          ("root://127.0.0.1:1095//store/unmerged/", False),
                                          ("davs://127.0.0.1//store/unmerged/", False)])
def test_rucio_mapping_checked_on_xrootd(xrootd_server, tmp_path: Path, rucio: str, agrees: bool) -> None:
    base = f"{BASE}-rucio-{agrees}-{rucio[:4]}"
    lfns = [f"{base}/00000/f{i}.root" for i in range(3)]
    paths = [xrootd_server.put(lfn) for lfn in lfns]
    sc = xrootd_site(world_dir("msunmerged-xrd-"), xrootd_server.url, "xrdcp")
    man = manifest(lfns, remove_dirs=[f"{base}/00000"], unmerged_pfn=rucio, mapping_check="rucio",
                   scan_started=scan_start())
    rc, lines = run_worker(tmp_path / "job", man, sc, prefix=["nsenter", "-t", str(xrootd_server.pid), "-n"])
    if agrees:
        assert rc == 0 and not any(p.exists() for p in paths)
    else:
        assert rc == 3 and all(p.exists() for p in paths)
        assert {x["reason"] for x in lines if "lfn" in x or "dir" in x} == {"mapping_disagrees"}


@pytest.mark.parametrize("command,python", [("xrdcp", sys.executable), ("gfal2", SYSTEM_PYTHON)])
@pytest.mark.parametrize("dry_run", [False, True])
def test_files_modified_since_the_scan_on_xrootd(xrootd_server, tmp_path: Path, command: str, python: str,
                                                 dry_run: bool) -> None:
    """Written after the scan started, or (issue 23) recreated with the old mtime set back: xrootd's CTime tells."""
    base = f"{BASE}-mtime-{command}-{dry_run}"
    old = [f"{base}/00000/old{i}.root" for i in range(3)]
    new = [f"{base}/00000/new{i}.root" for i in range(2)]
    rewritten = f"{base}/00000/rewritten.root"
    for lfn in old + [rewritten]:
        xrootd_server.put(lfn, b"12345")
    started = scan_start()
    for lfn in new:
        xrootd_server.put(lfn)
    os.utime(xrootd_server.put(rewritten), (started - 1000, started - 1000))
    sc = xrootd_site(world_dir("msunmerged-xrd-"), xrootd_server.url, command)
    rc, lines = run_worker(tmp_path / "job", manifest(old + new + [rewritten, f"{base}/00000/gone.root"],
                                                      scan_started=started, dry_run=dry_run),
                           sc, python=python, prefix=["nsenter", "-t", str(xrootd_server.pid), "-n"])
    assert rc == 1
    out = files(lines)
    assert lines[0]["start"]["method"]["checks"] == "stat"
    assert [(out[x]["outcome"], out[x]["size"]) for x in old] == [("dry_run" if dry_run else "deleted", 5)] * 3
    assert [(out[x]["outcome"], out[x]["reason"]) for x in new + [rewritten]] == [("refused", "modified_since_scan")] * 3
    assert "changed at" in out[rewritten]["error"]
    assert out[f"{base}/00000/gone.root"]["outcome"] == "missing"
    assert all((xrootd_server.data / x.lstrip("/")).exists() == (x not in old or dry_run) for x in old + new)


@pytest.mark.parametrize("command,python,deleter", [("xrdcp", sys.executable, "xrootd"), ("gfal2", SYSTEM_PYTHON, "gfal2"),
                                                    ("gfal2", sys.executable, "gfal-rm")])
@pytest.mark.parametrize("dry_run", [False, True])
def test_a_line_naming_a_directory_is_not_a_file_on_xrootd(xrootd_server, tmp_path: Path, command: str, python: str,
                                                           deleter: str, dry_run: bool) -> None:
    """Issue 23: the look of every deleter (xrdfs stat flags, gfal2 stat, gfal-stat) refuses a directory or a
    fifo named as a file; nothing in the directory is touched. A dry run reports the same."""
    base = f"{BASE}-notafile-{deleter}-{dry_run}"
    inside = xrootd_server.put(f"{base}/00000/run/inside.root")
    os.mkfifo(inside.parent.parent / "fifo")
    plain = xrootd_server.put(f"{base}/00000/plain.root")
    lfns = [f"{base}/00000/run", f"{base}/00000/fifo", f"{base}/00000/plain.root"]
    sc = xrootd_site(world_dir("msunmerged-xrd-"), xrootd_server.url, command)
    rc, lines = run_worker(tmp_path / "job", manifest(lfns, dry_run=dry_run, scan_started=scan_start()), sc,
                           python=python, prefix=["nsenter", "-t", str(xrootd_server.pid), "-n"])
    out = files(lines)
    assert lines[0]["start"]["method"]["deleter"] == deleter and rc == 1
    assert [(out[x]["outcome"], out[x]["reason"]) for x in lfns[:2]] == [("refused", "not_a_file")] * 2
    assert out[lfns[2]]["outcome"] == ("dry_run" if dry_run else "deleted")
    assert inside.exists() and (inside.parent.parent / "fifo").exists() and plain.exists() == dry_run
