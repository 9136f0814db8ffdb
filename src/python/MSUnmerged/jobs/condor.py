"""HTCondor backend: cleanup jobs go to a (remote) schedd with tokens, inputs spooled, reports retrieved.

One submit call per (schedd, site, resources) makes one cluster with one proc per cleanup job (itemdata).
Each job carries its ledger id in the job attribute `MSUnmergedJobId`, and the id of the ledger that made it
in `MSUnmergedLedger`, so `find()` can tell after a crash which jobs the schedd already has, and two services
(two ledgers) sharing a schedd never take each other's jobs for their own.

Batch ids read "<cluster>.<proc>@<schedd name>"; schedd names may themselves contain "@", so the first "@"
separates them.

The storage credential (docs/jobs.md): a proxy is delegated by HTCondor (`x509userproxy`); a token goes as
an input file, copied into the job's folder (0600) only until it is spooled, and named by BEARER_TOKEN_FILE.

Security settings (token directory or SciToken file) are process-wide in the bindings: one process talks
with one identity. Token contents and paths are never logged.
"""
from __future__ import annotations

import json
import logging
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping, Optional, Sequence

# The service has no HTCondor installation of its own: without this the bindings look for one and warn.
os.environ.setdefault("CONDOR_CONFIG", "/dev/null")
import htcondor2  # noqa: E402

from MSUnmerged.config import Config, CondorConfig, JobsConfig  # noqa: E402
from MSUnmerged.jobs.backend import (BackendError, JobCredential, JobState, JobStatus, credential_for,  # noqa: E402
                                     deliver_report, job_environment, write_private)
from MSUnmerged.jobs.spec import CleanupJob  # noqa: E402
from MSUnmerged.sitelimits import in_flight_cap  # noqa: E402
from MSUnmerged.worker.ids import (MANIFEST_NAME, REPORT_NAME, STDERR_NAME, STDOUT_NAME, WORKER_NAME,  # noqa: E402
                                  job_folder)

log = logging.getLogger(__name__)

JOB_ID_ATTR = "MSUnmergedJobId"
LEDGER_ATTR = "MSUnmergedLedger"
REMOVE_PREFIX = "MSUnmerged: "  # RemoveReason of our own removals, to tell them from the schedd's
SPOOLING_HOLD = 16  # HoldReasonCode while a spool=True submit waits for its input files
SPOOL_GRACE_S = 3600  # a job still waiting for its inputs this long lost its submitter: remove it
# The folder this MSUnmerged is imported from: the preflight child imports the same code, whatever is installed.
CODE_ROOT = str(Path(__file__).resolve().parents[2])
KEEP_COMPLETED_S = 10 * 24 * 3600  # completed jobs whose outputs were never retrieved leave after this
PROJECTION = [JOB_ID_ATTR, LEDGER_ATTR, "ClusterId", "ProcId", "JobStatus", "HoldReason", "HoldReasonCode", "ExitCode",
              "ExitBySignal", "ExitSignal", "RemoveReason", "StageOutFinish", "EnteredCurrentStatus", "NumJobStarts"]
_JOB_ID_RE = re.compile(r"[A-Za-z0-9_.:+-]+")
_BATCH_ID_RE = re.compile(r"(\d+)\.(\d+)@(.+)")
_MEMBER_CHUNK = 500  # job ids per query constraint
# An RSE's cap as a concurrency limit the pool enforces: each job takes 1/(cap + 1/2) of the limit
# `msunmerged.<RSE>`, whose size the pool's negotiator sets to 1 for all of them at once with
# CONCURRENCY_LIMIT_DEFAULT_MSUNMERGED = 1 (docs/condor.md): cap jobs fit, one more does not.
LIMIT_PREFIX = "msunmerged"


def concurrency_limit(rse: str, cap: int) -> str:
    """The `concurrency_limits` value of a job of an RSE whose jobs may run `cap` at once."""
    return f"{LIMIT_PREFIX}.{rse}:{1.0 / (cap + 0.5):.9g}"


