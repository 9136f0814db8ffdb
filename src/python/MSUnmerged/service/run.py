"""One RSE start to end: `run_once(rse)` under its lease, `apply_plan(dir)` for a sealed plan, `preview(rse)`.

The Runner owns the step order; its JobKeeper (jobkeeper.py) owns the batch system. A run is data: its context
(RunContext: the RSE, its document, generation entry and limits read once, scan, decision, protected list,
what was sent and counted, the result) goes through a list of small steps (RUN, APPLY at the end of this file),
each of which goes on or ends the run with its result; the hook hears each step by name (result.STEPS).
run_once: refuse an RSE not this instance's -> lease -> reconcile jobs left in `submitting` -> poll and collect
live jobs -> revalidate queued jobs against the fresh protected list (jobs still live: the RSE stays running,
nothing more) -> decide: ConMon stats, state machine (skip; finish, then directory jobs for the directories still
to remove) -> guard: protected list checked against the baseline -> a new dump: plan (or reuse the sealed plan a
crash left) -> record; else drop newly protected files and start a new round -> directory jobs -> release this
cycle's slice -> submit, a batch at a time (credential and backend preflight before the first; per batch intent
-> submit -> mark) -> report the RSE's state -> settle (with wait_s: poll and top up) -> count.
Every step is idempotent against the ledger, so a crash anywhere is repaired by running it again.
"""
from __future__ import annotations

import logging
import os
import shutil
import socket
import time
from pathlib import Path
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence

from MSUnmerged import planlines, planner, seal, subset
from MSUnmerged.config import Config
from MSUnmerged.dumpreader import iter_chunks
from MSUnmerged.guards import (PLAN_MODIFIED, PLAN_NOT_IN_CURRENT_DUMP, PLAN_OUTDATED, UNKNOWN_RSE, GuardTripped,
                               check_counts, check_plan_scan, check_scan)
from MSUnmerged.jobs.backend import BatchBackend, JobState
from MSUnmerged.ledger import LeaseLost, Ledger, LedgerError, gen_key, sitebackoff, slices
from MSUnmerged.ledger.base import state_update
from MSUnmerged.service.decide import decision as decision_of
from MSUnmerged.service.jobkeeper import JobKeeper, Protected, TopUp
from MSUnmerged.service.result import INTERNAL_ERROR, LEASE_LOST, Hook, RunAction, RunResult, failure_of, jobs_detail
from MSUnmerged.service.rses import InstanceRSEs, UnknownRSE
from MSUnmerged.service.scans import StatsRead, scan_of
from MSUnmerged.sitelimits import RSELimits, limits_for
from MSUnmerged.sources import Sources
from MSUnmerged.sources.errors import SourceError
from MSUnmerged.statemachine import JOBS_RUNNING, SITE_CONFIG_BACKOFF, Action, Decision, RSEState

log = logging.getLogger(__name__)

ALREADY_APPLIED = "already_applied"  # apply of a plan the ledger holds already: nothing changes

FirstBatch = Callable[[], None]  # told when the run submits a batch (a cycle's hold, schedule.py)


