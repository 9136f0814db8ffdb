"""Slurm batch backend: cleanup jobs as Slurm job arrays, through slurmrestd (REST, JWT) or the command line.

Jobs and service share a folder (`slurm.work_dir`) on the cluster's file system:

    <work_dir>/jobs/<job>/     manifest.json; written by the job: started (its raw Slurm job id),
                               report.jsonl (the worker's), exit_code, job.log; by remove(): removed (reason)
    <work_dir>/arrays/<tag>/   worker.pyz, jobs.txt (task index -> job folder), jobs.json, job.sh, slurm-<i>.log

The service reaches that folder, and in `cli` mode the Slurm commands, through `slurm.command_prefix`: every
command is handed to it as ONE shell-quoted string (as ssh expects); empty means `sh -c` on this machine.
The marker files let a job be judged after Slurm forgot it (MinJobAge), and tell our own cancellations
(REMOVED) from anyone else's (FAILED). Everything is written with umask 077: the storage credential each job
folder holds (docs/jobs.md) is readable by the job's user only.
"""
from __future__ import annotations

import hashlib
import io
import json
import math
import re
import shlex
import subprocess
import tarfile
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping, Optional, Protocol, Sequence

import requests

from MSUnmerged.config import Config, ConfigError, JobsConfig, SlurmConfig
from MSUnmerged.jobs.backend import BackendError, JobState, JobStatus, credential_for, job_environment
from MSUnmerged.jobs.spec import CleanupJob
from MSUnmerged.jobs.workerpkg import build_worker

NAME_PREFIX = "msunmerged-"
MARKERS = ("started", "exit_code", "removed")
# The worker runs in the job's folder: `worker.pyz manifest.json`, writing report.jsonl there.
MANIFEST_NAME = "manifest.json"
REPORT_NAME = "report.jsonl"
JOB_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

# Slurm job states (squeue %T, sacct State, REST job_state) -> ledger state; reasons for the failures.
_RUNNING = {"RUNNING", "CONFIGURING", "COMPLETING", "STAGE_OUT", "SIGNALING", "RESIZING"}
_QUEUED = {"PENDING", "REQUEUED", "REQUEUE_FED"}
_HELD = {"SUSPENDED": "suspended", "STOPPED": "stopped", "REQUEUE_HOLD": "held for requeue",
         "SPECIAL_EXIT": "special exit", "RESV_DEL_HOLD": "reservation deleted"}
_FAILED = {"TIMEOUT": "time limit", "NODE_FAIL": "node failure", "BOOT_FAIL": "node boot failure",
           "OUT_OF_MEMORY": "out of memory", "DEADLINE": "deadline", "PREEMPTED": "preempted",
           "REVOKED": "revoked"}
# Pending reasons under which the job will not start without someone acting: HELD (needs attention), with
# Slurm's reason kept. Matched on the reason's first part: "ReqNodeNotAvail, UnavailableNodes:c[1-2]".
_HOLD_REASONS = {"JobHeldUser", "JobHeldAdmin", "PartitionTimeLimit", "PartitionNodeLimit", "PartitionDown",
                 "PartitionInactive", "BadConstraints", "InvalidAccount", "InvalidQOS", "AssociationJobLimit",
                 "DependencyNeverSatisfied", "QOSMaxWallDurationPerJobLimit", "ReqNodeNotAvail", "NodeDown",
                 "launch failed requeued held",
                 # every node the job may use is drained or down (Slurm >= 21.08 words it so)
                 "Nodes required for job are DOWN"}


def _held(reason: str) -> bool:
    return reason.split(",")[0].strip() in _HOLD_REASONS


@dataclass
class SlurmRecord:
    """One array task as Slurm reports it."""

    batch_id: str  # "<array job id>_<task id>"; "" from accounting, which knows raw ids only
    name: str
    state: str
    reason: str = ""


