"""The polling service: `run_once(rse)` works one RSE start to end; `Service.cycle()` runs many in parallel.

run_once: lease -> reconcile jobs left in `submitting` -> poll and collect live jobs -> revalidate queued
jobs against the fresh protected list -> ConMon stats -> state machine -> (new dump) protected list + dump
-> plan -> record -> jobs -> preflight -> intent -> submit.
Every step is idempotent against the ledger, so a crash anywhere is repaired by running it again.
"""
from __future__ import annotations

import logging
import os
import socket
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, BinaryIO, Callable, Optional, Protocol, Sequence

from MSUnmerged import planner, seal, statemachine
from MSUnmerged.collector import Collector, parse_report
from MSUnmerged.config import Config
from MSUnmerged.dumpreader import iter_chunks
from MSUnmerged.guards import (PLAN_MODIFIED, PLAN_OUTDATED, UNKNOWN_RSE, GuardTripped, check_counts,
                               check_plan_lines, check_protection, split_lines)
from MSUnmerged.jobs.backend import BackendError, BatchBackend, JobState, JobStatus
from MSUnmerged.jobs.router import backend_name, remove_unstarted
from MSUnmerged.jobs.spec import CleanupJob, make_job
from MSUnmerged.ledger import (LIVE_JOB_STATES, RETRIABLE, FileState, LeaseLost, Leases, Ledger, LedgerError,
                               gen_key)
from MSUnmerged.sources.errors import SourceError
from MSUnmerged.sources.rucio import site_from_rse

log = logging.getLogger(__name__)

# Steps of run_once, in order; `hook(step, rse)` is called after each (fault injection in tests).
STEPS = ("reconciled", "polled", "planned", "recorded", "intent", "submitted", "marked", "collected", "counted")
Hook = Callable[[str, str], None]
REVALIDATED = "removed_before_start"  # error class of the files of a job removed by revalidation
ALREADY_APPLIED = "already_applied"  # apply of a plan the ledger holds already: nothing changes
REFUSED = "refused"  # RunResult action: nothing was done and nothing recorded (unknown RSE)
RSE_LIST_TTL_S = 600.0  # how long a read of this instance's RSE list is trusted for a known RSE


class UnknownRSE(Exception):
    """The RSE is not one of this instance's; nothing may be recorded for it."""


class Sources(Protocol):
    """The outside services run_once reads (real clients in sources/, files in sources/offline.py)."""

    def rses(self) -> list[str]:
        """This instance's RSEs (the Rucio RSE expression of its partition)."""

    def stats(self) -> dict[str, Any]:
        """The ConMon `stats` answer: {RSE: scan}."""

    def protected(self) -> list[str]:
        """Every protected LFN base (WMStats, and Tier-0 WMStats where configured); SourceError if unsure."""

    def open_dump(self, rse: str) -> BinaryIO:
        """The RSE's dump as a binary stream (closed by the caller)."""

    def unmerged_pfn(self, rse: str) -> Optional[str]:
        """Rucio's PFN of the RSE's /store/unmerged/ (None without Rucio); SourceError if it cannot answer."""


@dataclass
class RunResult:
    """What one run_once did for an RSE (also the cycle document's entry)."""

    rse: str
    action: str  # skip, new_generation, resume, finish, poll, leased_elsewhere, done_this_cycle, failed
    state: str = ""
    reason: str = ""
    detail: str = ""
    source: str = ""  # for action failed: rucio, conmon, wmstats, ledger, backend or internal (ledger.history.FAILURE_SOURCES)
    generation: Optional[float] = None
    submitted: int = 0
    collected: int = 0
    dropped_protected: int = 0
    removed_jobs: int = 0  # queued jobs removed by revalidation
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def source_of(exc: SourceError) -> str:
    """The failure source of a SourceError ("wmstats-t0" is WMStats too)."""
    return "wmstats" if exc.source.startswith("wmstats") else exc.source


