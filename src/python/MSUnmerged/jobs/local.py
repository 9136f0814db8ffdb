"""The embedded default batch backend: cleanup jobs run as local processes, same contract as at a site.

Each job gets a folder <work_dir>/<job>/ (0700) with manifest.json and env.json (the job environment:
SITECONFIG_PATH, the credential's file) and, when the RSE's jobs carry one, a copy of the storage credential
(0600). The worker zipapp, built once into <work_dir>, runs there as
`python3 <work_dir>/msunmerged-worker.pyz manifest.json --report report.jsonl` with that environment; its output
goes to worker.log, its pid to worker.pid (file names: worker/ids.py). Workers share the host with the service:
they run `jobs.local_nice` below it, with Python isolated and without its site module (WORKER_PYTHON_FLAGS).
At most `jobs.local_parallel` run at once from one work folder in the process, whatever their site (the
router makes one backend per site, and a partition of many sites must not start that many per site on one
host); the rest wait in submission order, across sites too (a slot goes to the job waiting longest, whichever site's
backend holds it), and each backend's supervisor thread starts its own as slots free up, between the service's cycles
too (it ends when nothing waits; a submit starts it again; `close` ends it for good). A waiting job's status says so
(WAIT_REASON).
Everything needed to answer `poll` and `find` after a restart is on disk: a queued job's manifest, the pid file of
a running worker and the report's final summary line, which holds the worker's exit code. A job an earlier service
left queued is queued again by the first `poll` that asks about it, but starts only once a revalidation has kept
it (`revalidated`; its status says it awaits one, and the service's poll revalidates then): its manifest's
protected list is as old as its submission, and a pump for any other job of the site (another RSE's poll, the
supervisor) must not start it first. The revalidation removes it instead when a file became protected
(`remove_pending` starts nothing).
"""
from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Mapping, Optional, Sequence

from MSUnmerged.config import Config
from MSUnmerged import diskspace
from MSUnmerged.diskspace import DISK_FULL
from MSUnmerged.jobs.backend import (BackendError, JobState, JobStatus, credential_for, deliver_report,
                                     job_environment, write_private)
from MSUnmerged.jobs.spec import CleanupJob
from MSUnmerged.jobs.workerpkg import build_worker
from MSUnmerged.worker.ids import (CLAIM_NAME, ENV_NAME, LOG_NAME, MANIFEST_NAME, PID_NAME, REPORT_NAME, WORKER_NAME,
                                  job_folder)

log = logging.getLogger(__name__)

BATCH_PREFIX = "local:"
PUMP_INTERVAL_S = 0.2  # how often the supervisor looks for a free slot while jobs wait
# CLAIM_NAME is made exclusively by whoever starts a job's worker, before it starts: two backends on one work
# folder (a restarted service beside its predecessor's threads, `run` beside `serve`) never both start a job.
CLAIM_GRACE_S = 60.0  # a claim with no pid file after this: its starter died before starting the worker
# The started process writes its own pid file, then becomes the worker (same pid): a starter killed right after
# the fork still leaves the running worker's pid file, never a claim without one (read, after the grace, as a
# worker never started, while it deletes).
_PID_THEN_WORKER = f'echo $$ > {PID_NAME}.tmp && mv -f {PID_NAME}.tmp {PID_NAME} && exec "$0" "$@"'
# The worker is standard library only: `-I` keeps the service's PYTHONPATH, user site and folder out of it, `-S`
# skips the site module and its .pth files (35 of 45 ms of CPU of a bare start on the benchmark machine).
# Local workers only: HTCondor and Slurm jobs start it with the node's plain python3, whose site-packages and
# PYTHONPATH may hold the site's gfal2 module (docs/jobs.md, "The worker's interpreter at sites").
WORKER_PYTHON_FLAGS = ("-I", "-S")