def map_state(record: Optional[SlurmRecord], markers: Mapping[str, str]) -> tuple[JobState, str, Optional[int]]:
    """Ledger state, reason and exit code from Slurm's record (None: Slurm forgot the job) and the job's markers."""
    exit_code = int(markers["exit_code"]) if markers.get("exit_code", "").lstrip("-").isdigit() else None
    removed = markers.get("removed")
    if record is None:
        if exit_code is not None:
            return JobState.FINISHED, "", exit_code
        if removed is not None:
            return JobState.REMOVED, removed, None
        return JobState.VANISHED, "unknown to Slurm, no exit code", None
    state = record.state.split()[0].rstrip("+") if record.state else ""  # sacct: "CANCELLED by 0"
    reason = "" if record.reason in ("", "None") else record.reason
    if state in _QUEUED:
        return (JobState.HELD if _held(reason) else JobState.QUEUED), reason, None
    if state in _RUNNING:
        return JobState.RUNNING, reason, None
    if state in _HELD:
        return JobState.HELD, _HELD[state], None
    if state == "COMPLETED":
        return JobState.FINISHED, "", 0 if exit_code is None else exit_code
    if state == "FAILED":
        # The worker ran and exited non-zero: its report decides. Otherwise the job never got that far.
        if exit_code is not None:
            return JobState.FINISHED, "", exit_code
        return JobState.FAILED, f"job failed ({reason or 'no exit code'})", None
    if state == "CANCELLED":
        if removed is not None:
            return JobState.REMOVED, removed, None
        return JobState.FAILED, "cancelled outside MSUnmerged", None
    if state in _FAILED:
        return JobState.FAILED, _FAILED[state], None
    # Fail closed: a state we do not know never counts as done.
    return JobState.HELD, f"unknown Slurm state {record.state}", None


class Shell:
    """Runs shell command lines through the configured prefix (e.g. `ssh login.hpc`), or locally with `sh -c`."""

    def __init__(self, prefix: str, timeout_s: float) -> None:
        self.prefix = shlex.split(prefix) or ["sh", "-c"]
        self.timeout_s = timeout_s

    def run(self, line: str, stdin: bytes = b"", check: bool = True) -> subprocess.CompletedProcess:
        try:
            result = subprocess.run([*self.prefix, line], input=stdin, capture_output=True, timeout=self.timeout_s)
        except subprocess.TimeoutExpired:
            raise BackendError("timeout", f"no answer after {self.timeout_s} s: {line[:200]}") from None
        except OSError as exc:
            raise BackendError("unreachable", f"cannot run {self.prefix[0]}: {exc}") from None
        if check and result.returncode != 0:
            raise _cli_error(line, result)
        return result

    def write(self, path: str, data: bytes) -> None:
        d = shlex.quote(path.rsplit("/", 1)[0])
        self.run(f"mkdir -p {d} && cat > {shlex.quote(path)}.tmp && mv -f {shlex.quote(path)}.tmp {shlex.quote(path)}",
                 stdin=data)

    def read(self, path: str) -> Optional[bytes]:
        p = shlex.quote(path)
        result = self.run(f"if [ -f {p} ]; then cat {p}; else exit 3; fi", check=False)
        if result.returncode == 3:
            return None
        if result.returncode != 0:
            raise _cli_error(f"cat {path}", result)
        return result.stdout


def _cli_error(line: str, result: subprocess.CompletedProcess) -> BackendError:
    # Some commands (scontrol ping) say what is wrong on stdout only.
    err = (result.stderr or result.stdout or b"").decode(errors="replace").strip() or "no message"
    low = err.lower()
    if "permission denied" in low and ("publickey" in low or "password" in low):
        kind = "auth_refused"
    elif any(s in low for s in ("unable to contact slurm controller", "connection refused", "could not resolve",
                                "no route to host", "connection timed out", "zero bytes were transmitted")):
        kind = "unreachable"
    elif line.startswith("sbatch"):
        kind = "submit_failed"
    else:
        kind = "bad_answer"
    return BackendError(kind, f"{line.split(' ', 1)[0]} exited {result.returncode}: {err[-500:]}")


