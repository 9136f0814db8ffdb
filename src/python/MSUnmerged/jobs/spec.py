"""A Cleanup task with one DeleteFiles step, built from one chunk of a plan; serialised as the job manifest."""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

MANIFEST_VERSION = 1


@dataclass
class DeleteFilesStep:
    """Parameters of the DeleteFiles step: what the worker at the site deletes, and how."""

    lfns: list[str]
    remove_dirs: list[str] = field(default_factory=list)  # may be removed once empty, leaf first
    keep_dirs: list[str] = field(default_factory=list)  # protected bases and their ancestors: never touched
    protected: list[str] = field(default_factory=list)  # protected bases relevant to these files: refuse under them
    dry_run: bool = True
    file_timeout_s: float = 120.0
    retries: int = 2
    backoff_s: float = 1.0
    max_consecutive_denied: int = 20
    name: str = "DeleteFiles"
    type: str = "DeleteFiles"


@dataclass
class CleanupJob:
    """One cleanup job: a Cleanup task holding a DeleteFiles step, for one RSE at one site."""

    job_id: str  # ledger id: "<rse>:<dump version>:<n>"
    rse: str
    site: str
    deadline: float  # epoch seconds; the worker refuses to start after it
    step: DeleteFilesStep
    generation: float = 0.0  # the dump version (ConMon end_time) this job comes from
    request_memory_mb: int = 500
    request_disk_mb: int = 500
    max_runtime_s: int = 4 * 3600
    task_name: str = "Cleanup"
    task_type: str = "Cleanup"

    def manifest(self) -> dict[str, Any]:
        """The manifest that travels with the job (read by the worker, standard library only)."""
        return {
            "version": MANIFEST_VERSION,
            "job_id": self.job_id,
            "rse": self.rse,
            "site": self.site,
            "generation": self.generation,
            "deadline": self.deadline,
            "resources": {"memory_mb": self.request_memory_mb, "disk_mb": self.request_disk_mb,
                          "runtime_s": self.max_runtime_s},
            "task": {"name": self.task_name, "type": self.task_type, "steps": [asdict(self.step)]},
        }

    def write_manifest(self, path: Path) -> Path:
        path.write_text(json.dumps(self.manifest(), indent=1))
        return path

    @classmethod
    def from_manifest(cls, data: dict[str, Any]) -> "CleanupJob":
        step = data["task"]["steps"][0]
        res = data.get("resources", {})
        return cls(job_id=data["job_id"], rse=data["rse"], site=data["site"], deadline=data["deadline"],
                   generation=data.get("generation", 0.0), step=DeleteFilesStep(**step),
                   request_memory_mb=res.get("memory_mb", 500), request_disk_mb=res.get("disk_mb", 500),
                   max_runtime_s=res.get("runtime_s", 4 * 3600), task_name=data["task"]["name"],
                   task_type=data["task"]["type"])