# Per process, shared by the backends of every site (they share the work folder): the worker zipapp built into
# each folder, and the (python, worker file) pairs `preflight` saw start. A file is known by its path, inode,
# mtime and size: a worker rebuilt or replaced by anyone is built or checked again.
FileKey = tuple[str, int, int, int]
_built: dict[Path, FileKey] = {}
_started_ok: set[tuple[tuple[str, ...], FileKey]] = set()
# Held while a worker's start is checked: the RSEs of a cycle preflight at once, and one check answers them all.
_preflight_lock = threading.Lock()
# Workers started per work folder by any of the process's backends (job folder name -> process; None: its slot
# taken, the process being started): each backend counts the others' too, and the workers of a backend nobody
# polls any more still free their slot when they end.
_running: dict[Path, dict[str, Optional[subprocess.Popen]]] = {}
# Jobs waiting for a slot per work folder, in submission order across the process's backends: a backend starts its
# next job only when no job submitted before it waits for the same free slots (docs/jobs.md).
_waiting: dict[Path, list[str]] = {}
_lock = threading.Lock()
WAIT_REASON = "waiting for a free local slot (jobs.local_parallel at once; slots go in submission order across RSEs)"
UNVETTED_REASON = "left queued by an earlier service: waits for its re-check against the current protected list"


def _file_key(path: Path) -> FileKey:
    seen = os.stat(path)
    return str(path), seen.st_ino, seen.st_mtime_ns, seen.st_size


