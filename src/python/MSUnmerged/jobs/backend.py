"""The contract every batch backend (local, HTCondor, Slurm) fulfils for cleanup jobs."""
from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping, Optional, Protocol, Sequence

from MSUnmerged.config import CREDENTIAL_FILE_KEY, Config, JobsConfig
from MSUnmerged.jobs.spec import CleanupJob
from MSUnmerged.ledger.states import JobState
from MSUnmerged.worker import credentials


class BackendError(Exception):
    """A batch system refused or could not be reached. `kind` classifies it for the ledger:
    auth_refused, auth_denied, unreachable, timeout, submit_failed, bad_answer, credential_missing,
    credential_expired."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(f"{kind}: {message}")
        self.kind = kind
        self.message = message


@dataclass
class JobStatus:
    job_id: str
    state: JobState
    batch_id: str = ""
    reason: str = ""  # hold reason, failure reason, ...
    exit_code: Optional[int] = None
    started: Optional[bool] = None  # False: the batch system says it never started (None: not known)
    # Held back until a revalidation keeps it (`revalidated`): a local job adopted from an earlier service's queue.
    awaits_revalidation: bool = False

    @property
    def never_ran(self) -> bool:
        """It ended without ever starting (spool failed, removed or given up while idle or held)."""
        return self.state.terminal and self.started is False


class BatchBackend(Protocol):
    """Submits cleanup jobs somewhere they run at the site, tracks them and brings back reports."""

    name: str

    @classmethod
    def from_config(cls, config: Config, site: str, ledger_id: str = "") -> "BatchBackend":
        """The backend that runs `site`'s jobs, from the configuration alone; `ledger_id` (Ledger.instance_id)
        marks this ledger's jobs where several services may share the batch system."""

    def preflight(self, rse: Optional[str] = None) -> None:
        """Check the batch system (the one `rse`'s jobs go to, if given) is reachable and accepts our
        credentials; raise BackendError."""

    def submit(self, jobs: Sequence[CleanupJob]) -> dict[str, str]:
        """Submit jobs (all at once where the system allows); returns job_id -> batch_id."""

    def poll(self, batch_ids: Mapping[str, str]) -> dict[str, JobStatus]:
        """Current state of the given jobs (job_id -> batch_id); unknown ones come back VANISHED."""

    def find(self, job_ids: Sequence[str]) -> dict[str, str]:
        """Reconciliation after a crash: which of these job ids the batch system knows (job_id -> batch_id)."""

    def fetch_report(self, job_id: str, batch_id: str, dest: Path) -> Optional[Path]:
        """Bring the job's per-file report (JSON lines) to `dest`; None when there is none."""

    def remove(self, job_id: str, batch_id: str, reason: str) -> None:
        """Remove a job from the batch system (before it runs, or after its report was fetched)."""

    def remove_pending(self, batch_ids: Mapping[str, str], reason: str) -> list[str]:
        """Remove those of these jobs that have not started (revalidation); returns the removed job ids.
        A job that started meanwhile stays and keeps being tracked."""

    def revalidated(self, batch_ids: Mapping[str, str]) -> None:
        """A revalidation against a current protected list kept these waiting jobs: any the backend holds back
        until then (the local backend's jobs adopted from an earlier service's queue) may start. A no-op where the
        batch system holds the jobs."""

    def close(self) -> None:
        """Stop what the backend runs between calls (the service is closing): jobs already submitted stay
        where they are, and a later backend of the same kind finds them (`poll`, `find`)."""


def remove_queued(backend: BatchBackend, batch_ids: Mapping[str, str], reason: str) -> list[str]:
    """remove_pending by polling: the jobs reported QUEUED now, or HELD and known never to have started (a Slurm
    task pending on a drained node), are removed. On Slurm a task that starts between the two is stopped while
    running (its report still says what it did); the local backend has its own, exact."""
    queued = [j for j, s in backend.poll(batch_ids).items()
              if s.state is JobState.QUEUED or s.state is JobState.HELD and s.started is False]
    for job_id in queued:
        backend.remove(job_id, batch_ids[job_id], reason)
    return queued


def wait_for(backend: BatchBackend, batch_ids: Mapping[str, str], timeout: float,
             until: Callable[[JobStatus], bool] = lambda s: s.state.terminal,
             interval: float = 0.2) -> dict[str, JobStatus]:
    """Poll until `until` holds for every job or `timeout` passes; returns the last states."""
    deadline = time.monotonic() + timeout
    while True:
        states = backend.poll(batch_ids)
        if all(until(s) for s in states.values()) or time.monotonic() > deadline:
            return states
        time.sleep(interval)


def deliver_report(report: Path, dest: Path) -> Path:
    """Copy a fetched report to where the caller wants it (fetch_report's `dest`)."""
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(report, dest)
    return dest


@dataclass(frozen=True)
class JobCredential:
    """The storage credential an RSE's jobs carry: its kind and the service-side file (never logged)."""

    kind: str  # config.CREDENTIALS
    source: str = ""

    @property
    def file_name(self) -> str:
        """Its name in the job's folder (sandbox); "" for none."""
        return credentials.FILE_NAMES.get(self.kind, "")

    def read(self, now: Optional[float] = None) -> bytes:
        """The credential's bytes; BackendError credential_missing when the deployment has not provided it,
        credential_expired when it expires within the worker's margin (a job would be refused at the site)."""
        try:
            data = Path(self.source).read_bytes()
        except OSError as exc:
            raise BackendError("credential_missing", f"storage {self.kind} file {self.source}: "
                                                     f"{exc.strerror}") from None
        if not data.strip():
            raise BackendError("credential_missing", f"storage {self.kind} file {self.source} is empty")
        expires = credentials.token_expiry(data.decode("ascii", "replace")) if self.kind == credentials.TOKEN \
            else credentials.proxy_expiry(self.source)
        left = None if expires is None else expires - (time.time() if now is None else now)
        if left is not None and left < credentials.EXPIRY_MARGIN_S:
            raise BackendError("credential_expired", f"storage {self.kind} file {self.source} expires at "
                               f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(expires))} ({left:.0f} s left): "
                               "renew it; nothing was submitted")
        return data

    def check(self) -> None:
        """BackendError when a credential the jobs must carry is missing, empty or expiring (read)."""
        if self.kind in credentials.FILE_NAMES:
            self.read()


def credential_for(jobs: JobsConfig, rse: str) -> JobCredential:
    """jobs.sites.<rse>.credential, else jobs.credential, with its configured file."""
    kind = jobs.setting(rse, "credential") or "none"
    key = CREDENTIAL_FILE_KEY.get(kind)
    return JobCredential(kind, os.path.expanduser(getattr(jobs, key)) if key else "")


def job_environment(jobs: JobsConfig, rse: str, credential: Optional[JobCredential] = None) -> dict[str, str]:
    """What a job's environment must hold besides the batch system's: its SITECONFIG_PATH when the service
    sets one (else the node's own is used), and where its credential file is, relative to the job's folder."""
    env = {}
    siteconfig = jobs.setting(rse, "siteconfig")
    if siteconfig:
        env["SITECONFIG_PATH"] = siteconfig
    cred = credential or credential_for(jobs, rse)
    env.update(credentials.job_env(cred.kind, cred.file_name))
    return env


def write_private(path: Path, data: bytes) -> None:
    """Write a file only its owner may read (0600), in a folder only its owner may enter (0700)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.parent.chmod(0o700)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    os.replace(tmp, path)
