"""One RSE start to end: `run_once(rse)` under its lease, `apply_plan(dir)` for a sealed plan, `preview(rse)`.

The Runner owns the step order; its JobKeeper (jobkeeper.py) owns the batch system. run_once: refuse an RSE
not this instance's -> lease -> reconcile jobs left in `submitting` -> poll and collect live jobs -> revalidate
queued jobs against the fresh protected list (jobs still live: the RSE stays running, nothing more) -> ConMon
stats -> state machine (skip; finish, then directory jobs for the directories still to remove) -> protected list
checked against the baseline -> a new dump: plan (or reuse the sealed plan a crash left) -> record; else drop
newly protected files and start a new round -> directory jobs -> release this cycle's slice -> submit, a batch at
a time (credential and backend preflight before the first; per batch intent -> submit -> mark) -> RSE state ->
(with wait_s) poll and top up -> counters.
Every step is idempotent against the ledger, so a crash anywhere is repaired by running it again.
"""
from __future__ import annotations

import logging
import os
import shutil
import socket
import time
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from MSUnmerged import planlines, planner, seal, subset
from MSUnmerged.config import Config
from MSUnmerged.dumpreader import iter_chunks
from MSUnmerged.guards import (PLAN_MODIFIED, PLAN_NOT_IN_CURRENT_DUMP, PLAN_OUTDATED, UNKNOWN_RSE, GuardTripped,
                               check_counts, check_plan_scan, check_scan)
from MSUnmerged.lfn import PrefixSet
from MSUnmerged.jobs.backend import BatchBackend, JobState
from MSUnmerged.ledger import (RETRIABLE, FileState, LeaseLost, Ledger, LedgerError, gen_key,
                                pending_dirs, sitebackoff, slices)
from MSUnmerged.ledger.base import state_update
from MSUnmerged.service.jobkeeper import JobKeeper
from MSUnmerged.service.result import INTERNAL_ERROR, LEASE_LOST, Hook, RunAction, RunResult, failure_of, jobs_detail
from MSUnmerged.service.rses import InstanceRSEs, UnknownRSE
from MSUnmerged.service.scans import StatsRead, scan_of
from MSUnmerged.sitelimits import limits_for
from MSUnmerged.sources import Sources
from MSUnmerged.sources.errors import SourceError
from MSUnmerged.statemachine import JOBS_RUNNING, SITE_CONFIG_BACKOFF, Action, Decision, Progress, RSEState, decide

log = logging.getLogger(__name__)

ALREADY_APPLIED = "already_applied"  # apply of a plan the ledger holds already: nothing changes


def default_instance() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