class LocalBackend:
    """Runs cleanup jobs as local worker processes (BatchBackend protocol)."""

    name = "local"

    def __init__(self, config: Config, work_dir: Optional[Path] = None, siteconfig: Optional[str] = None,
                 python: Optional[str] = None, worker: Optional[Path] = None,
                 env: Optional[Mapping[str, str]] = None) -> None:
        self.config = config
        self.work_dir = Path(work_dir) if work_dir else config.local_jobs_dir
        self.siteconfig = siteconfig
        self.python = python or sys.executable
        self.parallel = max(1, config.jobs.local_parallel)
        self.nice = config.jobs.local_nice
        self.env = dict(os.environ if env is None else env)
        self._worker = Path(worker) if worker else None
        self._procs: dict[str, subprocess.Popen] = {}  # job dir name -> running worker
        self._queue: list[str] = []  # job dir names waiting to start
        # Of those, the ones an earlier service left queued on disk (adopted by _status): not started until a
        # revalidation kept them (`revalidated`), and not waiting for a slot (_waiting) meanwhile.
        self._unvetted: set[str] = set()
        self._removed: set[str] = set()
        self._retold: set[str] = set()  # jobs that could not be started, said so once
        # The supervisor thread and the service's calls share the queue: every use of it holds this lock.
        self._lock = threading.RLock()
        self._supervisor: Optional[threading.Thread] = None
        self._closed = threading.Event()

    @classmethod
    def from_config(cls, config: Config, site: str, ledger_id: str = "") -> "LocalBackend":
        """The site's jobs under <state_dir>/local-jobs (this ledger's own folder, so `ledger_id` is not needed);
        SITECONFIG_PATH of an RSE without its own `siteconfig`: that of another RSE of the site, if any."""
        siteconfigs = {s.site: s.siteconfig for s in config.jobs.sites.values() if s.site and s.siteconfig}
        return cls(config, siteconfig=siteconfigs.get(site))

    # -- helpers -----------------------------------------------------------------------------------

    def job_dir(self, job_id: str) -> Path:
        return self.work_dir / job_folder(job_id)

    def worker(self) -> Path:
        """The worker zipapp every job runs (built once into the work folder)."""
        if self._worker is None:
            dest = self.work_dir / WORKER_NAME
            with _lock:  # once per folder and process, not per site's backend
                if not dest.exists() or _built.get(dest) != _file_key(dest):
                    self.work_dir.mkdir(parents=True, exist_ok=True)
                    _built[dest] = _file_key(build_worker(dest))
            self._worker = dest
        return self._worker.resolve()

    def _environment(self, rse: str, jdir: Path) -> dict[str, str]:
        """The job's environment; its credential copied into its folder. Without a site configuration of the
        service's, the worker uses this host's SITECONFIG_PATH or CMS's default."""
        credential = credential_for(self.config.jobs, rse)
        env = job_environment(self.config.jobs, rse, credential)
        path = env.get("SITECONFIG_PATH") or self.siteconfig
        if path:
            env["SITECONFIG_PATH"] = str(Path(path).resolve())
        if credential.file_name:
            write_private(jdir / credential.file_name, credential.read())
        return env

    def _command(self, worker: Path) -> list[str]:
        """How the worker starts: `nice -n` execs it (same pid), `jobs.local_nice` below this process."""
        nice = ["nice", "-n", str(self.nice)] if self.nice else []
        return [*nice, self.python, *WORKER_PYTHON_FLAGS, str(worker)]

    @staticmethod
    def _dir_of(batch_id: str) -> str:
        if not batch_id.startswith(BATCH_PREFIX):
            raise BackendError("bad_answer", f"not a local batch id: {batch_id!r}")
        return batch_id[len(BATCH_PREFIX):]

    # -- protocol ----------------------------------------------------------------------------------

    def preflight(self, rse: Optional[str] = None) -> None:
        """The work folder is writable and the worker builds and starts with this python (any RSE)."""
        try:
            self.work_dir.mkdir(parents=True, exist_ok=True)
            worker = self.worker()
            command = self._command(worker)
            key = (tuple(command), _file_key(worker))  # once per worker file and command, not per RSE
            with _preflight_lock:
                if key not in _started_ok:
                    subprocess.run([*command, "--help"], env=self.env, stdin=subprocess.DEVNULL, capture_output=True,
                                   check=True, timeout=60)
                    _started_ok.add(key)
        except (OSError, subprocess.SubprocessError) as exc:
            if isinstance(exc, OSError) and exc.errno in DISK_FULL:  # the service's own disk: state_disk_full
                raise
            raise BackendError("unreachable", f"local worker cannot run: {exc}") from None

    def submit(self, jobs: Sequence[CleanupJob]) -> dict[str, str]:
        """Write each job's folder and queue it; up to `local_parallel` start at once, the others as slots free up."""
        with self._lock:
            return self._submit(jobs)

    def _submit(self, jobs: Sequence[CleanupJob]) -> dict[str, str]:
        out = {}
        worker = self.worker()
        for job in jobs:
            name = job_folder(job.job_id)
            jdir = self.work_dir / name
            if any((jdir / f).exists() for f in (CLAIM_NAME, PID_NAME, REPORT_NAME)):
                out[job.job_id] = BATCH_PREFIX + name  # already submitted: never run a job twice
                continue
            # Written again also when an earlier submission left it queued: a re-issued job's manifest is fresh.
            self._write_folder(job, jdir, worker)
            self._removed.discard(name)  # removed before it started, and submitted again (re-issued)
            self._unvetted.discard(name)  # its fresh manifest is as new as any submission's
            self._enqueue(name)
            out[job.job_id] = BATCH_PREFIX + name
        self._pump()
        return out

    def _write_folder(self, job: CleanupJob, jdir: Path, worker: Path) -> None:
        """The job's folder, whole or not at all: written beside it and renamed into place, so that a full disk
        or a crash never leaves a manifest without its environment (find() would take it for a queued job that
        cannot start). A folder left incomplete by an earlier process (never started: no claim) is replaced."""
        tmp = jdir.with_name(f".{jdir.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        try:
            tmp.mkdir(mode=0o700, parents=True)
            # The credential first: a missing or expiring one is refused before anything else is written.
            env = {**self._environment(job.rse, tmp), "MSUNMERGED_WORKER": str(worker)}
            job.write_manifest(tmp / MANIFEST_NAME)
            (tmp / ENV_NAME).write_text(json.dumps(env))
            shutil.rmtree(jdir, ignore_errors=True)
            os.rename(tmp, jdir)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise

    def _pump(self) -> None:
        """Reap finished workers and start queued ones while there is room; the supervisor starts the rest.
        Once closed, nothing starts: the queued jobs wait on disk for the next backend on this work folder."""
        if self._closed.is_set():
            return
        for name, proc in list(self._procs.items()):
            if proc.poll() is not None:
                self._forget(name)
        name = self._next()
        while name is not None and self._take_slot(name):
            if not self._start(name):  # it cannot start now (a full disk): it waits at the queue's head
                self._enqueue(name, first=True)  # and keeps its turn among the other backends' jobs
                break
            self._queue.remove(name)
            name = self._next()
        if self._next() is not None and (self._supervisor is None or not self._supervisor.is_alive()):
            self._supervisor = threading.Thread(target=self._supervise, name="local-jobs", daemon=True)
            self._supervisor.start()

    def _next(self) -> Optional[str]:
        """The queued job to start next: the first one not waiting for its re-check (_unvetted)."""
        return next((name for name in self._queue if name not in self._unvetted), None)

    def _adopt(self, name: str) -> None:
        """A job an earlier service left queued on disk: queued here, started only once revalidated."""
        if name not in self._queue:
            self._queue.append(name)
            self._unvetted.add(name)

    def revalidated(self, batch_ids: Mapping[str, str]) -> None:
        """These waiting jobs were kept by a revalidation against a current protected list: those adopted from an
        earlier service's queue may start now, behind the jobs already waiting."""
        with self._lock:
            for batch_id in batch_ids.values():
                name = self._dir_of(batch_id)
                if name in self._unvetted:
                    self._unvetted.discard(name)
                    self._enqueue(name)
            self._pump()

    def _enqueue(self, name: str, first: bool = False) -> None:
        """The job waits for a slot, behind every job submitted before it from this work folder (`first`: ahead of
        them all, a job that had its turn but could not start)."""
        if name not in self._queue:
            self._queue.append(name)
        with _lock:
            waiting = _waiting.setdefault(self.work_dir, [])
            if name not in waiting:
                waiting.insert(0 if first else len(waiting), name)

    def _unqueue(self, names: Sequence[str]) -> None:
        """These jobs no longer wait here (removed, or left on disk for the next backend)."""
        with _lock:
            waiting = _waiting.get(self.work_dir, [])
            for name in names:
                if name in waiting:
                    waiting.remove(name)

    def _say_once(self, name: str, why: str) -> None:
        """A job that cannot start is tried again at every pump while, say, the disk is full: one warning."""
        if name not in self._retold:
            self._retold.add(name)
            log.warning("local job %s waits: %s", name, why)

    def _supervise(self) -> None:
        """Start waiting jobs as running ones end, until none waits or the backend is closed."""
        while not self._closed.wait(PUMP_INTERVAL_S):
            with self._lock:
                self._pump()
                if self._next() is None or self._closed.is_set():
                    self._supervisor = None
                    return

    def close(self) -> None:
        """Stop the supervisor (after a start it is making): queued jobs stay queued on disk, running workers run
        on; a later backend on this work folder starts the ones and tracks the others (`poll`)."""
        self._closed.set()
        with self._lock:  # a pump under way ends first; none starts after it
            supervisor = self._supervisor
            self._unqueue(self._queue)  # they stay queued on disk, no longer ahead of the other backends' jobs
        if supervisor is not None:
            supervisor.join()

    def _take_slot(self, name: str) -> bool:
        """Take a slot for the job when fewer than `parallel` workers run from this work folder, whichever site's
        backend started them, and no job submitted before it waits for the slots free now (checked and taken at
        once: backends of other sites start theirs meanwhile)."""
        with _lock:
            procs = _running.setdefault(self.work_dir, {})
            for ended in [n for n, proc in procs.items() if proc is not None and proc.poll() is not None]:
                del procs[ended]
            waiting = _waiting.setdefault(self.work_dir, [])
            ahead = waiting.index(name) if name in waiting else 0
            if len(procs) + ahead >= self.parallel:
                return False
            procs[name] = None
            if name in waiting:
                waiting.remove(name)
            return True

    def _forget(self, name: str) -> Optional[subprocess.Popen]:
        """The job's worker is no longer this backend's to count (it ended, or is being stopped)."""
        with _lock:
            _running.get(self.work_dir, {}).pop(name, None)
        return self._procs.pop(name, None)

    def _start(self, name: str) -> bool:
        """Start the job's worker in the slot taken for it (_take_slot); True when it is off the queue (started, or
        started by another backend). On a full disk, or when the system refuses the start, the slot (and the claim)
        are given back: the job stays queued, whole, for a later try, instead of a claim that would fail it."""
        jdir = self.work_dir / name
        if diskspace.full(jdir):  # its starter could not write the worker's pid file, nor the worker its report
            self._forget(name)
            self._say_once(name, f"no room on the disk of {jdir}")
            return False
        try:
            os.close(os.open(jdir / CLAIM_NAME, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
        except FileExistsError:
            self._forget(name)
            return True  # another backend on this work folder started it
        except OSError as exc:
            self._forget(name)
            self._say_once(name, f"it cannot be started now: {exc}")
            return False
        try:
            extra = json.loads((jdir / ENV_NAME).read_text())
            env = {**self.env, **extra}
            command = self._command(Path(extra["MSUNMERGED_WORKER"]))
            with open(jdir / LOG_NAME, "ab") as log_file:
                # A process group of its own (stopped as one), not a session: under Linux's autogroup scheduling a
                # session is a group of its own that weighs as much as the whole service, whatever its nice.
                proc = subprocess.Popen(["/bin/sh", "-c", _PID_THEN_WORKER, *command, MANIFEST_NAME, "--report",
                                         REPORT_NAME], cwd=jdir, env=env, stdin=subprocess.DEVNULL, stdout=log_file,
                                        stderr=subprocess.STDOUT, process_group=0)
        except OSError as exc:
            self._forget(name)
            (jdir / CLAIM_NAME).unlink(missing_ok=True)
            self._say_once(name, f"it cannot be started now: {exc}")
            return False
        except BaseException:
            self._forget(name)
            raise
        with _lock:
            _running[self.work_dir][name] = proc
        self._procs[name] = proc
        return True

    def poll(self, batch_ids: Mapping[str, str]) -> dict[str, JobStatus]:
        with self._lock:
            self._pump()
            return {job_id: self._status(job_id, batch_id) for job_id, batch_id in batch_ids.items()}

    def _status(self, job_id: str, batch_id: str) -> JobStatus:
        name = self._dir_of(batch_id)
        jdir = self.work_dir / name
        if name in self._removed:
            return JobStatus(job_id, JobState.REMOVED, batch_id, "removed")
        if name in self._queue:
            unvetted = name in self._unvetted
            return JobStatus(job_id, JobState.QUEUED, batch_id, UNVETTED_REASON if unvetted else WAIT_REASON,
                             awaits_revalidation=unvetted)
        proc = self._procs.get(name)
        if proc is not None:
            return JobStatus(job_id, JobState.RUNNING, batch_id)
        summary = _summary_exit_code(jdir / REPORT_NAME)
        if summary is not None:
            return JobStatus(job_id, JobState.FINISHED, batch_id, exit_code=summary)
        pid = _read_pid(jdir / PID_NAME)
        if pid is not None and _is_our_worker(pid, jdir):
            return JobStatus(job_id, JobState.RUNNING, batch_id)  # started by an earlier instance
        if pid is not None and _no_room_to_report(jdir):
            return JobStatus(job_id, JobState.FAILED, batch_id, "its worker found no room for its report on a full "
                             "disk: nothing was touched", started=False)
        if pid is not None:
            return JobStatus(job_id, JobState.FAILED, batch_id, "worker ended without a final report line "
                             "(killed?)", exit_code=None)
        claimed = _age(jdir / CLAIM_NAME)
        if claimed is not None:  # another backend is starting it
            if claimed < CLAIM_GRACE_S:
                return JobStatus(job_id, JobState.RUNNING, batch_id)
            # Its starter writes the pid file before it execs the worker (_PID_THEN_WORKER): none, no worker ran.
            return JobStatus(job_id, JobState.FAILED, batch_id, "its starter stopped before starting the worker: "
                             "nothing was touched", started=False)
        if _queued_whole(jdir):
            # Queued by an earlier instance that stopped before starting it: queued here, started only once a
            # revalidation kept it (`revalidated`), which may remove it instead (remove_pending).
            self._adopt(name)
            return self._status(job_id, batch_id)
        return JobStatus(job_id, JobState.VANISHED, batch_id, "no such local job")

    def find(self, job_ids: Sequence[str]) -> dict[str, str]:
        return {j: BATCH_PREFIX + job_folder(j) for j in job_ids if _queued_whole(self.job_dir(j))}

    def fetch_report(self, job_id: str, batch_id: str, dest: Path) -> Optional[Path]:
        report = self.work_dir / self._dir_of(batch_id) / REPORT_NAME
        if not report.exists() or _no_room_to_report(report.parent):  # it never ran (_status): planned again
            return None
        return deliver_report(report, dest)

    def remove_pending(self, batch_ids: Mapping[str, str], reason: str) -> list[str]:
        """Exact: under the lock the supervisor takes, and with no pump in between (none starts), a job seen queued
        cannot start before it is removed."""
        with self._lock:
            queued = [j for j, b in batch_ids.items() if self._status(j, b).state is JobState.QUEUED]
            for job_id in queued:
                self._remove(batch_ids[job_id])
            return queued

    def remove(self, job_id: str, batch_id: str, reason: str) -> None:
        """Queued: dropped. Running: SIGTERM (the worker stops, reports the rest not attempted), then
        SIGKILL after 10 s. Finished: its folder is deleted (call after the report was fetched)."""
        with self._lock:
            self._remove(batch_id)

    def _remove(self, batch_id: str) -> None:
        name = self._dir_of(batch_id)
        jdir = self.work_dir / name
        if name in self._queue:
            self._queue.remove(name)
            self._unvetted.discard(name)
            self._unqueue([name])
            self._removed.add(name)
            # Its folder goes too, once its claim is taken (no backend on this work folder starts it then): a
            # folder left whole would be found again (find) and started with its old manifest, e.g. after a
            # crash between the job's re-issue being recorded and its new folder being written.
            try:
                os.close(os.open(jdir / CLAIM_NAME, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
            except OSError:
                return  # another backend started it (it stays tracked), or the folder is already gone
            shutil.rmtree(jdir, ignore_errors=True)
            return
        proc = self._forget(name)
        pid = proc.pid if proc is not None else _read_pid(jdir / PID_NAME)
        if pid is not None and (proc is not None and proc.poll() is None or proc is None and _is_our_worker(pid, jdir)):
            _stop_group(pid, proc)
            self._removed.add(name)
            return
        shutil.rmtree(jdir, ignore_errors=True)


def _no_room_to_report(jdir: Path) -> bool:
    """The job's worker wrote nothing in its report, on a full disk: as it writes its first line before touching
    anything, it did not run. (A worker that dies so on a disk with room is a failure, its files' tries spent: it
    would do so again.)"""
    try:
        wrote = (jdir / REPORT_NAME).stat().st_size > 0
    except OSError:
        wrote = False
    return not wrote and diskspace.full(jdir)


def _queued_whole(jdir: Path) -> bool:
    """The job's folder holds all a start needs (older versions wrote its files one by one, in place)."""
    return (jdir / MANIFEST_NAME).exists() and (jdir / ENV_NAME).exists()


def _summary_exit_code(report: Path) -> Optional[int]:
    """The exit code in the report's final summary line, None when there is none (yet)."""
    try:
        with open(report, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - 65536))
            lines = fh.read().splitlines()
    except OSError:
        return None
    if not lines:
        return None
    try:
        last = json.loads(lines[-1])
    except ValueError:
        return None
    code = last.get("exit_code") if isinstance(last, dict) and "summary" in last else None
    return code if isinstance(code, int) else None


def _age(path: Path) -> Optional[float]:
    """Seconds since the file was made, None when there is none."""
    try:
        return time.time() - path.stat().st_mtime
    except OSError:
        return None


def _read_pid(path: Path) -> Optional[int]:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def _is_our_worker(pid: int, jdir: Path) -> bool:
    """The process is alive and runs in this job's folder (a reused pid belongs to someone else)."""
    try:
        return Path(f"/proc/{pid}/cwd").resolve() == jdir.resolve()
    except OSError:
        return False


def _stop_group(pid: int, proc: Optional[subprocess.Popen]) -> None:
    for sig, wait in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            return
        end = time.monotonic() + wait
        while time.monotonic() < end:
            if proc is not None and proc.poll() is not None:
                return
            if proc is None and not Path(f"/proc/{pid}").exists():
                return
            time.sleep(0.05)