def parse_batch_id(batch_id: str) -> tuple[int, int, str]:
    """'12.3@schedd' -> (12, 3, 'schedd')."""
    m = _BATCH_ID_RE.fullmatch(batch_id)
    if not m:
        raise ValueError(f"not an HTCondor batch id: {batch_id!r}")
    return int(m.group(1)), int(m.group(2)), m.group(3)


def child_env() -> dict[str, str]:
    """This process's environment, with the folder of this MSUnmerged first on the child's import path."""
    path = [CODE_ROOT, *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(path)}


# How a connection the schedd closed reads in the bindings' messages (lower case).
CONNECTION_CLOSED = ("connection closed", "connection reset by peer", "broken pipe")


def classify(text: str, default: str = "bad_answer") -> str:
    """Map an HTCondor error message (or the bindings' debug log) onto a BackendError kind."""
    if "SECMAN:2010" in text or '"DENIED"' in text or "PERMISSION DENIED" in text:
        return "auth_denied"
    if "AUTHENTICATE:" in text or "Failed to authenticate" in text:
        return "auth_refused"
    if "SECMAN:2007" in text or "timed out" in text.lower():
        return "timeout"
    if ("CEDAR:6001" in text or "Failed to connect" in text or "communication with collector" in text
            or "Unable to locate" in text or "Unable to find" in text):
        return "unreachable"
    # A schedd restarting (after a crash, an upgrade) closes connections it had accepted: SECMAN:2011 "Connection
    # closed during command authorization", or the socket reset under the bindings.
    # SECMAN:2003: its connection failed to open.
    if "SECMAN:2011" in text or "SECMAN:2003" in text or any(words in text.lower() for words in CONNECTION_CLOSED):
        return "unreachable"
    return default


def configure_security(cfg: CondorConfig) -> None:
    """Point the bindings at our credentials (process-wide). A SciToken file wins over a token directory.
    condor.delegate_proxy false: x509userproxy is copied to the schedd, not delegated (docs/condor.md)."""
    htcondor2.param["DELEGATE_JOB_GSI_CREDENTIALS"] = str(cfg.delegate_proxy)
    if cfg.scitoken_file:
        htcondor2.param["SEC_CLIENT_AUTHENTICATION_METHODS"] = "SCITOKENS"
        htcondor2.param["SCITOKENS_FILE"] = cfg.scitoken_file
    elif cfg.token_dir:
        htcondor2.param["SEC_CLIENT_AUTHENTICATION_METHODS"] = "IDTOKENS"
        htcondor2.param["SEC_TOKEN_DIRECTORY"] = cfg.token_dir


@dataclass(frozen=True)
class Target:
    """Where a job goes: a pool's collector and a schedd name ('' = the pool's only/default schedd)."""

    pool: str
    schedd: str