@dataclass
class RunContext:
    """One run of one RSE (run_once or apply_plan), from its lease to its result."""

    rse: str
    result: RunResult
    deadline: float = 0.0  # time.monotonic() until which the run waits for its jobs
    wait_s: float = 0.0  # how long it may (0: it does not wait)
    stats: Optional[StatsRead] = None  # the cycle's ConMon read (scans.scan_of)
    limits: Optional[RSELimits] = None  # limits_for(config, rse): read when first needed (Runner._limits), once
    first_batch: Optional[FirstBatch] = None
    live: Optional[list[dict[str, Any]]] = None  # its live jobs as last read; None: not read (apply)
    doc: dict[str, Any] = field(default_factory=dict)  # its ledger document, read once before deciding
    scan: Any = None  # its ConMon scan
    decision: Optional[Decision] = None
    protected: Optional[Protected] = None  # the protected list of the run, checked
    operator_list: Optional[tuple[Sequence[str], float]] = None  # apply's list, when given: never lowers the baseline
    plan_dir: Optional[Path] = None
    plan: Optional[planner.Plan] = None
    sealed: Optional[seal.Seal] = None
    scan_started: Optional[float] = None  # the start of the scan the recorded plan is of
    entry: dict[str, Any] = field(default_factory=dict)  # the generation's entry (after its slice's release)
    state: Optional[dict[str, Any]] = None  # the RSE's state (ledger.base.state_update), written with its counters
    counted: bool = False  # its counters (jobs per state among them) were written after its last submission
    sent: int = 0  # jobs submitted: new ones, those a reconciliation sent again, also when a later batch failed

    @property
    def generation(self) -> float:
        """The generation the run works on (decided, or the applied plan's)."""
        assert self.result.generation is not None
        return self.result.generation

    @property
    def checked(self) -> Protected:
        """The run's protected list, read by its guard step."""
        assert self.protected is not None
        return self.protected

    @property
    def waits(self) -> bool:
        """Whether the run waits for the jobs it submitted (wait_s)."""
        return self.wait_s > 0 and self.result.submitted > 0

    def batch_sent(self, n: int) -> None:
        """A batch of `n` jobs went out (JobKeeper's `sent`): counted, and the cycle's hold told."""
        self.sent += n
        self.counted = False
        if self.first_batch is not None:
            self.first_batch()


