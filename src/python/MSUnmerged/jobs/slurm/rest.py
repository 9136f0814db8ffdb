"""slurmrestd with a JWT."""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Iterable, Optional

import requests

from MSUnmerged.config import SlurmConfig
from MSUnmerged.jobs.backend import BackendError
from MSUnmerged.jobs.slurm.states import SlurmRecord
from MSUnmerged.jobs.slurm.transport import JOB_PATH, NAME_PREFIX, ArraySpec
from MSUnmerged.worker.ids import ARRAY_LOG_NAME


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
            "current_working_directory": spec.directory, "standard_output": f"{spec.directory}/{ARRAY_LOG_NAME}",
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
