"""SlurmBackend: cleanup jobs as Slurm job arrays in the shared work folder (see the package docstring)."""
from __future__ import annotations

import hashlib
import io
import json
import math
import shlex
import tarfile
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Iterable, Mapping, Optional, Sequence

from MSUnmerged.config import Config, ConfigError, JobsConfig, SlurmConfig
from MSUnmerged.jobs.backend import JobStatus, credential_for, job_environment, remove_queued
from MSUnmerged.jobs.slurm.cli import CliTransport
from MSUnmerged.jobs.slurm.rest import RestTransport
from MSUnmerged.jobs.slurm.shell import Shell
from MSUnmerged.jobs.slurm.states import map_state
from MSUnmerged.jobs.slurm.transport import JOB_PATH, NAME_PREFIX, ArraySpec, Transport
from MSUnmerged.jobs.spec import CleanupJob
from MSUnmerged.jobs.workerpkg import build_worker
from MSUnmerged.worker.ids import (ARRAY_FOLDERS_NAME, ARRAY_IDS_NAME, ARRAY_SCRIPT_NAME, EXIT_CODE_NAME, JOB_LOG_NAME,
                                  MANIFEST_NAME, REMOVED_NAME, REPORT_NAME, STARTED_NAME, WORKER_NAME, job_folder)

MARKERS = (STARTED_NAME, EXIT_CODE_NAME, REMOVED_NAME)  # files a job's folder may hold besides the worker's (docstring)


