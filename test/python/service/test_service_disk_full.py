"""A full state disk is an outage with a name: the run stops with `state_disk_full` (not internal_error), nothing
half-written is left to strand files (a local job's folder is there whole or not at all; a job waits queued
while its disk is full, and a worker that found no room for its report is never-run, not failed), its free
space is in /metrics and on the page, and once space is back every file is deleted, none left unknown or failed.

A real small file system: a tmpfs of a few MiB mounted (as root) on the service's state folder; run_once against
a real SecantusDB and the real LocalBackend running the worker on a POSIX site.
"""
from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path
from typing import Iterator

import pytest
from pymongo.database import Database

from MSUnmerged import diskspace
from MSUnmerged.config import Config
from MSUnmerged.jobs.backend import JobState
from MSUnmerged.jobs.local import LocalBackend
from MSUnmerged.jobs.spec import CleanupJob, DeleteFilesStep
from MSUnmerged.rest import metrics, page
from MSUnmerged.samplesite import write_site
from MSUnmerged.worker.ids import ENV_NAME, MANIFEST_NAME
from service_kit import write_sources
from test_service_run import RSE, make_service

pytestmark = [pytest.mark.integration, pytest.mark.slow]
DISK_SITE = "T2_XX_Disk"
SIZE = 4 * 1024 * 1024  # the worker zipapp (~320 KB), plans and job folders fit; a filler takes the rest


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A tmpfs of SIZE bytes mounted on tmp_path/state (unmounted after the test)."""
    mount = tmp_path / "state"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={SIZE},mode=0700", "tmpfs", str(mount)], check=True)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def fill(disk: Path) -> None:
    """Take every free byte of the file system (the filler file grows until ENOSPC)."""
    fd = os.open(disk / "filler", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        for chunk in (65536, 512):
            try:
                while True:
                    os.write(fd, b"\0" * chunk)
            except OSError:
                pass
    finally:
        os.close(fd)
    assert os.statvfs(disk).f_bavail == 0


def free(disk: Path) -> None:
    (disk / "filler").unlink()


def half_written(jobs_dir: Path) -> list[str]:
    """Job folders a start would trip on: a manifest without its environment, or a temporary folder left."""
    if not jobs_dir.is_dir():
        return []
    return [p.name for p in jobs_dir.iterdir() if p.is_dir() and (
        p.name.startswith(".") or (p / MANIFEST_NAME).exists() != (p / ENV_NAME).exists())]


def test_a_full_state_disk_is_named_and_recovered(tmp_path: Path, mongo_db: Database, small_disk: Path) -> None:
    src = write_sources(tmp_path / "src", [RSE], files=400)
    svc = make_service(tmp_path, mongo_db, src, batch_dir=small_disk / "local-jobs")
    config = svc.config
    config.planner.files_per_job = 50
    assert Path(config.state_dir) == small_disk

    # Full from the start: the plan cannot be written.
    fill(small_disk)
    spaces = {s.folder: s for s in diskspace.measure(diskspace.folders(config))}
    assert spaces["state"].free == 0 and spaces["state"].size == SIZE
    text = "\n".join(f.name + " " + repr(f.samples) for f in metrics.disk_families(config))
    assert "msunmerged_disk_free_bytes" in text and "'folder': 'state'}, value=0.0" in text, text
    assert 'id="disk-low"' in page.disk_line(page.Context.from_config(config))
    first = svc.runner.run_once(RSE)
    assert (first.action, first.reason, first.source) == ("failed", "state_disk_full", "disk"), first
    assert svc.ledger.base.rse(RSE)["reason"] == "state_disk_full"

    # Space back, then full again between recording the plan and submitting its jobs.
    free(small_disk)

    def fill_after_recording(step: str, rse: str) -> None:
        if step == "recorded":
            fill(small_disk)
    svc.runner.hook = fill_after_recording
    second = svc.runner.run_once(RSE)
    assert (second.action, second.reason, second.source) == ("failed", "state_disk_full", "disk"), second
    assert mongo_db.files.count_documents({}) + mongo_db.buckets.count_documents({}) > 0  # the plan is recorded
    assert half_written(config.local_jobs_dir) == []

    # Space back: the same jobs go out whole and every file is deleted.
    svc.runner.hook = lambda step, rse: None
    free(small_disk)
    assert 'id="disk"' in page.disk_line(page.Context.from_config(config))
    for _ in range(6):
        if svc.runner.run_once(RSE, wait_s=60).state == "clean":
            break
    doc = svc.ledger.base.rse(RSE)
    c = doc["counters"]
    assert doc["state"] == "clean" and c["deleted"] == c["to_delete"] > 0, (doc["state"], c)
    assert c.get("unknown", 0) == 0 and c.get("failed", 0) == 0
    assert half_written(config.local_jobs_dir) == []


def local_site(tmp_path: Path, small_disk: Path, files: int) -> tuple[Config, str, list[Path]]:
    """A POSIX site with `files` files and a configuration whose state (and local jobs) are on the small disk."""
    storage = tmp_path / "storage"
    paths = [storage / f"store/unmerged/A/B/RAW/proc-v1/000/1/f{i}.root" for i in range(files)]
    for path in paths:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"x")
    siteconf = write_site(tmp_path / "siteconf", storage, site=DISK_SITE, rse=DISK_SITE, volume=f"{DISK_SITE}_posix")
    config = Config()
    config.service.state_dir = str(small_disk)
    config.service.dry_run = False
    return config, str(siteconf), paths


def cleanup_job(n: int, path: Path, storage: Path) -> CleanupJob:
    lfn = "/" + str(path.relative_to(storage))
    return CleanupJob(job_id=f"{DISK_SITE}:1:1-{n}", rse=DISK_SITE, site=DISK_SITE, deadline=time.time() + 600,
                      step=DeleteFilesStep(lfns=[lfn], dry_run=False, scan_started=time.time()))


def test_a_worker_that_cannot_start_on_a_full_disk_is_never_failed(tmp_path: Path, small_disk: Path,
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    """Whenever the disk fills, a local job is whole or absent, never failed with its files unknown: no room for
    its folder: nothing of it; its folder written, then full: it waits queued (its worker could write neither its
    pid file nor its report) and runs with space back; full as its worker starts: it ends either finished or as
    never run (nothing touched: the service plans it again)."""
    config, siteconf, paths = local_site(tmp_path, small_disk, 3)
    storage = tmp_path / "storage"
    backend = LocalBackend(config, siteconfig=siteconf)
    backend.preflight()  # the worker zipapp is built on the disk before it fills
    backend.close()  # it queues, never starts: the next backend on the folder starts its jobs
    first = cleanup_job(1, paths[0], storage)
    fill(small_disk)
    with pytest.raises(OSError):
        backend.submit([first])
    assert half_written(config.local_jobs_dir) == [] and backend.find([first.job_id]) == {}
    free(small_disk)
    batch = backend.submit([first])[first.job_id]
    fill(small_disk)
    runner = LocalBackend(config, siteconfig=siteconf)
    try:
        runner.poll({first.job_id: batch})  # adopted from disk
        runner.revalidated({first.job_id: batch})  # and kept, as a revalidation does: it may start
        seen = set()
        for _ in range(15):  # a few seconds with the disk full
            seen.add(runner.poll({first.job_id: batch})[first.job_id].state)
            time.sleep(0.3)
        assert seen <= {JobState.QUEUED, JobState.RUNNING}, seen
        assert "waits: no room on the disk" in caplog.text  # it was not started: its worker could not report
        assert paths[0].exists()
        free(small_disk)
        assert finished(runner, first.job_id, batch).exit_code == 0 and not paths[0].exists()

        second = cleanup_job(2, paths[1], storage)
        batch = runner.submit([second])[second.job_id]  # starts at once
        fill(small_disk)
        status = finished(runner, second.job_id, batch)
        if status.state is JobState.FAILED:  # its worker could not write its report's first line
            assert status.never_ran and paths[1].exists(), status
            assert runner.fetch_report(second.job_id, batch, tmp_path / "r.jsonl") is None
        else:
            assert status.exit_code in (0, None) and runner.fetch_report(second.job_id, batch, tmp_path / "r.jsonl")
        free(small_disk)
    finally:
        runner.close()


def finished(backend: LocalBackend, job_id: str, batch: str):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + 60
    while True:
        status = backend.poll({job_id: batch})[job_id]
        if status.state.terminal:
            return status
        assert time.monotonic() < deadline, f"{job_id} never ended: {status}"
        time.sleep(0.3)
