"""The worker zipapp against a real xrootd server: `xrdfs rm` (many paths per call) and gfal2 over root://."""
from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import pytest

from worker_kit import SYSTEM_PYTHON, dirs, files, make_site, manifest, run_worker, summary, world_dir

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
    man = manifest(lfns, remove_dirs=[f"{base}/00000", f"{base}/00001", base])
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
        rc, lines = run_worker(tmp_path / "job", manifest(lfns, max_consecutive_denied=4), sc, python=python,
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
        rc, lines = run_worker(tmp_path / "job", manifest(lfns, file_timeout_s=2, retries=1, backoff_s=0.1), sc,
                               prefix=["nsenter", "-t", str(xrootd_server.pid), "-n"],
                               env={"XRD_CONNECTIONRETRY": "1", "XRD_STREAMTIMEOUT": "2"})
    finally:
        os.kill(xrootd_server.pid, signal.SIGCONT)
    assert rc == 1
    out = files(lines)
    assert {out[lfn]["outcome"] for lfn in lfns} == {"timeout"}
    assert {out[lfn]["attempts"] for lfn in lfns} == {2}
    assert all(p.exists() for p in paths)