class Transport(Protocol):
    """How Slurm is talked to: the command line or slurmrestd."""

    def ping(self) -> None: ...

    def submit(self, script: str, spec: "ArraySpec") -> str: ...

    def query(self, array_ids: Iterable[str]) -> list[SlurmRecord]: ...

    def ours(self) -> list[SlurmRecord]: ...

    def accounting(self, raw_ids: Iterable[str]) -> dict[str, SlurmRecord]: ...

    def cancel(self, batch_id: str) -> None: ...


@dataclass
class ArraySpec:
    """What one job array asks of Slurm."""

    name: str
    size: int
    parallel: int
    time_limit_min: int
    memory_mb: int
    directory: str
    partition: str = ""
    account: str = ""
    qos: str = ""

    @property
    def indexes(self) -> str:
        return f"0-{self.size - 1}" + (f"%{self.parallel}" if self.parallel > 0 else "")


class CliTransport:
    """sbatch / squeue / sacct / scancel, run through the Shell (locally or on a login node)."""

    FORMAT = "%i|%j|%T|%r"

    def __init__(self, shell: Shell, sacct: str) -> None:
        self.shell = shell
        self.sacct = sacct

    def ping(self) -> None:
        result = self.shell.run("scontrol ping", check=False)
        out = result.stdout.decode(errors="replace").strip()
        if "DOWN" in out or (result.returncode == 0 and "UP" not in out):
            # "Slurmctld(primary) at <host> is DOWN": scontrol ran, the controller did not answer it.
            raise BackendError("unreachable", f"slurmctld does not answer `scontrol ping`: {out or 'no answer'}")
        if result.returncode != 0:
            raise _cli_error("scontrol ping", result)

    def submit(self, script: str, spec: ArraySpec) -> str:
        args = ["sbatch", "--parsable", f"--job-name={spec.name}", f"--array={spec.indexes}",
                f"--time={spec.time_limit_min}", f"--mem={spec.memory_mb}", "--ntasks=1", "--cpus-per-task=1",
                "--no-requeue", "--export=NONE", f"--chdir={spec.directory}",
                f"--output={spec.directory}/slurm-%a.log"]
        args += [f"--{k}={v}" for k, v in (("partition", spec.partition), ("account", spec.account),
                                           ("qos", spec.qos)) if v]
        out = self.shell.run(shlex.join(args), stdin=script.encode()).stdout.decode().strip()
        array_id = out.split(";")[0]
        if not array_id.isdigit():
            raise BackendError("bad_answer", f"sbatch answered {out!r}")
        return array_id

    def _squeue(self, selector: str) -> list[SlurmRecord]:
        result = self.shell.run(f"squeue -h -r -t all {selector} -o {shlex.quote(self.FORMAT)}", check=False)
        if result.returncode != 0:
            if b"Invalid job id" in result.stderr:  # every id asked for was purged
                return []
            raise _cli_error("squeue", result)
        records = []
        for line in result.stdout.decode().splitlines():
            parts = line.split("|")
            if len(parts) != 4:
                raise BackendError("bad_answer", f"squeue line {line!r}")
            batch_id, name, state, reason = parts
            records.append(SlurmRecord(batch_id, name, state, reason))
        return records

    def query(self, array_ids: Iterable[str]) -> list[SlurmRecord]:
        ids = sorted(set(array_ids))
        return self._squeue(f"-j {','.join(ids)}") if ids else []

    def ours(self) -> list[SlurmRecord]:
        return [r for r in self._squeue("--me") if r.name.startswith(NAME_PREFIX)]

    def accounting(self, raw_ids: Iterable[str]) -> dict[str, SlurmRecord]:
        ids = sorted(set(raw_ids))
        if not ids or not self.sacct:
            return {}
        line = f"{self.sacct} -n -P -X -j {','.join(ids)} -o JobIDRaw,JobName,State"
        out = self.shell.run(line).stdout.decode()  # sacct -c also warns on stderr about array fields
        found = {}
        for row in out.splitlines():
            parts = row.split("|")
            if len(parts) == 3 and parts[0] in ids:
                found[parts[0]] = SlurmRecord("", parts[1], parts[2])
        return found

    def cancel(self, batch_id: str) -> None:
        result = self.shell.run(f"scancel {shlex.quote(batch_id)}", check=False)
        if result.returncode != 0 and b"Invalid job id" not in result.stderr \
                and b"already completing or completed" not in result.stderr:
            raise _cli_error("scancel", result)