class Runner:
    """Works one RSE at a time for one instance: its ledger, leases and sources; `jobs` its batch system."""

    def __init__(self, config: Config, ledger: Ledger, sources: Sources, backend: BatchBackend,
                 instance: Optional[str] = None, hook: Optional[Hook] = None) -> None:
        self.config = config
        self.ledger = ledger
        self.sources = sources
        self.instance = instance or config.service.instance or default_instance()
        self.leases = ledger.leases(self.instance, config.service.lease_ttl_s)
        self.rses = InstanceRSEs(config, sources)
        self.hook: Hook = hook or (lambda step, rse: None)  # told each step of a run (STEPS), the batch's too
        self.watch: Optional[Hook] = None  # the cycle's own (its hold, loop.py): told each step before the hook
        self.jobs = JobKeeper(config, ledger, sources, self.leases, backend, self._step)
        self._counted: set[str] = set()  # RSEs whose run ended by refreshing their counters (jobs counted with them)

    def _step(self, step: str, rse: str) -> None:
        """`rse`'s run reached `step` (STEPS): tell the cycle's watcher, then the hook."""
        if self.watch is not None:
            self.watch(step, rse)
        self.hook(step, rse)

    def my_rses(self) -> list[str]:
        """This instance's RSEs the loop works (InstanceRSEs.read)."""
        return self.rses.read()

    def require_rse(self, rse: str) -> None:
        """UnknownRSE unless `rse` is this instance's (InstanceRSEs.require)."""
        self.rses.require(rse)

    def _refused(self, rse: str) -> Optional[RunResult]:
        """A RunResult when `rse` must not be worked on (unknown, or the RSE list unreadable); nothing is
        recorded, so a typo leaves no document behind."""
        try:
            self.require_rse(rse)
        except UnknownRSE as exc:
            return RunResult(rse, RunAction.REFUSED, reason=UNKNOWN_RSE, detail=str(exc))
        except SourceError as exc:
            failure = failure_of(exc)
            return RunResult(rse, RunAction.FAILED, reason=failure.reason, detail=failure.detail, source=failure.source)
        return None

    # -- one RSE -------------------------------------------------------------------------------

    def run_once(self, rse: str, slot: Optional[int] = None, wait_s: float = 0.0,
                 stats: Optional[StatsRead] = None) -> RunResult:
        """Work one RSE start to end under its lease; waits up to `wait_s` for its jobs to finish. `stats`: the
        cycle's ConMon read, used while fresh (scans.scan_of); without it the run reads `stats` itself."""
        started = time.time()
        refused = self._refused(rse)
        if refused is not None:
            return refused
        self.leases.start_heartbeat()
        if not self.leases.acquire(rse, slot):
            lease = self.leases.describe(rse)
            if slot is not None and lease.get("done_slot") == slot:
                return RunResult(rse, RunAction.DONE_THIS_CYCLE, reason=RunAction.DONE_THIS_CYCLE)
            return RunResult(rse, RunAction.LEASED_ELSEWHERE, reason=RunAction.LEASED_ELSEWHERE,
                             detail=f"held by {lease.get('owner')} until {lease.get('expires')}")
        self.jobs.sent(rse)  # counts from here
        self._counted.discard(rse)
        result = self._recorded(rse, lambda: self._run(rse, wait_s, stats))
        result.submitted = self.jobs.sent(rse)  # with the jobs a reconciliation sent again, and before a failure
        result.seconds = round(time.time() - started, 3)
        if result.reason != LEASE_LOST:
            self._count_jobs(rse)
            self.leases.release(rse, slot if result.action != RunAction.FAILED else None)
        return result

    def _refresh_counters(self, rse: str, state: Optional[dict[str, Any]] = None) -> None:
        """The RSE's counters, its jobs per state among them, as the last ledger step of its run: run_once does not
        count its jobs again (two round trips an RSE). `state`: the RSE's state (state_update), written with them."""
        self.ledger.refresh_counters(rse, state)
        self._counted.add(rse)

    def _count_jobs(self, rse: str) -> None:
        """The RSE's jobs per state on its document, whatever way its run ended (the metrics read them there),
        unless the run ended by refreshing its counters."""
        if rse in self._counted:
            self._counted.discard(rse)
            return
        try:
            self.ledger.refresh_job_counts(rse)
        except LedgerError as exc:  # a gauge a run late; the run's own outcome is recorded already
            log.warning("%s: could not count its jobs: %s", rse, exc)

    def _recorded(self, rse: str, work: Callable[[], RunResult]) -> RunResult:
        """Run `work` for the RSE; any error is recorded on the RSE with its reason (never raised)."""
        try:
            return work()
        except LeaseLost as exc:  # someone else works on it now: leave everything to them
            return RunResult(rse, RunAction.FAILED, reason=LEASE_LOST, detail=str(exc))
        except Exception as exc:  # one RSE's error, a bug too, must not stop the others
            failure = failure_of(exc)
            if failure.reason == INTERNAL_ERROR:
                log.exception("%s", rse)
            log.error("%s: %s: %s", rse, failure.reason, failure.detail)
            try:
                self.ledger.set_rse_state(rse, RSEState.FAILED, failure.reason, failure.detail)
                self._refresh_counters(rse)  # e.g. a preflight refusal after a plan was recorded
            except LedgerError:
                log.exception("%s: could not record the failure", rse)
            return RunResult(rse, RunAction.FAILED, RSEState.FAILED, failure.reason, failure.detail,
                             source=failure.source)

    def _run(self, rse: str, wait_s: float, stats: Optional[StatsRead]) -> RunResult:
        live = self.jobs.live(rse)  # none (submitting or in the batch system): nothing to reconcile, poll or revalidate
        if live:
            self.jobs.reconcile(rse)
        self._step("reconciled", rse)
        collected = 0
        deadline = time.monotonic() + wait_s
        while live:
            collected += self.jobs.poll(rse)
            live = self.jobs.live(rse)
            if not live or time.monotonic() >= deadline:
                break
            time.sleep(min(2.0, max(0.05, deadline - time.monotonic())))
        self._step("polled", rse)
        removed, dropped = 0, 0
        if live:
            removed, dropped = self.jobs.revalidate(rse)
            live = self.jobs.live(rse)
        if live:
            detail = jobs_detail(len(live))
            self._refresh_counters(rse, state_update(RSEState.RUNNING, detail=detail))
            return RunResult(rse, RunAction.POLL, RSEState.RUNNING, JOBS_RUNNING, detail,
                             collected=collected, removed_jobs=removed, dropped_protected=dropped)

        doc = self.ledger.rse(rse)
        scan = scan_of(self.sources, rse, stats, self.config.service.stats_reuse_s)
        decision = self._decide(rse, doc, scan)
        result = RunResult(rse, decision.action, reason=decision.reason, detail=decision.detail,
                           generation=decision.generation, collected=collected, removed_jobs=removed,
                           dropped_protected=dropped)
        if decision.action is Action.SKIP:  # the state with its jobs counted, one update
            self.ledger.refresh_job_counts(rse, state_update(RSEState.SKIPPED, decision.reason, decision.detail))
            self._counted.add(rse)
            result.state = RSEState.SKIPPED
            return result
        assert decision.generation is not None
        if decision.action is Action.FINISH:
            return self._retry_dirs(rse, self._finish(rse, result, decision))

        try:
            protected, fetched = self.jobs.fetch_protected()  # GuardTripped too: a source answered an empty list
            protection, baseline = self.jobs.protection(rse, protected, doc)
        except GuardTripped as guard:
            return self._guarded(rse, result, guard.reason, guard.detail)
        if decision.action is Action.NEW_GENERATION:
            if doc.get("generation") is not None:  # its directories not removed are retried from now on
                pending_dirs.remember(self.ledger, rse, doc["generation"])
            plan_dir = self.config.state_dir / "plans" / rse / gen_key(decision.generation)
            plan, sealed = self._plan(rse, scan, protected, plan_dir, decision.generation, doc, baseline)
            self._step("planned", rse)
            if plan.guard:
                return self._guarded(rse, result, plan.guard, plan.guard_detail)
            # The list read from WMStats now is the service's own: it may lower the baseline as
            # generations rotate out (workflows finish); an operator's list at apply never does.
            self.ledger.record_plan(seal.PlanReader(plan_dir, sealed, self.config.planner.max_lfn_length), plan,
                                    decision.generation, baseline_count=len(protection),
                                    scan_started=plan.scan_started, floor_depth=self.config.planner.dir_floor_depth)
            self._step("recorded", rse)
        else:
            result.dropped_protected += self.ledger.drop_protected(rse, decision.generation, protection)
            # Jobs a crash left planned between two submission batches go out before a new round starts, so
            # that a file's round (its attempts) counts its tries.
            if not self.ledger.jobs_in(rse, [JobState.PLANNED], decision.generation):
                # A throttled RSE also retries, and deletes what a dry run left, N files a cycle at most.
                self.ledger.new_round(rse, decision.generation, 1 + self.config.jobs.retries,
                                      self.config.planner.files_per_job,
                                      redo_dry_run=not self.config.service.dry_run,
                                      limit=limits_for(self.config, rse).max_files_per_cycle or None)
        self.jobs.plan_directory_jobs(rse, decision.generation, protection)
        entry = slices.release_next(self.ledger, rse, decision.generation)  # a throttled plan: this cycle's slice
        # No job is live (read above, under the lease): max_in_flight's room needs no read of them.
        result.submitted = self.jobs.submit_planned(rse, decision.generation, protected, fetched, entry, live=0,
                                                    doc=doc)  # read after this run's poll: its back-off is current
        result.state = RSEState.RUNNING if result.submitted else RSEState.PLANNED
        submitted = {"detail": jobs_detail(result.submitted), "started": time.time()}
        hold = None if result.submitted else sitebackoff.current(self.ledger.rse(rse))
        if hold is not None:  # its jobs wait for the site's configuration to be fixed: say so
            result.reason, result.detail = SITE_CONFIG_BACKOFF, sitebackoff.describe(hold)
            submitted.update(reason=result.reason, detail=result.detail)
        state: Optional[dict[str, Any]] = None  # written with the counters below, unless the run waits for its jobs
        if wait_s <= 0 or not result.submitted:
            state = state_update(result.state, **submitted)
        else:
            self.ledger.set_rse_state(rse, result.state, **submitted)
            listed = self.jobs.reusing((protected, fetched))  # fetched again once too old to be sent
            while time.monotonic() < deadline and self.jobs.live(rse):
                time.sleep(0.2)
                result.collected += self.jobs.poll(rse)
                # More of the released jobs as the RSE's max_in_flight leaves room.
                result.submitted += self.jobs.top_up(rse, decision.generation, listed)
            if not self.jobs.live(rse):  # every job collected: say where the RSE stands
                settled = self._decide(rse, self.ledger.rse(rse), scan)
                if settled.action is Action.FINISH:
                    self._finish(rse, result, settled)
        self._refresh_counters(rse, state)
        self._step("counted", rse)
        return result

    def _decide(self, rse: str, doc: dict[str, Any], scan: Any) -> Decision:
        current = None if doc.get("recording") is not None else doc.get("generation")
        return decide(scan, current, self._progress(rse, current), time.time(), self.config.guards.max_scan_age_h,
                      dry_run=self.config.service.dry_run)

    def _finish(self, rse: str, result: RunResult, decision: Decision) -> RunResult:
        """Nothing left to do on this dump: the final state (clean, done with errors, dry run done)."""
        assert decision.state is not None
        # Not _refresh_counters: _retry_dirs may submit directory jobs after this, so run_once counts jobs again.
        self.ledger.refresh_counters(rse, state_update(decision.state, decision.reason, decision.detail,
                                                       finished=time.time()))
        result.state, result.reason, result.detail = decision.state, decision.reason, decision.detail
        return result

    def _retry_dirs(self, rse: str, result: RunResult) -> RunResult:
        """The dump's work is over: its directories not removed are remembered, and directory jobs go out for
        those of any generation still to remove (ledger/pending_dirs.py). The RSE keeps its final state; a
        protected list that cannot be had or trusted now only postpones them to a later cycle."""
        assert result.generation is not None
        pending_dirs.remember(self.ledger, rse, result.generation)
        if not pending_dirs.due(self.ledger, rse, 1 + self.config.jobs.retries):
            return result
        try:
            protected, fetched = self.jobs.fetch_protected()
            protection, _ = self.jobs.protection(rse, protected)
        except (SourceError, GuardTripped) as exc:
            log.warning("%s: directories still to remove wait for a later cycle: %s", rse, exc)
            return result
        if self.jobs.plan_directory_jobs(rse, result.generation, protection):  # reached with no job live
            result.submitted = self.jobs.submit_planned(rse, result.generation, protected, fetched, live=0)
        return result

    def _guarded(self, rse: str, result: RunResult, reason: str, detail: str) -> RunResult:
        """A guard refused: nothing is submitted for this RSE; the reason is on its document."""
        self.ledger.set_rse_state(rse, RSEState.GUARDED, reason, detail)
        result.state, result.reason, result.detail = RSEState.GUARDED, reason, detail
        return result

    def _progress(self, rse: str, generation: Optional[float]) -> Progress:
        if generation is None:
            return Progress()
        max_attempts = 1 + self.config.jobs.retries
        return Progress(
            planned_jobs=len(self.ledger.jobs_in(rse, [JobState.PLANNED], generation)),
            retriable=self.ledger.count_files(rse, generation, RETRIABLE, attempts={"$lt": max_attempts}),
            exhausted=self.ledger.count_files(rse, generation, RETRIABLE, attempts={"$gte": max_attempts}),
            would_delete=self.ledger.count_files(rse, generation, [FileState.WOULD_DELETE]))

    # -- planning ------------------------------------------------------------------------------

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
        plan = self._plan_dump(rse, scan, protected, baseline, plan_dir)
        return plan, seal.read_seal(plan_dir)

    def _plan_dump(self, rse: str, scan: Any, protected: Sequence[str], baseline: Optional[int], out: Path,
                   progress: Optional[planner.ProgressFn] = None, count_guards: bool = True) -> planner.Plan:
        """Open the RSE's dump and plan it into `out` with the configuration in force."""
        # A throttled RSE releases its oldest dataset directories first: when the ledger first saw each.
        first_seen = self.ledger.dataset_ages(rse) if limits_for(self.config, rse).max_files_per_cycle else None
        with self.sources.open_dump(rse) as dump:
            return planner.plan(rse, iter_chunks(dump), protected, self.config, out, stats=scan,
                                previous_protected_count=baseline, progress=progress, count_guards=count_guards,
                                ages=first_seen)

    def preview(self, rse: str, progress: Optional[planner.ProgressFn] = None) -> planner.Plan:
        """Plan the RSE now from the sources into <state_dir>/previews/<rse>.

        Planner only: nothing is recorded in the ledger and nothing is submitted. The guards are those
        of run_once: the ledger's baseline, the configuration in force. UnknownRSE for an RSE that is
        not this instance's.
        """
        scan = self.sources.stats().get(rse)  # needed anyway; a ConMon failure is the clearer message
        self.require_rse(rse)
        out = self.preview_dir(rse)
        shutil.rmtree(out, ignore_errors=True)  # a preview never mixes with an older one
        return self._plan_dump(rse, scan, self.sources.protected(), self.ledger.protected_baseline(rse), out,
                               progress)

    def preview_dir(self, rse: str) -> Path:
        """Where `preview` writes the RSE's plan."""
        return self.config.state_dir / "previews" / rse

    # -- a sealed plan -------------------------------------------------------------------------

    def apply_plan(self, plan_dir: Path, protected: list[str]) -> RunResult:
        """Record and submit exactly the sealed plan in `plan_dir` (from `msunmerged plan`), under the RSE's
        lease, after dropping the files the current protected list covers.

        Refused, with the reason on the RSE's document: a plan directory that is not exactly what was
        sealed or holds a line that is not a canonical LFN (plan_modified), a plan older than the RSE's
        current generation or another plan of the same generation (plan_outdated), a plan that is not of
        the RSE's current scan or plans a file or directory its dump does not give now (`_rederive`), a guard
        with the configuration in force. An RSE that is not this instance's is refused with nothing recorded;
        a plan the ledger holds already is a no-op.
        """
        rse = seal.claimed_rse(plan_dir)
        if rse is None:
            return RunResult("", RunAction.REFUSED, reason=PLAN_MODIFIED,
                             detail=f"{plan_dir}: no RSE in its seal or summary")
        refused = self._refused(rse)
        if refused is not None:
            return refused
        result = RunResult(rse, RunAction.APPLY)
        try:
            sealed = seal.verify(plan_dir, self.config.planner.max_lfn_length)
        except GuardTripped as broken:
            return self._guarded(rse, result, broken.reason, f"{plan_dir}: {broken.detail}")
        plan = planner.read_summary(plan_dir)
        if plan.guard:
            return self._guarded(rse, result, plan.guard, plan.guard_detail)
        if not self.leases.acquire(rse):
            return RunResult(rse, RunAction.LEASED_ELSEWHERE, reason=RunAction.LEASED_ELSEWHERE)
        try:
            return self._recorded(rse, lambda: self._apply(plan_dir, plan, sealed, protected))
        finally:
            self.leases.release(rse)

    def _apply(self, plan_dir: Path, plan: planner.Plan, sealed: seal.Seal, protected: list[str]) -> RunResult:
        given = time.time()
        rse = plan.rse
        generation = sealed.generation if sealed.generation is not None else plan.created
        result = RunResult(rse, RunAction.APPLY, generation=generation)
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
            slices.check(plan.job_sizes, plan.job_slices, plan.slice_sizes)  # the count guard judges the largest
            protection, baseline = self.jobs.protection(rse, protected)
            now = self._rederive(plan_dir, plan, sealed, protected, protection, baseline)
            check_counts(now.files_total, plan.files_to_delete, self.config.guards, max(plan.slice_sizes, default=None))
        except GuardTripped as guard:
            return self._guarded(rse, result, guard.reason, guard.detail)
        self._step("planned", rse)  # the plan checked: its seal, the dump planned again, the comparison
        # An operator's list never lowers the baseline (the plan's own count is never used).
        self.ledger.record_plan(seal.PlanReader(plan_dir, sealed, self.config.planner.max_lfn_length), plan,
                                generation, baseline_count=max(baseline or 0, len(protection)),
                                scan_started=now.scan_started, floor_depth=self.config.planner.dir_floor_depth)
        self._step("recorded", rse)
        result.dropped_protected = self.ledger.drop_protected(rse, generation, protection)
        entry = slices.release_next(self.ledger, rse, generation)
        # An operator's list counts as fetched when apply was asked to use it.
        result.submitted = self.jobs.submit_planned(rse, generation, protected, given, entry)
        result.state = RSEState.RUNNING if result.submitted else RSEState.PLANNED
        self.ledger.refresh_counters(rse, state_update(
            result.state, detail=f"applied {plan_dir}: {result.submitted} jobs, "
                                 f"{result.dropped_protected} files dropped as protected since planning"))
        self._step("counted", rse)
        return result

    def _rederive(self, plan_dir: Path, plan: planner.Plan, sealed: seal.Seal, protected: list[str],
                  protection: PrefixSet, baseline: Optional[int]) -> planner.Plan:
        """The plan is a reviewed intent only. From the sources: the RSE's current ConMon scan (the plan must be of
        it: its generation and start), and that scan's dump planned again with the protected list and
        configuration in force (the count guards aside: they are checked on the plan applied). Every planned
        file and removable directory must be in that plan, or be covered by the current list (then dropped, or
        kept by the worker). Returns the plan made now; GuardTripped, nothing recorded, otherwise."""
        rse, cfg = plan.rse, self.config.planner
        stats = self.sources.stats().get(rse)  # read now, never a cycle's: the plan must be of the current scan
        scan = check_scan(stats, self.config.guards.max_scan_age_h, time.time())
        check_plan_scan(sealed.generation, plan.scan_started, scan)
        out = self.config.state_dir / "rederived" / rse
        shutil.rmtree(out, ignore_errors=True)
        try:
            now = self._plan_dump(rse, stats, protected, baseline, out, count_guards=False)
            if now.guard:
                raise GuardTripped(now.guard, f"the current dump of {rse} planned again: {now.guard_detail}")
            mine = [plan_dir / seal.JOBS_DIR / name for name in plan.job_files]
            theirs = [out / seal.JOBS_DIR / name for name in now.job_files]
            size = sum(p.stat().st_size for p in mine + theirs)
            parts = subset.partitions_for(size, cfg.partition_max_bytes, cfg.spill_partitions)
            engine = planlines.engine(cfg.engine)
            for what, candidates, allowed in (("file", mine, theirs),
                                              ("directory", [plan_dir / seal.DIRS_NAME], [out / seal.DIRS_NAME])):
                line = subset.first_outside(candidates, allowed, out / ".compare", parts, protection.holds_below,
                                            engine, cfg.max_lfn_length)
                if line is not None:
                    shown = line.decode("utf-8", errors="backslashreplace")
                    raise GuardTripped(PLAN_NOT_IN_CURRENT_DUMP,
                                       f"{plan_dir} plans the {what} {shown}, which the current scan's dump of {rse} "
                                       f"does not give to delete with the protected list and configuration in force")
            return now
        finally:
            shutil.rmtree(out, ignore_errors=True)
