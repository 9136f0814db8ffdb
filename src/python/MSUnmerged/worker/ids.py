"""Ids of the ledger's records and the names of a cleanup job's files: the one place that defines them.

It lives in the worker package (standard library only, Python 3.9) because the worker reads the manifest and
writes the report under these names and shipped alone must stay self-contained; the service imports it from here.
"""
from __future__ import annotations

import hashlib
import re

MANIFEST_VERSION = 2  # of the job manifest (jobs/spec.py writes it, worker/cleanup.py refuses any other)
MANIFEST_NAME = "manifest.json"  # a job's manifest in its folder, the worker's argument
REPORT_NAME = "report.jsonl"  # the worker's per-file report (JSON lines) in the job's folder


def gen_key(generation: float) -> str:
    """The generation (ConMon end_time) as it appears in ids and plan folder names."""
    return f"{float(generation):.3f}"


def file_id(rse: str, generation: float, lfn: str) -> str:
    """A file record's id: "<rse>|<generation>|<lfn>"."""
    return f"{rse}|{gen_key(generation)}|{lfn}"


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
