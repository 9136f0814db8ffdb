"""Test doubles for the service tests: a batch system in a directory, and an offline sources directory.

The batch double keeps its state in files so several processes share it, and it logs every
submission, so tests can prove no job was submitted twice.
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Mapping, Optional, Sequence

from MSUnmerged import sample
from MSUnmerged.jobs.backend import JobState, JobStatus
from MSUnmerged.jobs.spec import CleanupJob


class DirBackend:
    """Jobs "run" instantly: every file is deleted, except names containing 'fail' (denied) or 'gone' (missing)."""

    name = "dir"

    def __init__(self, directory: Path, submit_delay_s: float = 0.0) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.submit_delay_s = submit_delay_s

    def preflight(self) -> None:
        pass

    def _job_dir(self, job_id: str) -> Path:
        return self.directory / job_id.replace(":", "_").replace("|", "_")

    def submit(self, jobs: Sequence[CleanupJob]) -> dict[str, str]:
        out = {}
        for job in jobs:
            time.sleep(self.submit_delay_s)
            d = self._job_dir(job.job_id)
            d.mkdir(exist_ok=True)
            job.write_manifest(d / "manifest.json")
            with open(self.directory / "submissions.log", "a") as log:
                log.write(f"{job.job_id} {os.getpid()} {len(job.step.lfns)}\n")
            out[job.job_id] = f"b-{d.name}"
        return out

    def poll(self, batch_ids: Mapping[str, str]) -> dict[str, JobStatus]:
        return {jid: JobStatus(jid, JobState.FINISHED if self._job_dir(jid).exists() else JobState.VANISHED, bid)
                for jid, bid in batch_ids.items()}

    def find(self, job_ids: Sequence[str]) -> dict[str, str]:
        return {jid: f"b-{self._job_dir(jid).name}" for jid in job_ids if self._job_dir(jid).exists()}

    def fetch_report(self, job_id: str, batch_id: str, dest: Path) -> Optional[Path]:
        manifest = json.loads((self._job_dir(job_id) / "manifest.json").read_text())
        lines = []
        for lfn in manifest["task"]["steps"][0]["lfns"]:
            if "fail" in lfn:
                rec = {"lfn": lfn, "status": "failed", "error_class": "permission_denied", "error": "denied"}
            elif "gone" in lfn:
                rec = {"lfn": lfn, "status": "missing"}
            else:
                rec = {"lfn": lfn, "status": "deleted", "size": 1000}
            lines.append(json.dumps(rec))
        dest.write_text("\n".join(lines) + "\n")
        return dest

    def remove(self, job_id: str, batch_id: str, reason: str) -> None:
        (self._job_dir(job_id) / "removed").write_text(reason)

    def submissions(self) -> list[str]:
        path = self.directory / "submissions.log"
        return [line.split()[0] for line in path.read_text().splitlines()] if path.exists() else []


def dump_lines(rse: str, files: int) -> tuple[list[str], list[str]]:
    """LFNs of `files` files over 10 datasets of one RSE, and the protected bases (2 datasets, one run-deep)."""
    lines = []
    for i in range(files):
        ds = i % 10
        lines.append(f"/store/unmerged/Run3Era/Primary{ds}/AODSIM/Proc{rse[-3:]}-v1/000/{(i // 10) % 7:03d}/f{i:06d}.root")
    protected = [f"/store/unmerged/Run3Era/Primary0/AODSIM/Proc{rse[-3:]}-v1",
                 f"/store/unmerged/Run3Era/Primary1/AODSIM/Proc{rse[-3:]}-v1/000/003"]
    return lines, protected


def write_sources(directory: Path, rses: Sequence[str], files: int = 1500, end_time: Optional[float] = None) -> Path:
    """An offline sources directory with a dump per RSE and one shared protected list."""
    (directory / "dumps").mkdir(parents=True, exist_ok=True)
    stats: dict = {}
    protected: list[str] = []
    end = time.time() - 60 if end_time is None else end_time
    for rse in rses:
        lines, prot = dump_lines(rse, files)
        (directory / "dumps" / f"{rse}.txt").write_text("\n".join(lines) + "\n")
        protected += prot
        stats.update(sample.stats_for(rse, files, end))
    (directory / "stats.json").write_text(json.dumps(stats))
    (directory / "protected.json").write_text(json.dumps({"result": protected}))
    return directory
