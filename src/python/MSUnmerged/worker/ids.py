"""The ids of files and jobs (the ledger's and the worker's) and the names of the files in a cleanup job's folder (on
every backend, and in a Slurm array's folder): the one place that defines them.

It lives in the worker package (standard library only, Python 3.9) because the worker reads the manifest and
writes the report under these names and shipped alone must stay self-contained; the service imports it from here.
"""
from __future__ import annotations

import hashlib
import re

MANIFEST_VERSION = 2  # of the job manifest (jobs/spec.py writes it, worker/manifest.py refuses any other)

# The files of a job's folder, on every backend.
MANIFEST_NAME = "manifest.json"  # a job's manifest in its folder, the worker's argument
REPORT_NAME = "report.jsonl"  # the worker's per-file report (JSON lines) in the job's folder
WORKER_NAME = "msunmerged-worker.pyz"  # the worker zipapp every job runs (jobs/workerpkg.py builds it)
TOKEN_NAME = "storage.token"  # the job's storage credential (worker/credentials.py), a WLCG bearer token
PROXY_NAME = "storage.proxy"  # ... or an X.509 proxy
# Local backend (jobs/local.py): the worker's output, its pid, the claim of whoever starts it, its environment.
LOG_NAME = "worker.log"
PID_NAME = "worker.pid"
CLAIM_NAME = "worker.claim"
ENV_NAME = "env.json"
# HTCondor (jobs/condor.py): the job's standard output and error, retrieved with the report.
STDOUT_NAME = "job.out"
STDERR_NAME = "job.err"
# Slurm (jobs/slurm): written by the job script: its output, its raw Slurm job id when it started, the worker's
# exit code; by the service's remove(): the reason. The markers are how a job is judged after Slurm forgot it.
JOB_LOG_NAME = "job.log"
STARTED_NAME = "started"
EXIT_CODE_NAME = "exit_code"
REMOVED_NAME = "removed"
# ... and in a Slurm array's folder (beside the worker): the job script, the task index -> job folder list, the
# task index -> job id list, and Slurm's own output of task %a.
ARRAY_SCRIPT_NAME = "job.sh"
ARRAY_FOLDERS_NAME = "jobs.txt"
ARRAY_IDS_NAME = "jobs.json"
ARRAY_LOG_NAME = "slurm-%a.log"


def gen_key(generation: float) -> str:
    """The generation (ConMon end_time) as it appears in ids and plan folder names."""
    return f"{float(generation):.3f}"


def gen_prefix(rse: str, generation: float) -> str:
    """"<rse>|<generation>|": what every record id of the generation starts with."""
    return f"{rse}|{gen_key(generation)}|"


def file_id(rse: str, generation: float, lfn: str) -> str:
    """A file record's id: "<rse>|<generation>|<lfn>"."""
    return gen_prefix(rse, generation) + lfn


def job_id(rse: str, generation: float, round_: int, n: int) -> str:
    """A cleanup job's id: "<rse>:<generation>:<round>-<n, 6 digits>"."""
    return f"{rse}:{gen_key(generation)}:{round_}-{n:06d}"


def rse_of(job_id: str) -> str:
    """The RSE of a job id (RSE names hold no ':')."""
    return job_id.rsplit(":", 2)[0]


def job_folder(job_id: str) -> str:
    """A file-system-safe, unique folder name for a job id (the same on every backend)."""
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", job_id)[:80]
    return f"{safe}-{hashlib.sha1(job_id.encode()).hexdigest()[:8]}"