class RestTransport:
    """slurmrestd with a JWT (X-SLURM-USER-NAME / X-SLURM-USER-TOKEN)."""

    UNKNOWN_JOB = 2017  # "Invalid job id specified"

    def __init__(self, settings: SlurmConfig) -> None:
        if not settings.rest_url or not settings.user or not settings.token_file:
            raise BackendError("auth_refused", "slurm rest transport needs rest_url, user and token_file")
        self.base = f"{settings.rest_url.rstrip('/')}/slurm/{settings.rest_api}"
        self.user = settings.user
        self.token_file = Path(settings.token_file)
        self.timeout_s = settings.timeout_s
        self.session = requests.Session()

    def _token(self) -> str:
        try:
            text = self.token_file.read_text().strip()
        except OSError as exc:
            raise BackendError("auth_refused", f"cannot read the Slurm token: {exc}") from None
        return text.split("=", 1)[1] if text.startswith("SLURM_JWT=") else text  # `scontrol token` output too

    def _call(self, method: str, path: str, body: Optional[dict] = None) -> dict[str, Any]:
        headers = {"X-SLURM-USER-NAME": self.user, "X-SLURM-USER-TOKEN": self._token()}
        try:
            resp = self.session.request(method, self.base + path, json=body, headers=headers, timeout=self.timeout_s)
        except requests.Timeout:
            raise BackendError("timeout", f"slurmrestd {method} {path}: no answer in {self.timeout_s} s") from None
        except requests.RequestException as exc:
            raise BackendError("unreachable", f"slurmrestd {method} {path}: {exc}") from None
        if resp.status_code == 401:
            raise BackendError("auth_refused", f"slurmrestd refused the token: {resp.text[:200]}")
        if resp.status_code == 403:
            raise BackendError("auth_denied", f"slurmrestd denied {method} {path}: {resp.text[:200]}")
        try:
            data = resp.json()
        except ValueError:
            raise BackendError("bad_answer", f"slurmrestd {method} {path}: HTTP {resp.status_code} "
                                             f"{resp.text[:200]!r}") from None
        data["_status"] = resp.status_code
        return data

    @staticmethod
    def _errors(data: dict[str, Any]) -> list[dict[str, Any]]:
        return [e for e in data.get("errors", []) if e.get("error_number", 0) != 0 or e.get("description")]

    def ping(self) -> None:
        data = self._call("GET", "/ping")
        if errors := self._errors(data):
            text = "; ".join(str(e.get("description") or e.get("error")) for e in errors)
            # slurmctld rejects a bad token with an unspecific error; a controller that is down says "contact".
            kind = "unreachable" if "contact" in text.lower() or "connect" in text.lower() else "auth_refused"
            raise BackendError(kind, f"slurmrestd ping: {text}")
        if not any(p.get("ping") == "UP" for p in data.get("pings", [])):
            raise BackendError("unreachable", f"slurmctld not up: {data.get('pings')}")

    def submit(self, script: str, spec: ArraySpec) -> str:
        job: dict[str, Any] = {
            "name": spec.name, "array": spec.indexes, "time_limit": spec.time_limit_min,
            "memory_per_node": spec.memory_mb, "tasks": 1, "cpus_per_task": 1, "requeue": False,
            "current_working_directory": spec.directory, "standard_output": f"{spec.directory}/slurm-%a.log",
            "environment": {"PATH": JOB_PATH},
        }
        job.update({k: v for k, v in (("partition", spec.partition), ("account", spec.account),
                                      ("qos", spec.qos)) if v})
        data = self._call("POST", "/job/submit", {"script": script, "job": job})
        if errors := self._errors(data):
            raise BackendError("submit_failed", "; ".join(str(e.get("description") or e.get("error"))
                                                          for e in errors))
        if not data.get("job_id"):
            raise BackendError("bad_answer", f"slurmrestd submit: no job id in {data}")
        return str(data["job_id"])

    @staticmethod
    def _records(job: dict[str, Any]) -> list[SlurmRecord]:
        state, reason, name = job.get("job_state", ""), job.get("state_reason", ""), job.get("name", "")
        array_id, task = job.get("array_job_id"), job.get("array_task_id")
        if not array_id:  # not an array: not ours
            return []
        if task is None:  # the array's pending remainder, e.g. "3-9%2"
            return [SlurmRecord(f"{array_id}_{i}", name, state, reason)
                    for i in _expand(job.get("array_task_string", ""))]
        return [SlurmRecord(f"{array_id}_{task}", name, state, reason)]

    def query(self, array_ids: Iterable[str]) -> list[SlurmRecord]:
        records = []
        for array_id in sorted(set(array_ids)):
            data = self._call("GET", f"/job/{array_id}")
            errors = self._errors(data)
            if any(e.get("error_number") == self.UNKNOWN_JOB for e in errors):
                continue  # purged after MinJobAge
            if errors:
                raise BackendError("bad_answer", f"slurmrestd job {array_id}: {errors}")
            for job in data.get("jobs", []):
                records += self._records(job)
        return records

    def ours(self) -> list[SlurmRecord]:
        data = self._call("GET", "/jobs")
        if errors := self._errors(data):
            raise BackendError("bad_answer", f"slurmrestd jobs: {errors}")
        return [r for job in data.get("jobs", []) if job.get("user_name") in (self.user, None)
                and str(job.get("name", "")).startswith(NAME_PREFIX) for r in self._records(job)]

    def accounting(self, raw_ids: Iterable[str]) -> dict[str, SlurmRecord]:
        return {}  # the slurmdb endpoints need slurmdbd; purged jobs are judged by their markers

    def cancel(self, batch_id: str) -> None:
        data = self._call("DELETE", f"/job/{batch_id}")
        errors = [e for e in self._errors(data) if e.get("error_number") != self.UNKNOWN_JOB
                  and "already completing or completed" not in str(e.get("description", ""))]
        if errors:
            raise BackendError("bad_answer", f"slurmrestd cancel {batch_id}: {errors}")