@dataclass(frozen=True)
class Step:
    """One step of a run: `do` goes on (None) or ends the run with its result; `then`: the hook's step
    (result.STEPS) told when it goes on."""

    name: str
    do: Callable[["Runner", RunContext], Optional[RunResult]]
    then: str = ""


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
        self.jobs = JobKeeper(config, ledger, sources, self.leases, backend, self._step)

    def _step(self, step: str, rse: str) -> None:
        """`rse`'s run reached `step` (STEPS): tell the hook (the one in force: a test may replace it)."""
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
                 stats: Optional[StatsRead] = None, first_batch: Optional[FirstBatch] = None) -> RunResult:
        """Work one RSE start to end under its lease (the steps of RUN); waits up to `wait_s` for its jobs to finish.
        `stats`: the cycle's ConMon read, used while fresh (scans.scan_of); without it the run reads `stats` itself.
        `first_batch`: told when the run submits a batch (a cycle's hold)."""
        started = time.time()
        refused = self._refused(rse)
        if refused is not None:
            return refused
        self.leases.start_heartbeat()
        if not self.leases.acquire(rse, slot):
            return self._leased(rse, slot)
        ctx = RunContext(rse, RunResult(rse, RunAction.POLL), wait_s=wait_s, stats=stats, first_batch=first_batch)
        result = self._recorded(ctx, RUN)
        result.submitted = ctx.sent  # with the jobs a reconciliation sent again, and before a failure
        result.seconds = round(time.time() - started, 3)
        if result.reason != LEASE_LOST:
            self._count_jobs(ctx)
            self.leases.release(rse, slot if result.action != RunAction.FAILED else None)
        return result

    def _leased(self, rse: str, slot: Optional[int]) -> RunResult:
        """Another instance holds the RSE's lease: it worked the RSE in this slot already, or works it now."""
        lease = self.leases.describe(rse)
        if slot is not None and lease.get("done_slot") == slot:
            return RunResult(rse, RunAction.DONE_THIS_CYCLE, reason=RunAction.DONE_THIS_CYCLE)
        return RunResult(rse, RunAction.LEASED_ELSEWHERE, reason=RunAction.LEASED_ELSEWHERE,
                         detail=f"held by {lease.get('owner')} until {lease.get('expires')}")

    def _through(self, ctx: RunContext, steps: Sequence[Step]) -> Optional[RunResult]:
        """The steps in turn, each going on telling the hook its `then`; the result of the first that ends the run,
        None when none does."""
        for step in steps:
            log.debug("%s: %s", ctx.rse, step.name)
            ended = step.do(self, ctx)
            if ended is not None:
                return ended
            if step.then:
                self._step(step.then, ctx.rse)
        return None

    def _recorded(self, ctx: RunContext, steps: Sequence[Step]) -> RunResult:
        """The run's steps (`_through`); any error is recorded on the RSE with its reason (never raised)."""
        rse = ctx.rse
        try:
            return self._through(ctx, steps) or ctx.result
        except LeaseLost as exc:  # someone else works on it now: leave everything to them
            return RunResult(rse, RunAction.FAILED, reason=LEASE_LOST, detail=str(exc))
        except Exception as exc:  # one RSE's error, a bug too, must not stop the others
            failure = failure_of(exc)
            if failure.reason == INTERNAL_ERROR:
                log.exception("%s", rse)
            log.error("%s: %s: %s", rse, failure.reason, failure.detail)
            try:
                self.ledger.base.set_rse_state(rse, RSEState.FAILED, failure.reason, failure.detail)
                self._refresh_counters(ctx)  # e.g. a preflight refusal after a plan was recorded
            except LedgerError:
                log.exception("%s: could not record the failure", rse)
            return RunResult(rse, RunAction.FAILED, RSEState.FAILED, failure.reason, failure.detail,
                             source=failure.source)

    def _refresh_counters(self, ctx: RunContext, state: Optional[dict[str, Any]] = None) -> None:
        """The RSE's counters, its jobs per state among them: run_once does not count its jobs again unless the run
        submits more after this (two round trips an RSE). `state`: the RSE's state (state_update), written with
        them."""
        self.ledger.counters.refresh_counters(ctx.rse, state)
        ctx.counted = True

    def _limits(self, ctx: RunContext) -> RSELimits:
        """The RSE's limits and filters (limits_for), read when the run first needs them."""
        if ctx.limits is None:
            ctx.limits = limits_for(self.config, ctx.rse)
        return ctx.limits

    def _count_jobs(self, ctx: RunContext) -> None:
        """The RSE's jobs per state on its document, whatever way its run ended (the metrics read them there),
        unless the run counted them after its last submission."""
        if ctx.counted:
            return
        try:
            self.ledger.counters.refresh_job_counts(ctx.rse)
        except LedgerError as exc:  # a gauge a run late; the run's own outcome is recorded already
            log.warning("%s: could not count its jobs: %s", ctx.rse, exc)

    # -- the steps (RUN, APPLY): each goes on (None) or ends the run with its result --------------

    def _reconcile(self, ctx: RunContext) -> None:
        """Jobs a crash left `submitting` are adopted or sent again. None live (submitting or in the batch system):
        nothing to reconcile, poll or revalidate."""
        ctx.live = self.jobs.live(ctx.rse)
        if ctx.live:
            self.jobs.reconcile(ctx.rse, ctx.batch_sent)

    def _poll(self, ctx: RunContext) -> None:
        """Its live jobs polled and the finished ones collected, waiting for them up to `wait_s` from now
        (JobKeeper.wait)."""
        ctx.deadline = time.monotonic() + ctx.wait_s
        if ctx.live:
            waited = self.jobs.wait(ctx.rse, ctx.deadline)
            ctx.result.collected += waited.collected
            ctx.live = waited.live

    def _revalidate(self, ctx: RunContext) -> Optional[RunResult]:
        """Its queued jobs checked against the fresh protected list (JobKeeper.revalidate); jobs still live: the RSE
        stays running, nothing more."""
        result = ctx.result
        if ctx.live:
            result.removed_jobs, result.dropped_protected = self.jobs.revalidate(ctx.rse)
            ctx.live = self.jobs.live(ctx.rse)
        if not ctx.live:
            return None
        result.state, result.reason, result.detail = RSEState.RUNNING, JOBS_RUNNING, jobs_detail(len(ctx.live))
        self._refresh_counters(ctx, state_update(RSEState.RUNNING, detail=result.detail))
        return result

    def _decide(self, ctx: RunContext) -> Optional[RunResult]:
        """The state machine on its document and scan: skip (its state with its jobs counted, one update), finish
        (then the directories still to remove), or go on with a new generation or round."""
        ctx.doc = self.ledger.base.rse(ctx.rse)
        ctx.scan = scan_of(self.sources, ctx.rse, ctx.stats, self.config.service.stats_reuse_s)
        current = None if ctx.doc.get("recording") is not None else ctx.doc.get("generation")
        decision = ctx.decision = decision_of(self.ledger, self.config, ctx.rse, ctx.scan, current)
        result = ctx.result
        result.action, result.reason, result.detail = decision.action, decision.reason, decision.detail
        result.generation = decision.generation
        if decision.action is Action.SKIP:
            self.ledger.counters.refresh_job_counts(ctx.rse, state_update(RSEState.SKIPPED, decision.reason,
                                                                          decision.detail))
            ctx.counted = True
            result.state = RSEState.SKIPPED
            return result
        if decision.action is Action.FINISH:
            self._refresh_counters(ctx, self._finish(ctx, decision))
            return self._retry_dirs(ctx)
        return None

    def _guard(self, ctx: RunContext) -> Optional[RunResult]:
        """The protected list read now and checked against the RSE's baseline; a guard refusing it ends the run."""
        try:
            ctx.protected = self.jobs.protected_now(ctx.rse, ctx.doc)  # GuardTripped too: a source answered []
        except GuardTripped as guard:
            return self._guarded(ctx, guard.reason, guard.detail)
        return None

    def _plan_or_round(self, ctx: RunContext) -> Optional[RunResult]:
        """A new dump is planned and recorded (NEW_GENERATION); else the current one starts a new round (NEW_ROUND)."""
        assert ctx.decision is not None
        return self._through(ctx, NEW_GENERATION if ctx.decision.action is Action.NEW_GENERATION else NEW_ROUND)

    def _plan(self, ctx: RunContext) -> None:
        """Plan the dump, or reuse the sealed plan whose recording a crash interrupted (same files, same jobs). The
        directories the generation before did not remove are retried from now on."""
        rse, doc, generation = ctx.rse, ctx.doc, ctx.generation
        if doc.get("generation") is not None:
            self.ledger.pending_dirs.remember(rse, doc["generation"])
        plan_dir = ctx.plan_dir = self.config.state_dir / "plans" / rse / gen_key(generation)
        if doc.get("recording") == generation and (plan_dir / seal.SEAL_NAME).exists():
            try:
                ctx.sealed = seal.verify(plan_dir, self.config.planner.max_lfn_length)
                ctx.plan = planner.read_summary(plan_dir)
                if ctx.plan.dump_version == generation and not ctx.plan.guard:
                    ctx.scan_started = ctx.plan.scan_started
                    return
            except GuardTripped as broken:  # planned again below, from the dump
                log.warning("%s: not reusing %s: %s", rse, plan_dir, broken)
        checked = ctx.checked
        ctx.plan = self._plan_dump(rse, self._limits(ctx), ctx.scan, checked.protected, checked.baseline, plan_dir)
        ctx.sealed, ctx.scan_started = seal.read_seal(plan_dir), ctx.plan.scan_started

    def _record(self, ctx: RunContext) -> Optional[RunResult]:
        """Record the plan's files and jobs; a plan a guard refused ends the run."""
        plan, checked = ctx.plan, ctx.checked
        assert plan is not None and ctx.plan_dir is not None
        if plan.guard:
            return self._guarded(ctx, plan.guard, plan.guard_detail)
        # The list read from WMStats now is the service's own: it may lower the baseline as generations rotate out
        # (workflows finish); an operator's list at apply never does (the plan's own count is never used).
        baseline = len(checked.index) if ctx.operator_list is None else max(checked.baseline or 0, len(checked.index))
        lines = seal.PlanReader(ctx.plan_dir, ctx.sealed, self.config.planner.max_lfn_length)
        self.ledger.plans.record_plan(lines, plan, ctx.generation, baseline_count=baseline,
                                      scan_started=ctx.scan_started, floor_depth=self.config.planner.dir_floor_depth)
        return None

    def _drop_protected(self, ctx: RunContext) -> None:
        """The generation's files the run's protected list covers now are not deleted (skipped_protected)."""
        ctx.result.dropped_protected += self.ledger.plans.drop_protected(ctx.rse, ctx.generation, ctx.checked.index)

    def _new_round(self, ctx: RunContext) -> None:
        """A new round of the current generation: its files still to delete or to retry, in new jobs."""
        # Jobs a crash left planned between two submission batches go out before a new round starts, so that a
        # file's round (its attempts) counts its tries.
        if self.ledger.base.jobs_in(ctx.rse, [JobState.PLANNED], ctx.generation):
            return
        # A throttled RSE also retries, and deletes what a dry run left, N files a cycle at most.
        self.ledger.rounds.new_round(ctx.rse, ctx.generation, 1 + self.config.jobs.retries,
                                     self.config.planner.files_per_job, redo_dry_run=not self.config.service.dry_run,
                                     limit=self._limits(ctx).max_files_per_cycle or None)

    def _directory_jobs(self, ctx: RunContext) -> None:
        """Directory jobs for the RSE's directories still to remove from earlier plans."""
        self.jobs.plan_directory_jobs(ctx.rse, ctx.generation, ctx.checked.index)

    def _release_slice(self, ctx: RunContext) -> None:
        """This cycle's slice of a throttled plan is released (ledger/slices.py)."""
        ctx.entry = self.ledger.slices.release_next(ctx.rse, ctx.generation)

    def _submit(self, ctx: RunContext) -> None:
        """The released jobs go out, as many as the RSE's max_in_flight leaves room for."""
        checked, result = ctx.checked, ctx.result
        # A run's live jobs were read after its poll, under the lease: none, so max_in_flight's room needs no read of
        # them (apply did not read them). Its document was read under the lease after the poll (apply: at its start):
        # its site's back-off is current.
        result.submitted = self.jobs.submit_planned(ctx.rse, ctx.generation, checked.protected, checked.fetched,
                                                    ctx.entry, None if ctx.live is None else len(ctx.live), ctx.doc,
                                                    ctx.batch_sent)
        result.state = RSEState.RUNNING if result.submitted else RSEState.PLANNED

    def _report(self, ctx: RunContext) -> None:
        """The RSE's state after its submission: its jobs in the batch system, or why they wait (its site's
        back-off); written now when the run waits for its jobs, else with its counters."""
        result = ctx.result
        submitted = {"detail": jobs_detail(result.submitted), "started": time.time()}
        hold = None if result.submitted else sitebackoff.current(self.ledger.base.rse(ctx.rse))
        if hold is not None:  # its jobs wait for the site's configuration to be fixed: say so
            result.reason, result.detail = SITE_CONFIG_BACKOFF, sitebackoff.describe(hold)
            submitted.update(reason=result.reason, detail=result.detail)
        if ctx.waits:
            self.ledger.base.set_rse_state(ctx.rse, result.state, **submitted)
        else:
            ctx.state = state_update(result.state, **submitted)

    def _settle(self, ctx: RunContext) -> None:
        """A run that waits for its jobs: they are polled and collected, and more of the released ones sent as the
        RSE's max_in_flight leaves room, until none is live or the deadline (JobKeeper.wait); every job collected,
        the RSE's final state when the state machine finishes it."""
        if not ctx.waits:
            return
        checked = ctx.checked
        waited = self.jobs.wait(ctx.rse, ctx.deadline, TopUp(ctx.generation, (checked.protected, checked.fetched),
                                                             ctx.batch_sent))
        ctx.result.collected += waited.collected
        if not waited.live:  # the plan's recording is over: the generation is current
            settled = decision_of(self.ledger, self.config, ctx.rse, ctx.scan, ctx.generation)
            if settled.action is Action.FINISH:
                ctx.state = self._finish(ctx, settled)

    def _count(self, ctx: RunContext) -> None:
        """The RSE's counters, its jobs per state among them, with its state, as the last ledger step of its run."""
        self._refresh_counters(ctx, ctx.state)

    def _already_applied(self, ctx: RunContext) -> Optional[RunResult]:
        """A plan the ledger holds already (and recorded to its end) changes nothing."""
        ctx.doc = self.ledger.base.rse(ctx.rse)
        ctx.entry = self.ledger.base.generation_entry(ctx.rse, ctx.generation)
        assert ctx.sealed is not None
        if ctx.entry.get("seal") != ctx.sealed.digest or ctx.doc.get("recording") == ctx.generation:
            return None  # another plan, or this one still `recording`: a crash interrupted it
        result = ctx.result
        result.state, result.reason = ctx.doc.get("state", ""), ALREADY_APPLIED
        result.detail = f"{ctx.plan_dir} is recorded already as generation {gen_key(ctx.generation)}: nothing changed"
        return result

    def _check_plan(self, ctx: RunContext) -> Optional[RunResult]:
        """The plan is refused when older than the RSE's current generation, another plan of its generation, not of
        the current sources (`_rederive`) or too large for the count guards in force."""
        plan, current, generation = ctx.plan, ctx.doc.get("generation"), ctx.generation
        assert plan is not None and ctx.sealed is not None and ctx.operator_list is not None
        try:
            if current is not None and generation < current:
                raise GuardTripped(PLAN_OUTDATED, f"{ctx.plan_dir} is generation {gen_key(generation)}, older than "
                                                  f"the RSE's current {gen_key(current)}")
            if ctx.entry and ctx.entry.get("seal") != ctx.sealed.digest:
                raise GuardTripped(PLAN_OUTDATED, f"generation {gen_key(generation)} is recorded already with "
                                                  f"another plan ({ctx.entry.get('plan_dir')})")
            slices.check(plan.job_sizes, plan.job_slices, plan.slice_sizes)  # the count guard judges the largest
            listed, given = ctx.operator_list
            ctx.protected = Protected(listed, given, *self.jobs.protection(ctx.rse, listed))
            now = self._rederive(ctx)
            check_counts(now.files_total, plan.files_to_delete, self.config.guards, max(plan.slice_sizes, default=None))
        except GuardTripped as guard:
            return self._guarded(ctx, guard.reason, guard.detail)
        ctx.scan_started = now.scan_started
        return None

    def _applied(self, ctx: RunContext) -> None:
        """The applied plan's state: its jobs submitted and files dropped, written with the counters."""
        result = ctx.result
        ctx.state = state_update(result.state, detail=f"applied {ctx.plan_dir}: {result.submitted} jobs, "
                                                      f"{result.dropped_protected} files dropped as protected since "
                                                      "planning")

    # -- helpers of the steps ------------------------------------------------------------------

    def _finish(self, ctx: RunContext, decision: Decision) -> dict[str, Any]:
        """Nothing left to do on this dump: the final state (clean, done with errors, dry run done) on the result,
        and the update of the RSE's document that says so."""
        assert decision.state is not None
        result = ctx.result
        result.state, result.reason, result.detail = decision.state, decision.reason, decision.detail
        return state_update(decision.state, decision.reason, decision.detail, finished=time.time())

    def _retry_dirs(self, ctx: RunContext) -> RunResult:
        """The dump's work is over: its directories not removed are remembered, and directory jobs go out for
        those of any generation still to remove (ledger/pending_dirs.py). The RSE keeps its final state; a
        protected list that cannot be had or trusted now only postpones them to a later cycle."""
        rse, generation = ctx.rse, ctx.generation
        self.ledger.pending_dirs.remember(rse, generation)
        if not self.ledger.pending_dirs.due(rse, 1 + self.config.jobs.retries):
            return ctx.result
        try:
            checked = self.jobs.protected_now(rse)
        except (SourceError, GuardTripped) as exc:
            log.warning("%s: directories still to remove wait for a later cycle: %s", rse, exc)
            return ctx.result
        if self.jobs.plan_directory_jobs(rse, generation, checked.index):  # reached with no job live
            ctx.result.submitted = self.jobs.submit_planned(rse, generation, checked.protected, checked.fetched,
                                                            live=0, sent=ctx.batch_sent)
        return ctx.result

    def _guarded(self, ctx: RunContext, reason: str, detail: str) -> RunResult:
        """A guard refused: nothing is submitted for this RSE; the reason is on its document."""
        self.ledger.base.set_rse_state(ctx.rse, RSEState.GUARDED, reason, detail)
        result = ctx.result
        result.state, result.reason, result.detail = RSEState.GUARDED, reason, detail
        return result

    # -- planning ------------------------------------------------------------------------------

    def _plan_dump(self, rse: str, limits: RSELimits, scan: Any, protected: Sequence[str], baseline: Optional[int],
                   out: Path, progress: Optional[planner.ProgressFn] = None,
                   count_guards: bool = True) -> planner.Plan:
        """Open the RSE's dump and plan it into `out` with the configuration in force (`limits`: the RSE's)."""
        # A throttled RSE releases its oldest dataset directories first: when the ledger first saw each.
        first_seen = self.ledger.ages.first_seen(rse) if limits.max_files_per_cycle else None
        with self.sources.open_dump(rse) as dump:
            return planner.plan(rse, iter_chunks(dump), protected, self.config, out, stats=scan,
                                previous_protected_count=baseline, progress=progress, count_guards=count_guards,
                                ages=first_seen)

    def preview(self, rse: str, progress: Optional[planner.ProgressFn] = None) -> planner.Plan:
        """Plan the RSE now from the sources into <state_dir>/previews/<rse>: the plan step's work (`_plan_dump`).

        Planner only: nothing is recorded in the ledger and nothing is submitted. The guards are those
        of run_once: the ledger's baseline, the configuration in force. UnknownRSE for an RSE that is
        not this instance's.
        """
        scan = self.sources.stats().get(rse)  # needed anyway; a ConMon failure is the clearer message
        self.require_rse(rse)
        out = self.preview_dir(rse)
        shutil.rmtree(out, ignore_errors=True)  # a preview never mixes with an older one
        return self._plan_dump(rse, limits_for(self.config, rse), scan, self.sources.protected(),
                               self.ledger.plans.protected_baseline(rse), out, progress)

    def preview_dir(self, rse: str) -> Path:
        """Where `preview` writes the RSE's plan."""
        return self.config.state_dir / "previews" / rse

    # -- a sealed plan -------------------------------------------------------------------------

    def apply_plan(self, plan_dir: Path, protected: list[str]) -> RunResult:
        """Record and submit exactly the sealed plan in `plan_dir` (from `msunmerged plan`), under the RSE's
        lease, after dropping the files the current protected list covers (the steps of APPLY).

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
        ctx = RunContext(rse, RunResult(rse, RunAction.APPLY), plan_dir=plan_dir)
        try:
            ctx.sealed = seal.verify(plan_dir, self.config.planner.max_lfn_length)
        except GuardTripped as broken:
            return self._guarded(ctx, broken.reason, f"{plan_dir}: {broken.detail}")
        plan = ctx.plan = planner.read_summary(plan_dir)
        if plan.guard:
            return self._guarded(ctx, plan.guard, plan.guard_detail)
        if not self.leases.acquire(rse):
            return RunResult(rse, RunAction.LEASED_ELSEWHERE, reason=RunAction.LEASED_ELSEWHERE)
        try:
            ctx.result.generation = ctx.sealed.generation if ctx.sealed.generation is not None else plan.created
            # An operator's list counts as fetched when apply was asked to use it.
            ctx.operator_list = (protected, time.time())
            return self._recorded(ctx, APPLY)
        finally:
            self.leases.release(rse)

    def _rederive(self, ctx: RunContext) -> planner.Plan:
        """The plan is a reviewed intent only. From the sources: the RSE's current ConMon scan (the plan must be of
        it: its generation and start), and that scan's dump planned again with the protected list and
        configuration in force (the count guards aside: they are checked on the plan applied). Every planned
        file and removable directory must be in that plan, or be covered by the current list (then dropped, or
        kept by the worker). Returns the plan made now; GuardTripped, nothing recorded, otherwise."""
        plan, plan_dir, sealed, checked = ctx.plan, ctx.plan_dir, ctx.sealed, ctx.checked
        assert plan is not None and plan_dir is not None and sealed is not None
        rse, cfg = plan.rse, self.config.planner
        stats = self.sources.stats().get(rse)  # read now, never a cycle's: the plan must be of the current scan
        scan = check_scan(stats, self.config.guards.max_scan_age_h, time.time())
        check_plan_scan(sealed.generation, plan.scan_started, scan)
        out = self.config.state_dir / "rederived" / rse
        shutil.rmtree(out, ignore_errors=True)
        try:
            now = self._plan_dump(rse, self._limits(ctx), stats, checked.protected, checked.baseline, out,
                                  count_guards=False)
            if now.guard:
                raise GuardTripped(now.guard, f"the current dump of {rse} planned again: {now.guard_detail}")
            mine = [plan_dir / seal.JOBS_DIR / name for name in plan.job_files]
            theirs = [out / seal.JOBS_DIR / name for name in now.job_files]
            size = sum(p.stat().st_size for p in mine + theirs)
            parts = subset.partitions_for(size, cfg.partition_max_bytes, cfg.spill_partitions)
            engine = planlines.engine(cfg.engine)
            for what, candidates, allowed in (("file", mine, theirs),
                                              ("directory", [plan_dir / seal.DIRS_NAME], [out / seal.DIRS_NAME])):
                line = subset.first_outside(candidates, allowed, out / ".compare", parts, checked.index.holds_below,
                                            engine, cfg.max_lfn_length)
                if line is not None:
                    shown = line.decode("utf-8", errors="backslashreplace")
                    raise GuardTripped(PLAN_NOT_IN_CURRENT_DUMP,
                                       f"{plan_dir} plans the {what} {shown}, which the current scan's dump of {rse} "
                                       f"does not give to delete with the protected list and configuration in force")
            return now
        finally:
            shutil.rmtree(out, ignore_errors=True)


# The steps of a run (run_once) and of an apply (apply_plan), in their order; `then`: the hook told after each.
NEW_GENERATION = (Step("plan", Runner._plan, "planned"), Step("record", Runner._record, "recorded"))
NEW_ROUND = (Step("drop protected", Runner._drop_protected), Step("new round", Runner._new_round))
RUN = (Step("reconcile", Runner._reconcile, "reconciled"), Step("poll", Runner._poll, "polled"),
       Step("revalidate", Runner._revalidate), Step("decide", Runner._decide), Step("guard", Runner._guard),
       Step("plan or new round", Runner._plan_or_round), Step("directory jobs", Runner._directory_jobs),
       Step("release slice", Runner._release_slice), Step("submit", Runner._submit), Step("report", Runner._report),
       Step("settle", Runner._settle), Step("count", Runner._count, "counted"))
APPLY = (Step("already applied", Runner._already_applied),
         Step("check", Runner._check_plan, "planned"),  # its seal, the dump planned again, the comparison
         Step("record", Runner._record, "recorded"), Step("drop protected", Runner._drop_protected),
         Step("release slice", Runner._release_slice), Step("submit", Runner._submit),
         Step("applied", Runner._applied), Step("count", Runner._count, "counted"))
