"""A BatchBackend that sends each RSE's jobs to the backend its site uses."""
from __future__ import annotations

import functools
import importlib
import threading
from pathlib import Path
from typing import Callable, Mapping, Optional, Sequence

from MSUnmerged.config import BACKENDS, Config
from MSUnmerged.jobs.backend import BatchBackend, JobStatus
from MSUnmerged.jobs.spec import CleanupJob
from MSUnmerged.worker.ids import rse_of

# kind ("local", "condor", "slurm"), site -> a backend for that site
BackendFactory = Callable[[str, str], BatchBackend]
# Each kind's class, imported only when an RSE uses it (htcondor2 and requests are not needed by every service).
_CLASSES = {"local": "MSUnmerged.jobs.local:LocalBackend", "condor": "MSUnmerged.jobs.condor:CondorBackend",
            "slurm": "MSUnmerged.jobs.slurm:SlurmBackend"}
assert set(_CLASSES) == set(BACKENDS)


def build_backend(config: Config, kind: str, site: str, ledger_id: str = "") -> BatchBackend:
    """The batch backend of one kind for one site, through its from_config."""
    module, _, name = _CLASSES[kind].partition(":")
    cls: type[BatchBackend] = getattr(importlib.import_module(module), name)
    return cls.from_config(config, site, ledger_id=ledger_id)


def backend_name(backend: BatchBackend, rse: str) -> str:
    """The batch system that runs the RSE's jobs (local, condor, slurm), as the job record names it."""
    return backend.for_rse(rse).name if isinstance(backend, RoutingBackend) else backend.name


class RoutingBackend:
    """Routes by RSE: `jobs.sites.<rse>.backend` when set, else `jobs.backend`, to the backend of the RSE's site
    (`site_of`: sites.resolve_site); one backend per (kind, site), built by `factory` (default: build_backend)."""

    name = "router"  # never on a job record: backend_name() names the backend the RSE's jobs go to

    def __init__(self, config: Config, site_of: Callable[[str], str], ledger_id: str = "",
                 factory: Optional[BackendFactory] = None) -> None:
        self.config = config
        self.factory = factory or functools.partial(build_backend, config, ledger_id=ledger_id)
        self.site_of = site_of
        self._backends: dict[tuple[str, str], BatchBackend] = {}
        # One lock per backend: RSE threads of one site share it, and backends are not thread-safe.
        self._locks: dict[int, threading.Lock] = {}
        self._lock = threading.Lock()

    def for_rse(self, rse: str) -> BatchBackend:
        kind = self.config.jobs.setting(rse, "backend")
        site = self.site_of(rse)
        with self._lock:
            if (kind, site) not in self._backends:
                backend = self._backends[(kind, site)] = self.factory(kind, site)
                self._locks[id(backend)] = threading.Lock()
            return self._backends[(kind, site)]

    def _use(self, backend: BatchBackend) -> threading.Lock:
        return self._locks[id(backend)]

    def _split(self, job_ids: Sequence[str] | Mapping[str, str]) -> dict[int, tuple[BatchBackend, list[str]]]:
        groups: dict[int, tuple[BatchBackend, list[str]]] = {}
        for job_id in job_ids:
            backend = self.for_rse(rse_of(job_id))
            groups.setdefault(id(backend), (backend, []))[1].append(job_id)
        return groups

    def preflight(self, rse: Optional[str] = None) -> None:
        backends = [self.for_rse(rse)] if rse is not None else list(self._backends.values())
        for backend in backends:
            with self._use(backend):
                backend.preflight(rse)

    def submit(self, jobs: Sequence[CleanupJob]) -> dict[str, str]:
        out: dict[str, str] = {}
        by_backend: dict[int, tuple[BatchBackend, list[CleanupJob]]] = {}
        for job in jobs:
            backend = self.for_rse(job.rse)
            by_backend.setdefault(id(backend), (backend, []))[1].append(job)
        for backend, group in by_backend.values():
            with self._use(backend):
                out.update(backend.submit(group))
        return out

    def poll(self, batch_ids: Mapping[str, str]) -> dict[str, JobStatus]:
        out: dict[str, JobStatus] = {}
        for backend, ids in self._split(batch_ids).values():
            with self._use(backend):
                out.update(backend.poll({i: batch_ids[i] for i in ids}))
        return out

    def find(self, job_ids: Sequence[str]) -> dict[str, str]:
        out: dict[str, str] = {}
        for backend, ids in self._split(job_ids).values():
            with self._use(backend):
                out.update(backend.find(ids))
        return out

    def fetch_report(self, job_id: str, batch_id: str, dest: Path) -> Optional[Path]:
        backend = self.for_rse(rse_of(job_id))
        with self._use(backend):
            return backend.fetch_report(job_id, batch_id, dest)

    def remove(self, job_id: str, batch_id: str, reason: str) -> None:
        backend = self.for_rse(rse_of(job_id))
        with self._use(backend):
            backend.remove(job_id, batch_id, reason)

    def remove_pending(self, batch_ids: Mapping[str, str], reason: str) -> list[str]:
        out: list[str] = []
        for backend, ids in self._split(batch_ids).values():
            with self._use(backend):
                out += backend.remove_pending({i: batch_ids[i] for i in ids}, reason)
        return out

    def revalidated(self, batch_ids: Mapping[str, str]) -> None:
        for backend, ids in self._split(batch_ids).values():
            with self._use(backend):
                backend.revalidated({i: batch_ids[i] for i in ids})

    def close(self) -> None:
        """Close every backend built so far."""
        with self._lock:
            backends = list(self._backends.values())
        for backend in backends:
            backend.close()