def _tar(files: Mapping[str, bytes]) -> bytes:
    """An uncompressed tar archive of these (relative path -> content) files, readable by their owner only."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mtime, info.mode = len(data), int(time.time()), 0o600
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


JOB_SCRIPT = """#!/bin/bash
# MSUnmerged cleanup job array: task N runs the worker for the job folder on line N+1 of {folders}.
export PATH="${{PATH:-{path}}}"
JOBDIR=$(sed -n "$((SLURM_ARRAY_TASK_ID + 1))p" {array_dir}/{folders})
cd "$JOBDIR" || exit 90
exec > {log} 2>&1
echo "$SLURM_JOB_ID $(hostname) $(date +%s)" > {started}
{exports}{setup}
{python} {array_dir}/{worker} {manifest}
rc=$?
echo "$rc" > {exit_code}.tmp && mv -f {exit_code}.tmp {exit_code}
exit "$rc"
"""


class SlurmBackend:
    """BatchBackend for a Slurm cluster; one instance per cluster (site)."""

    name = "slurm"

    def __init__(self, settings: SlurmConfig, jobs: Optional[JobsConfig] = None,
                 worker: Optional[Path] = None) -> None:
        """`jobs`: each RSE's SITECONFIG_PATH and storage credential (job_environment); `worker`: a built
        zipapp (else one is built from this installation)."""
        self.jobs = jobs or JobsConfig()
        if not settings.work_dir.startswith("/"):
            raise ConfigError("slurm.work_dir", "must be an absolute path on the cluster")
        self.settings = settings
        self.worker = worker
        self.shell = Shell(settings.command_prefix, settings.timeout_s)
        self.transport: Transport = (RestTransport(settings) if settings.transport == "rest"
                                     else CliTransport(self.shell, settings.sacct))
        self.work_dir = settings.work_dir.rstrip("/")

    @classmethod
    def from_config(cls, config: Config, site: str, ledger_id: str = "") -> "SlurmBackend":
        """The cluster of `site`: [slurm] with its [slurm.sites.<site>] overrides (jobs live in its work_dir)."""
        return cls(config.slurm.for_site(site), config.jobs)

    def _job_dir(self, job_id: str) -> str:
        return f"{self.work_dir}/jobs/{job_folder(job_id)}"

    def _worker_bytes(self) -> bytes:
        """The worker zipapp shipped with every array (built from this installation when none was given)."""
        if self.worker is not None:
            return self.worker.read_bytes()
        with tempfile.TemporaryDirectory(prefix="msunmerged-slurm-") as tmp:
            return build_worker(Path(tmp)).read_bytes()

    def preflight(self, rse: Optional[str] = None) -> None:  # one cluster for every RSE of the site
        self.transport.ping()
        self.shell.write(f"{self.work_dir}/.preflight", str(time.time()).encode())

    def submit(self, jobs: Sequence[CleanupJob]) -> dict[str, str]:
        # One array per (RSE, memory, run time): resources and SITECONFIG_PATH are array-wide.
        groups: dict[tuple[str, int, int], list[CleanupJob]] = defaultdict(list)
        for job in jobs:
            groups[(job.rse, job.request_memory_mb, job.max_runtime_s)].append(job)
        worker = self._worker_bytes()
        out: dict[str, str] = {}
        for (rse, memory_mb, runtime_s), group in groups.items():
            for start in range(0, len(group), self.settings.array_max_size):
                chunk = group[start:start + self.settings.array_max_size]
                out.update(self._submit_array(chunk, rse, memory_mb, runtime_s, worker))
        return out

    def _submit_array(self, jobs: list[CleanupJob], rse: str, memory_mb: int, runtime_s: int,
                      worker: bytes) -> dict[str, str]:
        ids = [j.job_id for j in jobs]
        tag = hashlib.sha1(json.dumps([ids, time.time()]).encode()).hexdigest()[:12]
        array_dir = f"{self.work_dir}/arrays/{tag}"
        credential = credential_for(self.jobs, rse)
        env = job_environment(self.jobs, rse, credential)
        script = JOB_SCRIPT.format(
            path=JOB_PATH, array_dir=shlex.quote(array_dir), python=shlex.quote(self.settings.python),
            manifest=MANIFEST_NAME, setup=self.settings.setup, folders=ARRAY_FOLDERS_NAME, log=JOB_LOG_NAME,
            started=STARTED_NAME, worker=WORKER_NAME, exit_code=EXIT_CODE_NAME,
            exports="".join(f"export {k}={shlex.quote(v)}\n" for k, v in env.items()))
        files = {f"jobs/{job_folder(j.job_id)}/{MANIFEST_NAME}": j.manifest_bytes() for j in jobs}
        if credential.file_name:  # a copy in each job's folder: a job never reads another's
            secret = credential.read()
            files.update({f"jobs/{job_folder(j.job_id)}/{credential.file_name}": secret for j in jobs})
        files.update({f"arrays/{tag}/{WORKER_NAME}": worker, f"arrays/{tag}/{ARRAY_SCRIPT_NAME}": script.encode(),
                      f"arrays/{tag}/{ARRAY_IDS_NAME}": json.dumps(ids).encode(),
                      f"arrays/{tag}/{ARRAY_FOLDERS_NAME}": "".join(f"{self._job_dir(i)}\n" for i in ids).encode()})
        # One command for the whole array (one ssh round trip, not one per job). A resubmitted job id must
        # not inherit the markers or report of an earlier attempt.
        w = shlex.quote(self.work_dir)
        self.shell.run(f"umask 077 && mkdir -p {w} && tar -x -f - -C {w} && while IFS= read -r d; do "
                       f"for f in {' '.join(MARKERS)} {REPORT_NAME} {JOB_LOG_NAME}; do rm -f \"$d/$f\"; done; "
                       f"done < {shlex.quote(array_dir)}/{ARRAY_FOLDERS_NAME}", stdin=_tar(files))
        s = self.settings
        spec = ArraySpec(name=NAME_PREFIX + tag, size=len(jobs), parallel=s.array_parallel,
                         time_limit_min=max(1, math.ceil(runtime_s / 60)), memory_mb=memory_mb,
                         directory=array_dir, partition=s.partition, account=s.account, qos=s.qos)
        array_id = self.transport.submit(script, spec)
        return {job_id: f"{array_id}_{i}" for i, job_id in enumerate(ids)}

    def _markers(self, job_ids: Iterable[str]) -> dict[str, dict[str, str]]:
        """The marker files of many jobs in one command (folders on stdin; out: folder, marker, first line)."""
        folders = {self._job_dir(j): j for j in job_ids}
        if not folders:
            return {}
        loop = ("while IFS= read -r d; do for m in " + " ".join(MARKERS)
                + '; do if [ -f "$d/$m" ]; then printf "%s\\t%s\\t%s\\n" "$d" "$m" "$(head -n1 "$d/$m")"; fi;'
                " done; done")
        out: dict[str, dict[str, str]] = {j: {} for j in folders.values()}
        listing = "".join(f"{d}\n" for d in folders).encode()
        for line in self.shell.run(loop, stdin=listing).stdout.decode(errors="replace").splitlines():
            d, marker, value = (line.split("\t", 2) + ["", ""])[:3]
            if d in folders:
                out[folders[d]][marker] = value.strip()
        return out

    def poll(self, batch_ids: Mapping[str, str]) -> dict[str, JobStatus]:
        records = {r.batch_id: r for r in self.transport.query(b.split("_")[0] for b in batch_ids.values())}
        markers = self._markers(batch_ids)
        # Jobs Slurm's queue forgot (MinJobAge): ask accounting by the raw id the job wrote when it started.
        raw = {job_id: m[STARTED_NAME].split()[0] for job_id, m in markers.items()
               if batch_ids[job_id] not in records and m.get(STARTED_NAME)}
        accounted = self.transport.accounting(raw.values())
        out = {}
        for job_id, batch_id in batch_ids.items():
            record = records.get(batch_id) or accounted.get(raw.get(job_id, ""))
            state, reason, exit_code = map_state(record, markers[job_id])
            # The job script writes `started` before anything else: without it the task never ran (cancelled or
            # given up while pending), and its files' tries are unchanged (JobStatus.never_ran).
            out[job_id] = JobStatus(job_id, state, batch_id, reason, exit_code,
                                    started=bool(markers[job_id].get(STARTED_NAME)))
        return out

    def find(self, job_ids: Sequence[str]) -> dict[str, str]:
        wanted = set(job_ids)
        found: dict[str, str] = {}
        arrays = {r.batch_id.split("_")[0]: r.name[len(NAME_PREFIX):] for r in self.transport.ours()}
        for array_id, tag in arrays.items():
            listing = self.shell.read(f"{self.work_dir}/arrays/{tag}/{ARRAY_IDS_NAME}")
            if listing is None:
                continue
            for i, job_id in enumerate(json.loads(listing)):
                if job_id in wanted:
                    found[job_id] = f"{array_id}_{i}"
        return found

    def fetch_report(self, job_id: str, batch_id: str, dest: Path) -> Optional[Path]:
        data = self.shell.read(f"{self._job_dir(job_id)}/{REPORT_NAME}")
        if data is None:
            return None
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(data)
        return dest

    def remove_pending(self, batch_ids: Mapping[str, str], reason: str) -> list[str]:
        return remove_queued(self, batch_ids, reason)

    def revalidated(self, batch_ids: Mapping[str, str]) -> None:
        """Nothing held back: Slurm holds the jobs (revalidation removes those it must)."""

    def remove(self, job_id: str, batch_id: str, reason: str) -> None:
        # The marker first: a pending task cancelled from its array leaves no record in Slurm at all.
        self.shell.write(f"{self._job_dir(job_id)}/{REMOVED_NAME}", (reason.replace("\n", " ") + "\n").encode())
        self.transport.cancel(batch_id)

    def close(self) -> None:
        """Nothing runs between calls: Slurm keeps the jobs."""
