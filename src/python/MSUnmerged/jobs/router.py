"""A BatchBackend that sends each RSE's jobs to the backend its site uses."""
from __future__ import annotations

import threading
from pathlib import Path
from typing import Callable, Mapping, Optional, Sequence

from MSUnmerged.config import Config
from MSUnmerged.jobs.backend import BatchBackend, JobState, JobStatus
from MSUnmerged.jobs.spec import CleanupJob

# kind ("local", "condor", "slurm"), site -> a backend for that site
BackendFactory = Callable[[str, str], BatchBackend]


def rse_of(job_id: str) -> str:
    """The RSE of a ledger job id "<rse>:<dump version>:<n>"."""
    return job_id.rsplit(":", 2)[0]


def remove_unstarted(backend: BatchBackend, batch_ids: Mapping[str, str], reason: str) -> list[str]:
    """Remove those of these jobs that have not started; returns the removed job ids.

    A backend with `remove_pending` (HTCondor) decides atomically on its side; otherwise the jobs it
    reports QUEUED now are removed (the local backend starts jobs only when polled).
    """
    atomic = getattr(backend, "remove_pending", None)
    if atomic is not None:
        return list(atomic(batch_ids, reason))
    queued = [j for j, s in backend.poll(batch_ids).items() if s.state is JobState.QUEUED]
    for job_id in queued:
        backend.remove(job_id, batch_ids[job_id], reason)
    return queued


def backend_name(backend: BatchBackend, rse: str) -> str:
    """The batch system that runs the RSE's jobs (local, condor, slurm), as the job record names it."""
    return backend.for_rse(rse).name if isinstance(backend, RoutingBackend) else backend.name


class RoutingBackend:
    """Routes by RSE: `jobs.sites[rse]["backend"]` when set, else `jobs.backend`; one backend per (kind, site)."""

    name = "router"  # never on a job record: backend_name() names the backend the RSE's jobs go to

    def __init__(self, config: Config, factory: BackendFactory, site_of: Callable[[str], str]) -> None:
        self.config = config
        self.factory = factory
        self.site_of = site_of
        self._backends: dict[tuple[str, str], BatchBackend] = {}
        # One lock per backend: RSE threads of one site share it, and backends are not thread-safe.
        self._locks: dict[int, threading.Lock] = {}
        self._lock = threading.Lock()

    def for_rse(self, rse: str) -> BatchBackend:
        settings = self.config.jobs.sites.get(rse, {})
        kind = settings.get("backend") or self.config.jobs.backend
        site = settings.get("site") or self.site_of(rse)
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
        """remove_unstarted on each RSE's backend."""
        out: list[str] = []
        for backend, ids in self._split(batch_ids).values():
            with self._use(backend):
                out += remove_unstarted(backend, {i: batch_ids[i] for i in ids}, reason)
        return out