def cycle_failure(source: str, reason: str, detail: str, rse: str = "") -> dict[str, Any]:
    """One entry of a cycle document's `failures`."""
    return {"source": source, "reason": reason, "detail": detail[:2000], "rse": rse}


def default_instance() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


class Service:
    """One instance: its ledger, leases, sources and batch backend; see the module docstring."""

    def __init__(self, config: Config, ledger: Ledger, sources: Sources, backend: BatchBackend,
                 instance: Optional[str] = None, hook: Optional[Hook] = None) -> None:
        self.config = config
        self.ledger = ledger
        self.sources = sources
        self.backend = backend
        self.instance = instance or config.service.instance or default_instance()
        self.leases = Leases(ledger.db, self.instance, config.service.lease_ttl_s)
        self.hook = hook or (lambda step, rse: None)
        self.collector = Collector(ledger)
        self._pool: Optional[ThreadPoolExecutor] = None
        self._in_flight: dict[str, Future[RunResult]] = {}
        self._stop = threading.Event()
        self._known: tuple[float, frozenset[str]] = (0.0, frozenset())

    # -- this instance's RSEs ------------------------------------------------------------------

    def my_rses(self) -> list[str]:
        names = self.sources.rses()
        self._known = (time.monotonic(), frozenset(names))
        skip = set(self.config.planner.skip_rses)
        return [r for r in names if r not in skip]

    def require_rse(self, rse: str) -> None:
        """Raise UnknownRSE unless `rse` is one of this instance's RSEs (sources.rses(): the Rucio
        expression, or the offline list). Every entry point (run, apply, clean, the REST trigger) calls
        it before anything reaches the ledger. When the list cannot be read, an RSE configured under
        jobs.sites is accepted and any other raises the SourceError (unknown is not assumed known)."""
        at, known = self._known
        if rse in known and time.monotonic() - at < RSE_LIST_TTL_S:
            return
        try:
            self.my_rses()
        except SourceError as exc:
            if rse not in self.config.jobs.sites:
                raise
            log.warning("%s: this instance's RSE list is unavailable (%s); accepted as configured in jobs.sites",
                        rse, exc)
            return
        if rse not in self._known[1]:
            names = sorted(self._known[1])
            shown = ", ".join(names[:10]) + (", ..." if len(names) > 10 else "")
            raise UnknownRSE(f"RSE {rse} is not one of this instance's RSEs (expression "
                             f"{self.config.planner.rse_expression!r}; known: {shown or 'none'})")

    def _refused(self, rse: str) -> Optional[RunResult]:
        """A RunResult when `rse` must not be worked on (unknown, or the RSE list unreadable); nothing is
        recorded, so a typo leaves no document behind."""
        try:
            self.require_rse(rse)
        except UnknownRSE as exc:
            return RunResult(rse, REFUSED, reason=UNKNOWN_RSE, detail=str(exc))
        except SourceError as exc:
            return RunResult(rse, "failed", reason=f"{exc.source}_{exc.kind}", detail=exc.message,
                             source=source_of(exc))
        return None

    # -- one RSE -------------------------------------------------------------------------------

    def run_once(self, rse: str, slot: Optional[int] = None, wait_s: float = 0.0) -> RunResult:
        """Work one RSE start to end under its lease; waits up to `wait_s` for its jobs to finish."""
        started = time.time()
        refused = self._refused(rse)
        if refused is not None:
            return refused
        self.leases.start_heartbeat()
        if not self.leases.acquire(rse, slot):
            lease = self.leases.describe(rse)
            if slot is not None and lease.get("done_slot") == slot:
                return RunResult(rse, "done_this_cycle", reason="done_this_cycle")
            return RunResult(rse, "leased_elsewhere", reason="leased_elsewhere",
                             detail=f"held by {lease.get('owner')} until {lease.get('expires')}")
        result = self._recorded(rse, lambda: self._run(rse, wait_s))
        result.seconds = round(time.time() - started, 3)
        if result.reason != "lease_lost":
            self.leases.release(rse, slot if result.action != "failed" else None)
        return result

    def _recorded(self, rse: str, work: Callable[[], RunResult]) -> RunResult:
        """Run `work` for the RSE; any error is recorded on the RSE with its reason (never raised)."""
        try:
            return work()
        except LeaseLost as exc:  # someone else works on it now: leave everything to them
            return RunResult(rse, "failed", reason="lease_lost", detail=str(exc))
        except LedgerError as exc:
            return self._fail(rse, "ledger", exc.reason, exc.detail)
        except BackendError as exc:  # preflight refusals land here: backend_auth_refused, backend_timeout, ...
            return self._fail(rse, "backend", f"backend_{exc.kind}", exc.message)
        except SourceError as exc:
            return self._fail(rse, source_of(exc), f"{exc.source}_{exc.kind}", exc.message)
        except GuardTripped as exc:  # re-checking protection (resubmit, revalidation), a changed plan file
            return self._fail(rse, "internal" if exc.reason == PLAN_MODIFIED else "wmstats", exc.reason, exc.detail)
        except Exception as exc:  # one RSE's bug must not stop the others
            log.exception("%s", rse)
            return self._fail(rse, "internal", "internal_error", f"{type(exc).__name__}: {exc}")

    def _fail(self, rse: str, source: str, reason: str, detail: str) -> RunResult:
        log.error("%s: %s: %s", rse, reason, detail)
        try:
            self.ledger.set_rse_state(rse, statemachine.STATE_FAILED, reason, detail)
            self.ledger.refresh_counters(rse)  # e.g. a preflight refusal after a plan was recorded
        except LedgerError:
            log.exception("%s: could not record the failure", rse)
        return RunResult(rse, "failed", statemachine.STATE_FAILED, reason, detail, source=source)

    def _run(self, rse: str, wait_s: float) -> RunResult:
        self._reconcile(rse)
        self.hook("reconciled", rse)
        collected = 0
        deadline = time.monotonic() + wait_s
        while True:
            collected += self._poll(rse)
            live = self.ledger.jobs_in(rse, LIVE_JOB_STATES)
            if not live or time.monotonic() >= deadline:
                break
            time.sleep(min(2.0, max(0.05, deadline - time.monotonic())))
        self.hook("polled", rse)
        removed, dropped = self._revalidate(rse) if live else (0, 0)
        live = self.ledger.jobs_in(rse, LIVE_JOB_STATES)
        if live:
            detail = f"{len(live)} jobs in the batch system"
            self.ledger.set_rse_state(rse, statemachine.STATE_RUNNING, detail=detail)
            self.ledger.refresh_counters(rse)
            return RunResult(rse, "poll", statemachine.STATE_RUNNING, statemachine.JOBS_RUNNING, detail,
                             collected=collected, removed_jobs=removed, dropped_protected=dropped)

        doc = self.ledger.rse(rse)
        scan = self.sources.stats().get(rse)
        decision = self._decide(rse, doc, scan)
        result = RunResult(rse, decision.action, reason=decision.reason, detail=decision.detail,
                           generation=decision.generation, collected=collected, removed_jobs=removed,
                           dropped_protected=dropped)
        if decision.action == statemachine.SKIP:
            self.ledger.set_rse_state(rse, statemachine.STATE_SKIPPED, decision.reason, decision.detail)
            result.state = statemachine.STATE_SKIPPED
            return result
        assert decision.generation is not None
        if decision.action == statemachine.FINISH:
            return self._finish(rse, result, decision)

        protected = self.sources.protected()
        baseline = self.ledger.protected_baseline(rse)
        try:
            protection = check_protection(protected, baseline, self.config.guards.max_protected_shrink)
        except GuardTripped as guard:
            return self._guarded(rse, result, guard.reason, guard.detail)
        if decision.action == statemachine.NEW_GENERATION:
            plan_dir = self.config.state_dir / "plans" / rse / gen_key(decision.generation)
            plan, sealed = self._plan(rse, scan, protected, plan_dir, decision.generation, doc, baseline)
            self.hook("planned", rse)
            if plan.guard:
                return self._guarded(rse, result, plan.guard, plan.guard_detail)
            # The list read from WMStats now is the service's own: it may lower the baseline as
            # generations rotate out (workflows finish); an operator's list at apply never does.
            self.ledger.record_plan(plan_dir, plan, decision.generation, baseline_count=len(protection),
                                    sealed=sealed, max_lfn_length=self.config.planner.max_lfn_length,
                                    scan_started=plan.scan_started)
            self.hook("recorded", rse)
        else:
            result.dropped_protected += self.ledger.drop_protected(rse, decision.generation, protection)
            self.ledger.new_round(rse, decision.generation, 1 + self.config.jobs.retries,
                                  self.config.planner.files_per_job, redo_dry_run=not self.config.service.dry_run)
        result.submitted = self._submit_planned(rse, decision.generation, protected)
        result.state = statemachine.STATE_RUNNING if result.submitted else statemachine.STATE_PLANNED
        self.ledger.set_rse_state(rse, result.state, detail=f"{result.submitted} jobs submitted",
                                  started=time.time())
        if wait_s > 0 and result.submitted:
            while time.monotonic() < deadline and self.ledger.jobs_in(rse, LIVE_JOB_STATES):
                time.sleep(0.2)
                result.collected += self._poll(rse)
            if not self.ledger.jobs_in(rse, LIVE_JOB_STATES):  # every job collected: say where the RSE stands
                settled = self._decide(rse, self.ledger.rse(rse), scan)
                if settled.action == statemachine.FINISH:
                    self._finish(rse, result, settled)
        self.ledger.refresh_counters(rse)
        self.hook("counted", rse)
        return result

    def _decide(self, rse: str, doc: dict[str, Any], scan: Any) -> statemachine.Decision:
        current = None if doc.get("recording") is not None else doc.get("generation")
        return statemachine.decide(scan, current, self._progress(rse, current), time.time(),
                                   self.config.guards.max_scan_age_h, dry_run=self.config.service.dry_run)

    def _finish(self, rse: str, result: RunResult, decision: statemachine.Decision) -> RunResult:
        """Nothing left to do on this dump: the final state (clean, done with errors, dry run done)."""
        self.ledger.set_rse_state(rse, decision.state, decision.reason, decision.detail, finished=time.time())
        self.ledger.refresh_counters(rse)
        result.state, result.reason, result.detail = decision.state, decision.reason, decision.detail
        return result

    def _guarded(self, rse: str, result: RunResult, reason: str, detail: str) -> RunResult:
        """A guard refused: nothing is submitted for this RSE; the reason is on its document."""
        self.ledger.set_rse_state(rse, statemachine.STATE_GUARDED, reason, detail)
        result.state, result.reason, result.detail = statemachine.STATE_GUARDED, reason, detail
        return result

    def _progress(self, rse: str, generation: Optional[float]) -> statemachine.Progress:
        if generation is None:
            return statemachine.Progress()
        max_attempts = 1 + self.config.jobs.retries
        return statemachine.Progress(
            planned_jobs=len(self.ledger.jobs_in(rse, [JobState.PLANNED], generation)),
            retriable=self.ledger.count_files(rse, generation, RETRIABLE, attempts={"$lt": max_attempts}),
            exhausted=self.ledger.count_files(rse, generation, RETRIABLE, attempts={"$gte": max_attempts}),
            would_delete=self.ledger.count_files(rse, generation, [FileState.WOULD_DELETE]))

    def _plan(self, rse: str, scan: Any, protected: list[str], plan_dir: Path, generation: float,
              doc: dict[str, Any], baseline: Optional[int]) -> tuple[planner.Plan, seal.Seal]:
        """Plan the dump, or reuse the sealed plan whose recording a crash interrupted (same files, same jobs)."""
        if doc.get("recording") == generation and (plan_dir / seal.SEAL_NAME).exists():
            try:
                sealed = seal.verify(plan_dir, self.config.planner.max_lfn_length)
                plan = planner.read_summary(plan_dir)
                if plan.dump_version == generation and not plan.guard:
                    return plan, sealed
            except GuardTripped as broken:  # planned again below, from the dump
                log.warning("%s: not reusing %s: %s", rse, plan_dir, broken)
        with self.sources.open_dump(rse) as dump:
            plan = planner.plan(rse, iter_chunks(dump), protected, self.config, plan_dir, stats=scan,
                                previous_protected_count=baseline)
        return plan, seal.read_seal(plan_dir)

    # -- jobs ----------------------------------------------------------------------------------

    def _site(self, rse: str) -> str:
        site = self.config.jobs.sites.get(rse, {}).get("site") or site_from_rse(rse)
        if not site:
            raise LedgerError("no_site", f"no site for RSE {rse}: set jobs.sites.{rse}.site")
        return site

    def _build(self, rse: str, job_doc: dict[str, Any], protected: Sequence[str], removable: set[str],
               checks: dict[str, Any]) -> Optional[CleanupJob]:
        """The job's files still planned, as a CleanupJob (None when none is left)."""
        lfns = self.ledger.job_lfns(job_doc["_id"])
        if not lfns:
            return None
        return make_job(job_doc["_id"], rse, self._site(rse), lfns, removable, protected, self.config,
                        generation=job_doc["gen"], **checks)

    def _removable(self, rse: str, generation: float) -> set[str]:
        """The plan's removable directories: dirs.txt read as bytes, split on b"\\n" only, checked against
        the seal's digest recorded with the generation and line by line (GuardTripped otherwise)."""
        entry = self.ledger.generation_entry(rse, generation)
        path = Path(entry.get("plan_dir", "")) / seal.DIRS_NAME
        if not entry or not path.exists():
            return set()
        data = path.read_bytes()
        if entry.get("dirs_sha256") not in (None, seal.sha256(data)):
            raise GuardTripped(PLAN_MODIFIED, f"{path} changed since its plan was recorded")
        check_plan_lines(data, self.config.planner.max_lfn_length, str(path))
        return {raw.decode("utf-8", errors="surrogateescape") for raw in split_lines(data)}

    def _checks(self, rse: str, generation: float) -> dict[str, Any]:
        """What the jobs' workers check their site against: Rucio's PFN of /store/unmerged/ (a Rucio failure
        raises SourceError: nothing is submitted) and the start of the scan the plan comes from."""
        return {"unmerged_pfn": self.sources.unmerged_pfn(rse),
                "scan_started": self.ledger.generation_entry(rse, generation).get("scan_started")}

    def _submit_planned(self, rse: str, generation: float, protected: Sequence[str]) -> int:
        """Intent first, then submit, then mark: a crash in between is repaired by _reconcile."""
        docs = self.ledger.jobs_in(rse, [JobState.PLANNED], generation)
        if not docs:
            return 0
        removable, checks = self._removable(rse, generation), self._checks(rse, generation)
        jobs = []
        for doc in docs:
            job = self._build(rse, doc, protected, removable, checks)
            if job is None:
                self.ledger.close_job(doc["_id"], JobState.COLLECTED.value, "no files left")
            else:
                jobs.append(job)
        if not jobs:
            return 0
        self.backend.preflight(rse)  # refused or unreachable: BackendError, nothing recorded or submitted
        self.ledger.record_job_intent(jobs, backend_name(self.backend, rse))
        self.hook("intent", rse)
        return self._submit(rse, jobs)

    def _submit(self, rse: str, jobs: list[CleanupJob]) -> int:
        self.leases.check(rse)  # fencing: never submit for an RSE another instance took over
        ids = self.backend.submit(jobs)
        self.hook("submitted", rse)
        for jid, batch_id in ids.items():
            self.ledger.mark_submitted(jid, batch_id)
        self.hook("marked", rse)
        return len(ids)

    def _reconcile(self, rse: str) -> None:
        """Jobs left in `submitting` by a crash: adopt the ones the batch system has, submit the rest."""
        pending = self.ledger.jobs_in(rse, [JobState.SUBMITTING])
        if not pending:
            return
        found = self.backend.find([j["_id"] for j in pending])
        for jid, batch_id in found.items():
            self.ledger.mark_submitted(jid, batch_id)
        missing = [j for j in pending if j["_id"] not in found]
        if missing:
            protected = self.sources.protected()
            protection = check_protection(protected, self.ledger.protected_baseline(rse),
                                          self.config.guards.max_protected_shrink)
            jobs = []
            gens = {doc["gen"] for doc in missing}
            removable = {gen: self._removable(rse, gen) for gen in gens}
            checks = {gen: self._checks(rse, gen) for gen in gens}
            for doc in missing:
                self.ledger.drop_protected(rse, doc["gen"], protection)
                job = self._build(rse, doc, protected, removable[doc["gen"]], checks[doc["gen"]])
                if job is None:
                    self.ledger.close_job(doc["_id"], JobState.COLLECTED.value, "no files left")
                else:
                    jobs.append(job)
            if jobs:
                log.info("%s: resubmitting %d jobs whose submission was not confirmed", rse, len(jobs))
                self.backend.preflight(rse)
                self._submit(rse, jobs)

    def _poll(self, rse: str) -> int:
        """Ask the backend about live jobs; collect the finished ones. Returns how many were collected."""
        live = [j for j in self.ledger.jobs_in(rse, ["queued", "running", "held"]) if j.get("batch_id")]
        if not live:
            return 0
        statuses = self.backend.poll({j["_id"]: j["batch_id"] for j in live})
        n = 0
        for job in live:
            status = statuses.get(job["_id"]) or JobStatus(job["_id"], JobState.VANISHED, job["batch_id"])
            if status.state.terminal:
                self._collect(job, status)
                n += 1
            elif status.state.value != job["state"]:
                self.ledger.set_job_state(job["_id"], status.state.value, status.reason)
        if n:
            self.hook("collected", rse)
        return n

    def _collect(self, job: dict[str, Any], status: JobStatus) -> None:
        """Report -> per-file outcomes -> job closed (unreported files: unknown) -> job removed."""
        dest = self.config.state_dir / "reports" / job["rse"] / f"{job['_id'].replace(':', '_')}.jsonl"
        dest.parent.mkdir(parents=True, exist_ok=True)
        path = self.backend.fetch_report(job["_id"], job["batch_id"], dest)
        # The report may speak only of this job's files; the ledger changes only those still assigned to
        # this job, so a late report never overwrites a retry's outcome.
        got = self.collector.collect(job["_id"], self.ledger.job_lfns(job["_id"], states=None),
                                     parse_report(path) if path is not None else None, status)
        if got.problems:
            log.warning("%s: job %s: %s", job["rse"], job["_id"], got.reason)
        try:
            self.backend.remove(job["_id"], job["batch_id"], "collected")
        except BackendError as exc:  # the outcome is recorded; a left-over queue entry is harmless
            log.warning("%s: removing %s after collection: %s", job["rse"], job["_id"], exc)

    def _revalidate(self, rse: str) -> tuple[int, int]:
        """Queued jobs holding a file the fresh protected list covers are removed before they start.

        Their newly protected files become skipped_protected, the others unknown (re-planned by the next
        round). A job that started meanwhile stays: the backend removes only jobs not started, and the
        worker re-checks protection itself. Returns (jobs removed, files dropped).
        """
        waiting = [j for j in self.ledger.jobs_in(rse, ["queued", "held"]) if j.get("batch_id")]
        if not waiting:
            return 0, 0
        protection = check_protection(self.sources.protected(), self.ledger.protected_baseline(rse),
                                      self.config.guards.max_protected_shrink)
        hit = {j["_id"]: j["batch_id"] for j in waiting
               if any(protection.covers(name.encode("utf-8", "surrogateescape"))
                      for name in self.ledger.job_lfns(j["_id"]))}
        if not hit:
            return 0, 0
        gens = {j["_id"]: j["gen"] for j in waiting}
        removed = remove_unstarted(self.backend, hit, "revalidation: files became protected")
        dropped = 0
        for jid in removed:
            n = self.ledger.drop_protected(rse, gens[jid], protection, job=jid)
            dropped += n
            self.ledger.close_job(jid, JobState.REMOVED.value, f"revalidation: {n} files became protected",
                                  error_class=REVALIDATED)
        log.info("%s: revalidation removed %d of %d queued jobs (%d files now protected)", rse, len(removed),
                 len(hit), dropped)
        return len(removed), dropped

    def apply_plan(self, plan_dir: Path, protected: list[str]) -> RunResult:
        """Record and submit exactly the sealed plan in `plan_dir` (from `msunmerged plan`), under the RSE's
        lease, after dropping the files the current protected list covers.

        Refused, with the reason on the RSE's document: a plan directory that is not exactly what was
        sealed or holds a line that is not a canonical LFN (plan_modified), a plan older than the RSE's
        current generation or another plan of the same generation (plan_outdated), a guard with the
        configuration in force. An RSE that is not this instance's is refused with nothing recorded; a
        plan the ledger holds already is a no-op.
        """
        rse = seal.claimed_rse(plan_dir)
        if rse is None:
            return RunResult("", REFUSED, reason=PLAN_MODIFIED, detail=f"{plan_dir}: no RSE in its seal or summary")
        refused = self._refused(rse)
        if refused is not None:
            return refused
        result = RunResult(rse, "apply")
        try:
            sealed = seal.verify(plan_dir, self.config.planner.max_lfn_length)
        except GuardTripped as broken:
            return self._guarded(rse, result, broken.reason, f"{plan_dir}: {broken.detail}")
        plan = planner.read_summary(plan_dir)
        if plan.guard:
            return self._guarded(rse, result, plan.guard, plan.guard_detail)
        if not self.leases.acquire(rse):
            return RunResult(rse, "leased_elsewhere", reason="leased_elsewhere")
        try:
            return self._recorded(rse, lambda: self._apply(plan_dir, plan, sealed, protected))
        finally:
            self.leases.release(rse)

    def _apply(self, plan_dir: Path, plan: planner.Plan, sealed: seal.Seal, protected: list[str]) -> RunResult:
        rse = plan.rse
        generation = sealed.generation if sealed.generation is not None else plan.created
        result = RunResult(rse, "apply", generation=generation)
        doc = self.ledger.rse(rse)
        entry = self.ledger.generation_entry(rse, generation)
        same = entry.get("seal") == sealed.digest  # this plan; still `recording` when a crash interrupted it
        if same and doc.get("recording") != generation:
            result.state, result.reason = doc.get("state", ""), ALREADY_APPLIED
            result.detail = f"{plan_dir} is recorded already as generation {gen_key(generation)}: nothing changed"
            return result
        current = doc.get("generation")
        try:
            if current is not None and generation < current:
                raise GuardTripped(PLAN_OUTDATED, f"{plan_dir} is generation {gen_key(generation)}, older than "
                                                  f"the RSE's current {gen_key(current)}")
            if entry and not same:
                raise GuardTripped(PLAN_OUTDATED, f"generation {gen_key(generation)} is recorded already with "
                                                  f"another plan ({entry.get('plan_dir')})")
            check_counts(plan.files_total, plan.files_to_delete, self.config.guards)
            baseline = self.ledger.protected_baseline(rse)
            protection = check_protection(protected, baseline, self.config.guards.max_protected_shrink)
        except GuardTripped as guard:
            return self._guarded(rse, result, guard.reason, guard.detail)
        # An operator's list never lowers the baseline (the plan's own count is never used).
        self.ledger.record_plan(plan_dir, plan, generation, baseline_count=max(baseline or 0, len(protection)),
                                sealed=sealed, max_lfn_length=self.config.planner.max_lfn_length,
                                scan_started=plan.scan_started)
        result.dropped_protected = self.ledger.drop_protected(rse, generation, protection)
        result.submitted = self._submit_planned(rse, generation, protected)
        result.state = statemachine.STATE_RUNNING if result.submitted else statemachine.STATE_PLANNED
        self.ledger.set_rse_state(rse, result.state, detail=f"applied {plan_dir}: {result.submitted} jobs, "
                                  f"{result.dropped_protected} files dropped as protected since planning")
        self.ledger.refresh_counters(rse)
        return result

    # -- the loop ------------------------------------------------------------------------------

    def cycle(self, rses: Optional[Sequence[str]] = None, slot: Optional[int] = None) -> dict[str, RunResult]:
        """One polling cycle: every RSE of this instance once (across instances), in parallel.

        An RSE leased by another instance is retried until that instance marks it done for this
        slot or its lease expires and we take it over. An RSE still running from an earlier cycle
        is not started twice; the cycle does not wait past the interval for a slow RSE.
        """
        interval = self.config.service.interval_s
        slot = int(time.time() // interval) if slot is None else slot
        try:
            names = list(rses) if rses is not None else self.my_rses()
        except SourceError as exc:  # e.g. Rucio down: no RSE to work on, but the cycle and its failure are recorded
            failure = cycle_failure(source_of(exc), f"{exc.source}_{exc.kind}", exc.message)
            self.ledger.end_cycle(self.ledger.start_cycle(self.instance, slot, []), failures=[failure],
                                  dry_run=self.config.service.dry_run)
            raise
        cid = self.ledger.start_cycle(self.instance, slot, names)
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.config.service.parallel_rses, thread_name_prefix="rse")
        self.leases.start_heartbeat()
        end = time.monotonic() + interval
        results: dict[str, RunResult] = {}
        pending = set(names)
        while pending and not self._stop.is_set() and time.monotonic() < end:
            futures = {}
            for rse in sorted(pending):
                if rse in self._in_flight and not self._in_flight[rse].done():
                    continue  # still working from an earlier cycle
                futures[rse] = self._in_flight[rse] = self._pool.submit(self.run_once, rse, slot)
            for rse, fut in futures.items():
                res = self._wait(fut, end)
                if res is None:
                    continue
                if res.action != "leased_elsewhere":
                    pending.discard(rse)
                    results[rse] = res
                    self.ledger.record_cycle_result(cid, rse, res.to_dict())
            if pending:
                self._stop.wait(min(5.0, self.config.service.lease_ttl_s / 4))
        failures = [cycle_failure(r.source, r.reason, r.detail, r.rse) for r in results.values() if r.source]
        self.ledger.end_cycle(cid, failures=failures, unfinished=sorted(pending), dry_run=self.config.service.dry_run)
        return results

    @staticmethod
    def _wait(fut: Future[RunResult], end: float) -> Optional[RunResult]:
        try:
            return fut.result(timeout=max(0.0, end - time.monotonic()))
        except TimeoutError:
            return None

    def serve(self) -> None:
        """Run cycles every service.interval_s until stop()."""
        interval = self.config.service.interval_s
        while not self._stop.is_set():
            slot = int(time.time() // interval)
            try:
                self.cycle(slot=slot)
            except (LedgerError, SourceError) as exc:  # e.g. Rucio down (recorded by cycle()): try again next interval
                log.error("cycle %d: %s", slot, exc)
            except Exception as exc:  # a bug must not end the loop: the next cycle starts from the ledger
                log.exception("cycle %d failed", slot)
                self._record_broken_cycle(slot, exc)
            self._stop.wait(max(1.0, (slot + 1) * interval - time.time()))

    def _record_broken_cycle(self, slot: int, exc: Exception) -> None:
        """A cycle that ended in a bug still leaves a cycle document saying so (when the ledger answers)."""
        failure = cycle_failure("internal", "internal_error", f"{type(exc).__name__}: {exc}")
        try:
            self.ledger.end_cycle(self.ledger.start_cycle(self.instance, slot, []), failures=[failure],
                                  dry_run=self.config.service.dry_run)
        except LedgerError:
            log.exception("cycle %d: could not record the failure", slot)

    def stop(self) -> None:
        self._stop.set()
        self.leases.stop_heartbeat()
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