def _quote(value: str) -> str:
    """A ClassAd string literal."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _member(attr: str, values: Iterable[Any]) -> str:
    items = ", ".join(_quote(v) if isinstance(v, str) else str(v) for v in values)
    return f"member({attr}, {{{items}}})"


def _chunks(seq: Sequence[Any], n: int = _MEMBER_CHUNK) -> Iterable[Sequence[Any]]:
    for i in range(0, len(seq), n):
        yield seq[i:i + n]


class CondorBackend:
    """BatchBackend on htcondor2: spool-mode submission to remote schedds, polling, retrieval, removal."""

    name = "condor"

    def __init__(self, condor: CondorConfig, jobs: JobsConfig, workdir: Path, worker: Optional[Path] = None,
                 ledger_id: str = "") -> None:
        """`ledger_id`: the ledger's instance id (Ledger.instance_id); "" only where one ledger uses the schedd."""
        if ledger_id and not _JOB_ID_RE.fullmatch(ledger_id):
            raise ValueError(f"ledger id {ledger_id!r} has characters a ClassAd attribute should not carry")
        self.ledger_id = ledger_id
        self.condor = condor
        self.jobs = jobs
        self.workdir = Path(workdir).resolve()  # manifests go out from here, outputs come back here
        self._worker = worker
        self._schedds: dict[str, htcondor2.Schedd] = {}  # schedd name -> handle
        self._names: dict[Target, str] = {}
        self._pools: dict[str, str] = {}  # schedd name -> pool it was located in
        self._lock = threading.Lock()
        configure_security(condor)

    @classmethod
    def from_config(cls, config: Config, site: str, ledger_id: str = "") -> "CondorBackend":
        """Every RSE's schedd is found per RSE (target), so one backend serves any site; work files go under
        <state_dir>/condor-jobs."""
        return cls(config.condor, config.jobs, config.state_dir / "condor-jobs", ledger_id=ledger_id)

    # ----- where jobs go ---------------------------------------------------------------------------------

    def target(self, rse: Optional[str] = None) -> Target:
        """The RSE's schedd: jobs.sites.<rse> may set `pool` and `schedd`, else the [condor] ones."""
        site = self.jobs.for_rse(rse or "")
        return Target(site.pool or self.condor.pool, site.schedd or self.condor.schedd)

    def _targets(self) -> list[Target]:
        found = [self.target()] + [self.target(rse) for rse in self.jobs.sites]
        return list(dict.fromkeys(found))

    def _locate(self, target: Target) -> tuple[str, htcondor2.Schedd]:
        with self._lock:
            name = self._names.get(target)
            if name is not None:
                return name, self._schedds[name]
        try:
            collector = htcondor2.Collector(target.pool) if target.pool else htcondor2.Collector()
            ad = collector.locate(htcondor2.DaemonType.Schedd, target.schedd or None)
        except Exception as exc:  # the bindings raise HTCondorException, ValueError, ...
            raise BackendError(classify(str(exc), "unreachable"),
                               f"cannot locate schedd {target.schedd or '(default)'} in pool "
                               f"{target.pool or '(default)'}: {exc}") from None
        if ad is None:  # htcondor2 25.x: the collector answered but knows no such schedd (stopped, renamed)
            raise BackendError("unreachable", f"no schedd {target.schedd or '(default)'} in pool "
                                              f"{target.pool or '(default)'}")
        name = str(ad.get("Name", target.schedd))
        with self._lock:
            self._names[target] = name
            self._pools[name] = target.pool
            self._schedds[name] = htcondor2.Schedd(ad)
            return name, self._schedds[name]

    def _schedd_by_name(self, name: str) -> htcondor2.Schedd:
        with self._lock:
            if name in self._schedds:
                return self._schedds[name]
        # After a restart: the schedd is one of the configured targets; an unnamed default one matches by Name.
        for target in self._targets():
            if target.schedd in (name, ""):
                found, schedd = self._locate(target)
                if found == name:
                    return schedd
        raise BackendError("unreachable", f"schedd {name} is not one of the configured schedds")

    # ----- preflight -------------------------------------------------------------------------------------

    def preflight(self, rse: Optional[str] = None) -> None:
        """Locate the RSE's schedd and ping it at WRITE level with our token, in a child process.

        A child process, because a schedd that accepts connections but never answers blocks the bindings
        for ~20 s and the bindings cache authenticated sessions: the child proves the token afresh and is
        killed after condor.ping_timeout_s without holding anything of this process.
        """
        target = self.target(rse)
        request = {"pool": target.pool, "schedd": target.schedd, "token_dir": self.condor.token_dir,
                   "scitoken_file": self.condor.scitoken_file}
        try:
            done = subprocess.run([sys.executable, "-m", __name__], input=json.dumps(request), text=True,
                                  capture_output=True, timeout=self.condor.ping_timeout_s, env=child_env())
        except subprocess.TimeoutExpired:
            raise BackendError("timeout", f"schedd {target.schedd or '(default)'} in pool "
                                          f"{target.pool or '(default)'} did not answer within "
                                          f"{self.condor.ping_timeout_s:g} s") from None
        try:
            answer = json.loads(done.stdout.strip().splitlines()[-1])
        except (IndexError, ValueError):
            last = (done.stderr.strip().splitlines() or [""])[-1][-300:]
            raise BackendError("bad_answer", f"preflight child failed (exit {done.returncode}): {last}") from None
        if answer.get("ok"):
            return
        # The bindings' exceptions say little ("Failed to start command."); their debug log names the cause.
        errors = [line.split("ERROR: ", 1)[1] for line in done.stderr.splitlines() if "ERROR: " in line]
        detail = "; ".join(errors) or answer.get("message", "")
        kind = classify(detail + " " + answer.get("message", ""), answer.get("kind") or "bad_answer")
        raise BackendError(kind, f"{answer.get('stage', 'ping')} of schedd {target.schedd or '(default)'} in pool "
                                 f"{target.pool or '(default)'}: {detail}")

    # ----- submission ------------------------------------------------------------------------------------

    def worker(self) -> Path:
        """The worker zipapp shipped with every job (built once into the work directory)."""
        if self._worker is None:
            from MSUnmerged.jobs.workerpkg import build_worker
            self._worker = build_worker(self.workdir / WORKER_NAME)
        return Path(self._worker).resolve()

    def job_dir(self, job_id: str) -> Path:
        return self.workdir / "jobs" / job_folder(job_id)

    def description(self, site: str, memory_mb: int, disk_mb: int, runtime_s: int,
                    env: Optional[Mapping[str, str]] = None, credential: Optional[JobCredential] = None,
                    rse: str = "") -> dict[str, str]:
        """The submit description shared by one cluster; per-job values come from itemdata. `env`: the job
        environment (job_environment), `credential`: the storage credential the jobs carry, `rse`: whose
        `max_in_flight` becomes a concurrency limit."""
        c = self.condor
        env = dict(env or {})
        inputs, delegated = [MANIFEST_NAME], {}
        if credential is not None and credential.kind == "proxy":
            delegated["x509userproxy"] = credential.source  # HTCondor delegates it and sets X509_USER_PROXY
            env.pop("X509_USER_PROXY", None)
        elif credential is not None and credential.file_name:
            inputs.append(credential.file_name)
        remove_when = " || ".join([
            f"(JobStatus == 5 && HoldReasonCode =!= {SPOOLING_HOLD} && time() - EnteredCurrentStatus > {c.hold_max_s})",
            f"(JobStatus == 5 && HoldReasonCode =?= {SPOOLING_HOLD} && time() - EnteredCurrentStatus > {SPOOL_GRACE_S})",
            "(JobStatus == 1 && time() > MSUnmergedDeadline)",
            f"(JobStatus == 2 && time() - EnteredCurrentStatus > {runtime_s})",
        ])
        desc = {
            "universe": "vanilla",
            "executable": str(self.worker()),
            "transfer_executable": "true",
            "arguments": MANIFEST_NAME,
            "initialdir": "$(msu_dir)",
            "transfer_input_files": ",".join(inputs),
            "should_transfer_files": "YES",
            "when_to_transfer_output": "ON_EXIT",
            "output": STDOUT_NAME,
            "error": STDERR_NAME,
            "request_cpus": "1",
            "request_memory": f"{memory_mb}",
            "request_disk": f"{disk_mb * 1024}",  # KiB
            "+DESIRED_Sites": _quote(site),
            "+MaxWallTimeMins": str(max(1, runtime_s // 60)),
            "accounting_group": c.accounting_group,
            "accounting_group_user": c.accounting_group_user,
            f"+{JOB_ID_ATTR}": '"$(msu_job_id)"',
            f"+{LEDGER_ATTR}": _quote(self.ledger_id),
            "+MSUnmergedDeadline": "$(msu_deadline)",
            "periodic_remove": remove_when,
            # Outputs stay until we retrieved them (StageOutFinish set), then the job may leave.
            "leave_in_queue": f"JobStatus == 4 && (StageOutFinish =?= undefined || StageOutFinish == 0) "
                              f"&& time() - EnteredCurrentStatus < {KEEP_COMPLETED_S}",
        }
        desc.update(delegated)
        cap = in_flight_cap(self.jobs, rse) if rse else 0
        if cap:
            desc["concurrency_limits"] = concurrency_limit(rse, cap)
        if env:
            desc["environment"] = _environment(env)
        if c.requirements:
            desc["requirements"] = c.requirements
        for name, expr in c.extra_attributes.items():
            desc[f"+{name.lstrip('+')}"] = expr
        return desc

    def submit(self, jobs: Sequence[CleanupJob]) -> dict[str, str]:
        """Submit in one cluster per (schedd, site, resources); returns job_id -> batch id.

        A BackendError may leave earlier clusters submitted: reconcile with find() before resubmitting.
        """
        groups: dict[tuple[Target, str, str, int, int, int], list[CleanupJob]] = {}
        for job in jobs:
            if not _JOB_ID_RE.fullmatch(job.job_id):
                raise ValueError(f"job id {job.job_id!r} has characters a ClassAd attribute should not carry")
            # Per RSE: its site config and credential go into the cluster's shared description.
            key = (self.target(job.rse), job.site, job.rse, job.request_memory_mb, job.request_disk_mb,
                   job.max_runtime_s)
            groups.setdefault(key, []).append(job)
        out: dict[str, str] = {}
        for (target, site, rse, mem, disk, runtime), group in groups.items():
            name, schedd = self._locate(target)
            credential = credential_for(self.jobs, rse)
            # Read first: a missing or empty credential fails the submission (credential_missing) before any
            # job folder is written. A proxy is delegated by HTCondor; a token travels as an input file.
            secret = credential.read() if credential.file_name else None
            if credential.kind == "proxy":
                secret = None
            items = []
            for job in group:
                jdir = self.job_dir(job.job_id)
                jdir.mkdir(parents=True, exist_ok=True)
                jdir.chmod(0o700)
                job.write_manifest(jdir / MANIFEST_NAME)
                if secret is not None:
                    write_private(jdir / credential.file_name, secret)
                items.append({"msu_job_id": job.job_id, "msu_dir": str(jdir), "msu_deadline": f"{job.deadline:.0f}"})
            env = job_environment(self.jobs, rse, credential)
            sub = htcondor2.Submit(self.description(site, mem, disk, runtime, env, credential, rse))
            try:
                try:
                    result = schedd.submit(sub, itemdata=iter(items), spool=True)
                except Exception as exc:
                    raise BackendError(classify(str(exc), "submit_failed"), f"submit to {name}: {exc}") from None
                cluster, first = result.cluster(), result.first_proc()
                try:
                    schedd.spool(result)
                except Exception as exc:
                    # Without their inputs these jobs can never run: take them back out at once.
                    self._act(schedd, htcondor2.JobAction.Remove, f"ClusterId == {cluster}", "spool failed")
                    raise BackendError(classify(str(exc), "submit_failed"), f"spool to {name}: {exc}") from None
            finally:
                if secret is not None:  # the schedd holds it now; no copy stays on the service host
                    for job in group:
                        (self.job_dir(job.job_id) / credential.file_name).unlink(missing_ok=True)
            for i, job in enumerate(group):
                out[job.job_id] = f"{cluster}.{first + i}@{name}"
            log.info("submitted %d jobs for site %s to %s as cluster %d", len(group), site, name, cluster)
        return out

    # ----- tracking --------------------------------------------------------------------------------------

    def _by_schedd(self, batch_ids: Mapping[str, str]) -> dict[str, dict[tuple[int, int], str]]:
        out: dict[str, dict[tuple[int, int], str]] = {}
        for job_id, batch_id in batch_ids.items():
            cluster, proc, name = parse_batch_id(batch_id)
            out.setdefault(name, {})[(cluster, proc)] = job_id
        return out

    def _constraint(self, keys: Iterable[tuple[int, int]]) -> str:
        """These jobs (cluster, proc), if they are this ledger's."""
        per_cluster: dict[int, list[int]] = {}
        for cluster, proc in keys:
            per_cluster.setdefault(cluster, []).append(proc)
        jobs = " || ".join(f"(ClusterId == {c} && {_member('ProcId', sorted(p))})" for c, p in per_cluster.items())
        return f"({jobs}){self._ledger_clause()}"

    def _ads(self, schedd: htcondor2.Schedd, name: str, wanted: Mapping[tuple[int, int], str],
             history: bool = True) -> dict[tuple[int, int], Any]:
        """Job ads from the queue, then the history for the rest; only ads whose job id attribute matches."""
        found: dict[tuple[int, int], Any] = {}
        keys = sorted(wanted)
        try:
            for chunk in _chunks(keys):
                for ad in schedd.query(self._constraint(chunk), PROJECTION):
                    found[(ad["ClusterId"], ad["ProcId"])] = ad
            rest = [k for k in keys if k not in found]
            if history:
                for chunk in _chunks(rest):
                    for ad in schedd.history(self._constraint(chunk), PROJECTION, match=len(chunk)):
                        found.setdefault((ad["ClusterId"], ad["ProcId"]), ad)
        except Exception as exc:
            raise BackendError(classify(str(exc), "bad_answer"), f"query of {name}: {exc}") from None
        # A rebuilt schedd reuses cluster ids, another ledger reuses job ids: an ad that is not our job is as
        # good as none.
        return {k: ad for k, ad in found.items() if ad.get(JOB_ID_ATTR) == wanted[k] and self._ours(ad)}

    def _ledger_clause(self) -> str:
        """A constraint term selecting this ledger's jobs ("" without a ledger id)."""
        return f" && {LEDGER_ATTR} =?= {_quote(self.ledger_id)}" if self.ledger_id else ""

    def _ours(self, ad: Any) -> bool:
        """The job was submitted by this ledger (jobs without the attribute predate it: ours when we have no id)."""
        return str(ad.get(LEDGER_ATTR) or "") == self.ledger_id

    @staticmethod
    def status_of(job_id: str, batch_id: str, ad: Any) -> JobStatus:
        """Map an HTCondor job ad onto a ledger JobStatus."""
        code = ad.get("JobStatus")
        if code == 1:
            return JobStatus(job_id, JobState.QUEUED, batch_id)
        if code in (2, 6, 7):  # running, transferring output, suspended
            return JobStatus(job_id, JobState.RUNNING, batch_id)
        if code == 5:
            if ad.get("HoldReasonCode") == SPOOLING_HOLD:  # waiting for its inputs: not a failure
                return JobStatus(job_id, JobState.QUEUED, batch_id, reason="spooling input")
            return JobStatus(job_id, JobState.HELD, batch_id,
                             reason=f"{ad.get('HoldReason', '')} (code {ad.get('HoldReasonCode')})")
        if code == 4:
            exit_code = ad.get("ExitCode")
            if ad.get("ExitBySignal"):
                exit_code = 128 + int(ad.get("ExitSignal", 0))
            return JobStatus(job_id, JobState.FINISHED, batch_id, exit_code=exit_code)
        if code == 3 and ad.get("ExitCode") is not None:
            # The job exited on its own and left the queue afterwards (after retrieval, or removed by us).
            return JobStatus(job_id, JobState.FINISHED, batch_id, exit_code=ad.get("ExitCode"))
        if code == 3:
            reason = str(ad.get("RemoveReason", ""))
            state = JobState.REMOVED if reason.startswith(REMOVE_PREFIX) else JobState.FAILED
            # Removed before it ever started (spool failed, idle past its deadline, held): no try of its files.
            return JobStatus(job_id, state, batch_id, reason=reason, started=bool(ad.get("NumJobStarts")))
        return JobStatus(job_id, JobState.FAILED, batch_id, reason=f"unexpected JobStatus {code}")

    def poll(self, batch_ids: Mapping[str, str]) -> dict[str, JobStatus]:
        """States from the queue and the history; outputs of newly completed jobs are retrieved in one call."""
        out: dict[str, JobStatus] = {}
        for name, wanted in self._by_schedd(batch_ids).items():
            schedd = self._schedd_by_name(name)
            ads = self._ads(schedd, name, wanted)
            to_retrieve = []
            for key, job_id in wanted.items():
                batch_id = batch_ids[job_id]
                ad = ads.get(key)
                if ad is None:
                    out[job_id] = JobStatus(job_id, JobState.VANISHED, batch_id,
                                            reason="in neither the queue nor the history")
                    continue
                out[job_id] = self.status_of(job_id, batch_id, ad)
                if ad.get("JobStatus") == 4 and not ad.get("StageOutFinish"):
                    to_retrieve.append(key)
            if to_retrieve:
                self._retrieve(schedd, name, to_retrieve)
        return out

    def _retrieve(self, schedd: htcondor2.Schedd, name: str, keys: Sequence[tuple[int, int]]) -> None:
        try:
            for chunk in _chunks(list(keys)):
                schedd.retrieve(self._constraint(chunk))
        except Exception as exc:
            raise BackendError(classify(str(exc), "bad_answer"), f"retrieve from {name}: {exc}") from None

    def fetch_report(self, job_id: str, batch_id: str, dest: Path) -> Optional[Path]:
        """Copy the job's report to `dest` (a file path); retrieves the outputs first if poll() did not."""
        report = self.job_dir(job_id) / REPORT_NAME
        if not report.exists():
            cluster, proc, name = parse_batch_id(batch_id)
            schedd = self._schedd_by_name(name)
            ad = self._ads(schedd, name, {(cluster, proc): job_id}, history=False).get((cluster, proc))
            if ad is None or ad.get("JobStatus") != 4:
                return None
            self._retrieve(schedd, name, [(cluster, proc)])
            if not report.exists():
                return None
        return deliver_report(report, dest)

    # ----- removal and reconciliation --------------------------------------------------------------------

    def _act(self, schedd: htcondor2.Schedd, action: Any, spec: str, reason: str) -> Any:
        # htcondor2 25.x drops a plain-string reason; the (reason, code) form reaches the schedd.
        return schedd.act(action, spec, reason=(REMOVE_PREFIX + reason, None))

    def remove(self, job_id: str, batch_id: str, reason: str) -> None:
        """Remove the job from the queue (a job already gone is fine) and drop its local files."""
        cluster, proc, name = parse_batch_id(batch_id)
        schedd = self._schedd_by_name(name)
        try:
            self._act(schedd, htcondor2.JobAction.Remove,
                      f"ClusterId == {cluster} && ProcId == {proc} && {JOB_ID_ATTR} == {_quote(job_id)}"
                      + self._ledger_clause(), reason)
        except Exception as exc:
            raise BackendError(classify(str(exc), "bad_answer"), f"remove {batch_id} from {name}: {exc}") from None
        shutil.rmtree(self.job_dir(job_id), ignore_errors=True)

    def remove_pending(self, batch_ids: Mapping[str, str], reason: str) -> list[str]:
        """Remove those of these jobs that have still not started (revalidation); returns the removed job ids.

        The constraint is evaluated by the schedd at removal time, so a job that started in between is left
        alone and keeps being tracked.
        """
        removed: list[str] = []
        for name, wanted in self._by_schedd(batch_ids).items():
            schedd = self._schedd_by_name(name)
            try:
                for chunk in _chunks(sorted(wanted)):
                    self._act(schedd, htcondor2.JobAction.Remove,
                              f"({self._constraint(chunk)}) && (JobStatus == 1 || JobStatus == 5)", reason)
                after = self._ads(schedd, name, wanted)
            except BackendError:
                raise
            except Exception as exc:
                raise BackendError(classify(str(exc), "bad_answer"), f"remove from {name}: {exc}") from None
            for key, job_id in wanted.items():
                ad = after.get(key)
                if ad is not None and ad.get("JobStatus") == 3 and str(ad.get("RemoveReason", "")).startswith(
                        REMOVE_PREFIX):
                    removed.append(job_id)
                    shutil.rmtree(self.job_dir(job_id), ignore_errors=True)
        return removed

    def revalidated(self, batch_ids: Mapping[str, str]) -> None:
        """Nothing held back: the schedd holds the jobs (revalidation removes those it must)."""

    def close(self) -> None:
        """Nothing runs between calls: the schedds keep the jobs."""

    def find(self, job_ids: Sequence[str]) -> dict[str, str]:
        """Which of these job ids any configured schedd knows, in its queue or history (job_id -> batch id).

        Used after a crash between submit and record: a job found here must not be submitted again.
        """
        out: dict[str, str] = {}
        ids = list(dict.fromkeys(job_ids))
        for target in self._targets():
            name, schedd = self._locate(target)
            try:
                for chunk in _chunks(ids):
                    constraint = _member(JOB_ID_ATTR, chunk) + self._ledger_clause()
                    ads = list(schedd.history(constraint, PROJECTION)) + list(schedd.query(constraint, PROJECTION))
                    for ad in ads:  # queue last: a job still queued wins over an older record in the history
                        if self._ours(ad):
                            out[ad[JOB_ID_ATTR]] = f"{ad['ClusterId']}.{ad['ProcId']}@{name}"
            except Exception as exc:
                raise BackendError(classify(str(exc), "bad_answer"), f"find in {name}: {exc}") from None
        return out


def _environment(env: Mapping[str, str]) -> str:
    """The submit `environment` value (new syntax): space-separated NAME='value' pairs."""
    for name, value in env.items():
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name) or '"' in value or "\n" in value:
            raise ValueError(f"environment variable {name} cannot be passed to an HTCondor job")
    return '"' + " ".join(f"{n}='{v.replace(chr(39), chr(39) * 2)}'" for n, v in env.items()) + '"'


def _ping_main() -> None:
    """Child process of preflight(): locate and ping one schedd; one JSON line on stdout.

    The bindings' security debug log goes to stderr, where the parent reads the error codes from it.
    """
    req = json.loads(sys.stdin.read())
    configure_security(CondorConfig(token_dir=req.get("token_dir", ""), scitoken_file=req.get("scitoken_file", "")))
    htcondor2.param["TOOL_DEBUG"] = "D_SECURITY"
    htcondor2.enable_debug()
    stage = "locate"
    try:
        collector = htcondor2.Collector(req["pool"]) if req["pool"] else htcondor2.Collector()
        ad = collector.locate(htcondor2.DaemonType.Schedd, req["schedd"] or None)
        if ad is None:  # htcondor2 25.x: the collector answered but knows no such schedd (stopped, renamed)
            print(json.dumps({"ok": False, "stage": stage, "kind": "unreachable",
                              "message": f"no schedd {req['schedd'] or '(default)'} in the pool"}), flush=True)
            return
        stage = "ping"
        started = time.monotonic()
        answer = htcondor2.ping(ad, "WRITE")
        ok = bool(answer.get("AuthorizationSucceeded", True))
        print(json.dumps({"ok": ok, "stage": stage, "kind": "" if ok else "auth_denied",
                          "user": str(answer.get("MyRemoteUserName", "")),
                          "seconds": round(time.monotonic() - started, 3)}), flush=True)
    except Exception as exc:
        kind = classify(str(exc), "unreachable" if stage == "locate" else "bad_answer")
        print(json.dumps({"ok": False, "stage": stage, "kind": kind, "message": str(exc)}), flush=True)


if __name__ == "__main__":
    _ping_main()
