"""The worker zipapp runs under Python 3.9 (a Debian bullseye chroot): it needs only the standard library."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Iterator

import pytest

from servers import built_dir, run_script
from servers.webdav import WebDavServer
from worker_kit import VOLUME, make_site, manifest, posix_site, worker_pyz

pytestmark = [pytest.mark.integration, pytest.mark.slow]

BASE = "/store/unmerged/RunIISummer20UL18RECO/Muon0/AODSIM/106X-v1"


@pytest.fixture(scope="module")
def py39_root() -> Path:
    root = built_dir("py39") / "root"
    run_script("python39-chroot.sh", str(root), timeout=1800)
    return root


@pytest.fixture
def job(py39_root: Path) -> Iterator[Path]:
    """A job folder of this test's own inside the chroot (sessions share the chroot)."""
    path = Path(tempfile.mkdtemp(prefix="job-", dir=py39_root))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def run_in_chroot(py39_root: Path, job: Path, sc_host: Path, man: dict) -> list[dict]:
    """The worker zipapp run by the chroot's Python 3.9 on `man`, from the job folder `job` inside the chroot, with
    the site configuration `sc_host` (a folder inside it); its report, once it ended with exit code 0."""
    inner = f"/{job.name}"
    shutil.copyfile(worker_pyz(), job / "worker.pyz")
    (job / "manifest.json").write_text(json.dumps(man))
    sc = "/" + str(sc_host.relative_to(py39_root))
    proc = subprocess.run(["chroot", str(py39_root), "/usr/bin/env", "-i", f"SITECONFIG_PATH={sc}", "PATH=/usr/bin:/bin",
                           "python3", f"{inner}/worker.pyz", f"{inner}/manifest.json", "--report", f"{inner}/report.jsonl"],
                          capture_output=True, text=True, timeout=120)
    lines = [json.loads(x) for x in (job / "report.jsonl").read_text().splitlines()]
    assert proc.returncode == 0, (proc.stderr, lines[-1])
    return lines


def test_worker_deletes_under_python39(py39_root: Path, job: Path) -> None:
    inner = f"/{job.name}"  # the job folder as the chroot sees it
    storage = job / "storage"
    storage.mkdir(parents=True)
    sc_host = posix_site(job, Path(f"{inner}/storage"))  # paths as the chroot sees them
    lfns = [f"{BASE}/00000/f{i}.root" for i in range(20)]
    for lfn in lfns[1:]:
        path = storage / lfn.lstrip("/")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"x")
    lines = run_in_chroot(py39_root, job, sc_host, manifest(lfns, remove_dirs=[f"{BASE}/00000"]))
    assert lines[0]["start"]["python"].startswith("3.9.")
    outcomes = [x["outcome"] for x in lines if "lfn" in x]
    assert outcomes == ["missing"] + ["deleted"] * 19
    assert [x["outcome"] for x in lines if "dir" in x] == ["removed"]
    assert not (storage / f"{BASE}/00000".lstrip("/")).exists()


def test_worker_deletes_over_webdav_under_python39(py39_root: Path, job: Path, wsgidav_server: WebDavServer) -> None:
    """The worker's WebDAV client (http.client, ssl) under Python 3.9: probe, PROPFIND, conditional DELETE."""
    sc_host = make_site(job, [{"protocol": "WebDAV", "access": "global-rw", "prefix": wsgidav_server.url}],
                        [{"volume": VOLUME, "protocol": "WebDAV"}])
    lfns = [f"{BASE}/py39-{job.name}/f{i}.root" for i in range(5)]
    for lfn in lfns:
        path = wsgidav_server.data / lfn.lstrip("/")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"x")
        os.utime(path, (0, 0))
    lines = run_in_chroot(py39_root, job, sc_host, manifest(lfns))
    assert lines[0]["start"]["python"].startswith("3.9.") and lines[0]["start"]["method"]["deleter"] == "webdav"
    assert [x["outcome"] for x in lines if "lfn" in x] == ["deleted"] * 5
    assert not any((wsgidav_server.data / lfn.lstrip("/")).exists() for lfn in lfns)