def _expand(indexes: str) -> list[int]:
    """Task ids of an array expression such as "0-3,7,9-11%2"."""
    out: list[int] = []
    for part in indexes.split("%")[0].split(","):
        if m := re.fullmatch(r"(\d+)(?:-(\d+)(?::(\d+))?)?", part.strip()):
            lo, hi, step = int(m[1]), int(m[2] or m[1]), int(m[3] or 1)
            out += range(lo, hi + 1, step)
    return out


def _tar(files: Mapping[str, bytes]) -> bytes:
    """An uncompressed tar archive of these (relative path -> content) files, readable by their owner only."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mtime, info.mode = len(data), int(time.time()), 0o600
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def job_folder(job_id: str) -> str:
    """A file-system-safe, unique folder name for a ledger job id ("<rse>:<dump version>:<n>")."""
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", job_id)[:80]
    return f"{safe}-{hashlib.sha1(job_id.encode()).hexdigest()[:8]}"


JOB_SCRIPT = """#!/bin/bash
# MSUnmerged cleanup job array: task N runs the worker for the job folder on line N+1 of jobs.txt.
export PATH="${{PATH:-{path}}}"
JOBDIR=$(sed -n "$((SLURM_ARRAY_TASK_ID + 1))p" {array_dir}/jobs.txt)
cd "$JOBDIR" || exit 90
exec > job.log 2>&1
echo "$SLURM_JOB_ID $(hostname) $(date +%s)" > started
{exports}{setup}
{python} {array_dir}/worker.pyz {manifest}
rc=$?
echo "$rc" > exit_code.tmp && mv -f exit_code.tmp exit_code
exit "$rc"
"""


class SlurmBackend:
    """BatchBackend for a Slurm cluster; one instance per cluster (site)."""

    name = "slurm"

    def __init__(self, settings: SlurmConfig, siteconfigs: Optional[Mapping[str, str]] = None,
                 worker: Optional[Path] = None, jobs: Optional[JobsConfig] = None) -> None:
        """`siteconfigs`: RSE -> SITECONFIG_PATH for its jobs (else the node's own); `worker`: a built zipapp;
        `jobs`: where the storage credential of each RSE's jobs comes from."""
        self.jobs = jobs or JobsConfig()
        if not settings.work_dir.startswith("/"):
            raise ConfigError("slurm.work_dir", "must be an absolute path on the cluster")
        self.settings = settings
        self.siteconfigs = dict(siteconfigs or {})
        self.worker = worker
        self.shell = Shell(settings.command_prefix, settings.timeout_s)
        self.transport: Transport = (RestTransport(settings) if settings.transport == "rest"
                                     else CliTransport(self.shell, settings.sacct))
        self.work_dir = settings.work_dir.rstrip("/")

    @classmethod
    def from_config(cls, cfg: Config, site: str, worker: Optional[Path] = None) -> "SlurmBackend":
        """The backend for `site`: slurm settings with the site's overrides, SITECONFIG_PATH per RSE."""
        siteconfigs = {rse: s["siteconfig"] for rse, s in cfg.jobs.sites.items()
                       if s.get("siteconfig") and s.get("site", site) == site}
        return cls(cfg.slurm.for_site(site), siteconfigs, worker, cfg.jobs)

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
        if self.siteconfigs.get(rse):
            env["SITECONFIG_PATH"] = self.siteconfigs[rse]
        script = JOB_SCRIPT.format(
            path=JOB_PATH, array_dir=shlex.quote(array_dir), python=shlex.quote(self.settings.python),
            manifest=MANIFEST_NAME, setup=self.settings.setup,
            exports="".join(f"export {k}={shlex.quote(v)}\n" for k, v in env.items()))
        files = {f"jobs/{job_folder(j.job_id)}/{MANIFEST_NAME}": j.manifest_bytes() for j in jobs}
        if credential.file_name:  # a copy in each job's folder: a job never reads another's
            secret = credential.read()
            files.update({f"jobs/{job_folder(j.job_id)}/{credential.file_name}": secret for j in jobs})
        files.update({f"arrays/{tag}/worker.pyz": worker, f"arrays/{tag}/job.sh": script.encode(),
                      f"arrays/{tag}/jobs.json": json.dumps(ids).encode(),
                      f"arrays/{tag}/jobs.txt": "".join(f"{self._job_dir(i)}\n" for i in ids).encode()})
        # One command for the whole array (one ssh round trip, not one per job). A resubmitted job id must
        # not inherit the markers or report of an earlier attempt.
        w = shlex.quote(self.work_dir)
        self.shell.run(f"umask 077 && mkdir -p {w} && tar -x -f - -C {w} && while IFS= read -r d; do "
                       f"for f in {' '.join(MARKERS)} {REPORT_NAME} job.log; do rm -f \"$d/$f\"; done; "
                       f"done < {shlex.quote(array_dir)}/jobs.txt", stdin=_tar(files))
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
        raw = {job_id: m["started"].split()[0] for job_id, m in markers.items()
               if batch_ids[job_id] not in records and m.get("started")}
        accounted = self.transport.accounting(raw.values())
        out = {}
        for job_id, batch_id in batch_ids.items():
            record = records.get(batch_id) or accounted.get(raw.get(job_id, ""))
            state, reason, exit_code = map_state(record, markers[job_id])
            out[job_id] = JobStatus(job_id, state, batch_id, reason, exit_code)
        return out

    def find(self, job_ids: Sequence[str]) -> dict[str, str]:
        wanted = set(job_ids)
        found: dict[str, str] = {}
        arrays = {r.batch_id.split("_")[0]: r.name[len(NAME_PREFIX):] for r in self.transport.ours()}
        for array_id, tag in arrays.items():
            listing = self.shell.read(f"{self.work_dir}/arrays/{tag}/jobs.json")
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

    def remove(self, job_id: str, batch_id: str, reason: str) -> None:
        # The marker first: a pending task cancelled from its array leaves no record in Slurm at all.
        self.shell.write(f"{self._job_dir(job_id)}/removed", (reason.replace("\n", " ") + "\n").encode())
        self.transport.cancel(batch_id)
