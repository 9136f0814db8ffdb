"""An RSE's cleanup jobs: submit (intent first), reconcile after a crash, poll and collect, revalidate.

Jobs are submitted in batches (`jobs.submit_batch`, the first at most FIRST_BATCH); for each, intent is recorded
before the submission and the submission marked after it, so a crash in between leaves at most one batch
`submitting`, repaired by `reconcile` on the next run (later batches stay planned for the next submission); every
other step is idempotent against the ledger too.
"""
from __future__ import annotations

import logging
import time
from functools import partial
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, NamedTuple, Optional, Sequence

from MSUnmerged import seal
from MSUnmerged.collector import Collector, Report, parse_report
from MSUnmerged.config import Config
from MSUnmerged.guards import (GUARD_SCAN_START_MISSING, PLAN_MODIFIED, GuardTripped, check_plan_lines,
                               check_protection, split_lines)
from MSUnmerged.jobs.backend import BackendError, BatchBackend, JobState, JobStatus, credential_for
from MSUnmerged.jobs.router import backend_name
from MSUnmerged.jobs.spec import CleanupJob, file_dirs, held_dirs, job_dirs, make_job, protected_bases
from MSUnmerged.ledger import LIVE_JOB_STATES, Leases, Ledger, gen_key, sitebackoff, slices
from MSUnmerged.ledger.recording import baseline_of
from MSUnmerged.ledger.states import BACKEND_JOB_STATES
from MSUnmerged.lfn import PrefixSet
from MSUnmerged.lfn import depth as lfn_depth
from MSUnmerged.service.result import Hook
from MSUnmerged.sitelimits import limits_for
from MSUnmerged.sites import resolve_site
from MSUnmerged.sources import Sources
from MSUnmerged.worker.cleanup import EXIT_CONFIG, EXIT_DONE, EXIT_PARTIAL
from MSUnmerged.worker.paths import depth
from MSUnmerged.worker.report import PROTECTION_EXPIRED

log = logging.getLogger(__name__)

Fetched = tuple[Sequence[str], float]  # a protected list and when it was fetched (the fetch's start)
Sent = Callable[[int], None]  # told how many jobs each submitted batch held (a run's own count, run.py RunContext)
# A submission's first batch holds at most this many jobs: an RSE's first jobs go out after building these few
# (their files read back from the ledger, their manifests written), not a whole `jobs.submit_batch`.
FIRST_BATCH = 50


class ProtectedList:
    """A protected list fetched when first needed (`got`: one fetched already), then the same while younger than
    `reuse_s` (None: for the holder's life, e.g. a top-up pass); a failure too, for as long (WMStats down or
    hanging is asked once a pass, not once an RSE or a poll)."""

    def __init__(self, fetch: Callable[[], Fetched], reuse_s: Optional[float] = None,
                 got: Optional[Fetched] = None) -> None:
        self._fetch = fetch
        self.reuse_s = reuse_s
        self._got = got
        self._failed: Optional[Exception] = None
        self._at = None if got is None else got[1]  # when the list kept (or the failure) was asked for

    def __call__(self) -> Fetched:
        if self._at is None or self.reuse_s is not None and time.time() - self._at >= self.reuse_s:
            self._at = time.time()
            try:
                self._got, self._failed = self._fetch(), None
            except Exception as exc:
                self._failed = exc
                raise
            self._at = self._got[1]
        if self._failed is not None:
            raise self._failed
        assert self._got is not None
        return self._got


def batch_bounds(n: int, size: int) -> Iterator[tuple[int, int]]:
    """[start, end) of each batch of `n` jobs: the first at most FIRST_BATCH long, the others `size`."""
    start, end = 0, min(size, FIRST_BATCH)
    while start < n:
        yield start, min(end, n)
        start, end = end, end + size


class Protected(NamedTuple):
    """A protected list read now for an RSE: the list, when it was fetched, its index checked against the RSE's
    baseline (check_protection), that baseline."""

    protected: Sequence[str]
    fetched: float
    index: PrefixSet
    baseline: Optional[int]


class TopUp(NamedTuple):
    """What a run waiting for the jobs it has just sent tops up with (JobKeeper.wait): its generation, the protected
    list it sent them with (Fetched) and its `sent` (as submit_planned's)."""

    generation: float
    fetched: Fetched
    sent: Optional[Sent] = None


class Waited(NamedTuple):
    """The end of a wait (JobKeeper.wait): how many jobs it collected, the RSE's jobs still live."""

    collected: int
    live: list[dict[str, Any]]


class JobKeeper:
    """Owns the cleanup jobs of this instance's RSEs, from submission to collection."""

    def __init__(self, config: Config, ledger: Ledger, sources: Sources, leases: Leases, backend: BatchBackend,
                 hook: Hook) -> None:
        self.config = config
        self.ledger = ledger
        self.sources = sources
        self.leases = leases
        self.backend = backend
        self.hook = hook
        self.collector = Collector(ledger.outcomes)
        self._changed: set[str] = set()  # RSEs whose jobs this keeper moved since `changed` was last asked

    def changed(self, rse: str) -> bool:
        """Whether this keeper changed the state of any of the RSE's jobs since the last call (submitted, polled
        into another state, collected, planned again, superseded): its counters are to be refreshed."""
        if rse in self._changed:
            self._changed.discard(rse)
            return True
        return False

    @property
    def renew_s(self) -> float:
        """A protected list older than this is not sent to a site (a waiting job's manifest with less use left
        is re-issued, `renew`): half of jobs.max_protection_age_s."""
        return self.config.jobs.max_protection_age_s / 2

    def protection(self, rse: str, protected: Sequence[str],
                   doc: Optional[Mapping[str, Any]] = None) -> tuple[PrefixSet, Optional[int]]:
        """The index of a protected list (WMStats' now, or an operator's), checked with the guards in force
        against the RSE's ledger baseline, and that baseline; GuardTripped when the list cannot be trusted.
        `doc`: the RSE's document when the caller has just read it (the baseline is taken from it)."""
        baseline = self.ledger.plans.protected_baseline(rse) if doc is None else baseline_of(doc.get("generations", []))
        return check_protection(protected, baseline, self.config.guards.max_protected_shrink), baseline

    def fetch_protected(self) -> Fetched:
        """The protected list read now, with the time it was asked for: what a job's manifest may rely on until
        that time plus jobs.max_protection_age_s."""
        at = time.time()
        return self.sources.protected(), at

    def protected_now(self, rse: str, doc: Optional[Mapping[str, Any]] = None) -> Protected:
        """The protected list read now (fetch_protected) with its index checked against the RSE's baseline
        (`protection`; `doc` as there); SourceError or GuardTripped when it cannot be had or trusted."""
        protected, fetched = self.fetch_protected()
        return Protected(protected, fetched, *self.protection(rse, protected, doc))

    def live(self, rse: str) -> list[dict[str, Any]]:
        """The RSE's jobs submitted or being submitted and not yet collected."""
        return self.ledger.base.jobs_in(rse, LIVE_JOB_STATES)

    # -- submission ----------------------------------------------------------------------------

    def submit_planned(self, rse: str, generation: float, protected: Sequence[str], fetched: float,
                       entry: Optional[dict[str, Any]] = None, live: Optional[int] = None,
                       doc: Optional[Mapping[str, Any]] = None, sent: Optional[Sent] = None,
                       ready: Optional[Sequence[dict[str, Any]]] = None) -> int:
        """Submit the generation's planned jobs of the released slices (ledger/slices.py), as many as the RSE's
        `max_in_flight` leaves room for, in batches (batch_bounds): for each batch intent first, then submit,
        then mark (see `reconcile`). Returns how many were submitted. `fetched`: when `protected` was fetched
        (fetch_protected); `entry`: the generation's entry, when the caller has just read it
        (ledger.slices.release_next); `live`: see `room`; `doc`: the RSE's document, when the caller has read it since
        its last poll (the site's back-off is read from it); `sent`: told each batch submitted; `ready`: what `ready`
        gave, when the caller has just asked it (with this `entry`)."""
        entry = self.ledger.base.generation_entry(rse, generation) if entry is None else entry
        doc = self.ledger.base.rse(rse) if doc is None else doc
        if sitebackoff.holds(doc):  # its site's configuration was unusable: its jobs wait, planned
            return 0
        ready = self.ready(rse, generation, entry, live) if ready is None else ready
        hold = sitebackoff.current(doc)
        if hold is not None and ready:  # the wait is over: one job tries the site again
            ready = ready[:1]
            self.ledger.site_backoff.probing(rse, hold, self.config)
            log.info("%s: one job tries the site configuration again after %d config_error tries", rse, hold["tries"])
        return self._submit_batches(rse, ready, (protected, fetched), intent=True, entries={generation: entry},
                                    sent=sent)

    def ready(self, rse: str, generation: float, entry: Optional[dict[str, Any]] = None,
              live: Optional[int] = None) -> list[dict[str, Any]]:
        """The generation's planned jobs that may be submitted now: of released slices, within max_in_flight
        (`entry`: the generation's entry, when the caller has just read it; `live`: see `room`)."""
        entry = self.ledger.base.generation_entry(rse, generation) if entry is None else entry
        released = [doc for doc in self.ledger.base.jobs_in(rse, [JobState.PLANNED], generation)
                    if slices.is_released(doc, entry)]
        return released[:self.room(rse, len(released), live)]

    def top_up(self, rse: str, generation: float, fetch: Callable[[], Fetched], sent: Optional[Sent] = None) -> int:
        """More of the generation's released jobs as max_in_flight leaves room (between cycles, or while `run
        --wait` waits), with the protected list `fetch` gives (asked only when a job is ready: a ProtectedList),
        checked against the RSE's baseline (GuardTripped: nothing is submitted); `sent` as submit_planned's. Returns how
        many were submitted."""
        entry = self.ledger.base.generation_entry(rse, generation)
        ready = self.ready(rse, generation, entry)
        if not ready:
            return 0
        protected, at = fetch()
        self.protection(rse, protected)
        return self.submit_planned(rse, generation, protected, at, entry, sent=sent, ready=ready)

    def plan_directory_jobs(self, rse: str, generation: float, protection: PrefixSet) -> list[str]:
        """Directory jobs for the RSE's directories still to remove from earlier plans (ledger/pending_dirs.py);
        those the current protected list or the RSE's filters now keep, or above the floor, are forgotten."""
        excluded = PrefixSet(limits_for(self.config, rse).exclude)
        floor = self.config.planner.dir_floor_depth

        def removable(directory: str) -> bool:
            d = directory.encode("utf-8", "surrogateescape")
            return lfn_depth(d) >= floor and not any(s.covers(d) or s.holds_below(d) for s in (protection, excluded))
        return self.ledger.pending_dirs.plan_jobs(rse, generation, 1 + self.config.jobs.retries,
                                                  self.config.planner.files_per_job, removable)

    def room(self, rse: str, wanted: int, live: Optional[int] = None) -> int:
        """How many of `wanted` jobs the RSE may have submitted now: its `max_in_flight` less its live jobs
        (`live`: their number when the caller, holding the RSE's lease, has read them since its last submission
        or poll; read here otherwise)."""
        cap = limits_for(self.config, rse).max_in_flight
        if not cap:
            return wanted
        return max(0, min(wanted, cap - (len(self.live(rse)) if live is None else live)))

    def reconcile(self, rse: str, sent: Optional[Sent] = None) -> None:
        """Jobs left in `submitting` by a crash: adopt the ones the batch system has, submit the rest (`sent`: told
        each batch submitted)."""
        pending = self.ledger.base.jobs_in(rse, [JobState.SUBMITTING])
        if not pending:
            return
        found = self.backend.find([j["_id"] for j in pending])
        self.ledger.rounds.mark_all_submitted(found)
        missing = [j for j in pending if j["_id"] not in found]
        if not missing:
            return
        fetched = self.fetch_protected()
        protection, _ = self.protection(rse, fetched[0])
        for gen in {doc["gen"] for doc in missing}:
            self.ledger.plans.drop_protected(rse, gen, protection)
        log.info("%s: resubmitting %d jobs whose submission was not confirmed", rse, len(missing))
        self._submit_batches(rse, missing, fetched, intent=False, sent=sent)

    def _submit_batches(self, rse: str, docs: Sequence[dict[str, Any]], fetched: Fetched,
                        intent: bool, entries: Optional[dict[float, dict[str, Any]]] = None,
                        sent: Optional[Sent] = None) -> int:
        """Build and submit the jobs of these documents one batch at a time; `intent`: record it first (jobs
        still planned), else they are `submitting` already; `entries`: generation entries just read. The storage
        credential and the backend are checked before the first batch."""
        n, checked = 0, False
        for jobs in self._batches(rse, docs, fetched, entries or {}):
            if not checked:  # missing or expiring, refused or unreachable: BackendError, nothing recorded or submitted
                credential_for(self.config.jobs, rse).check()
                self.backend.preflight(rse)
                checked = True
            # Resubmitted too: a job's record says until when its new manifest's list may be used (revalidation).
            self.ledger.rounds.record_job_intent(jobs, backend_name(self.backend, rse), again=not intent)
            if intent:
                self.hook("intent", rse)
            n += self._submit(rse, jobs, sent)
        return n

    def _batches(self, rse: str, docs: Sequence[dict[str, Any]], fetched: Fetched,
                 entries: dict[float, dict[str, Any]]) -> Iterator[list[CleanupJob]]:
        """The jobs of these job documents with the files they still hold planned, a batch at a time (batch_bounds),
        each batch built when asked for; a job with no file left is closed. The protected list, removable
        directories and site checks are prepared once for all batches, from each generation's entry read once."""
        gens = {doc["gen"] for doc in docs}
        entries = {gen: entries[gen] if gen in entries else self.ledger.base.generation_entry(rse, gen) for gen in gens}
        removable = {gen: self.removable(rse, gen, entries[gen]) for gen in gens}
        checks = {gen: self._checks(rse, gen, entries[gen]) for gen in gens}
        bases = protected_bases(fetched[0])
        site = ""  # asked once, for the first job that has files (it may ask Rucio)
        for start, end in batch_bounds(len(docs), self.config.jobs.submit_batch):
            jobs = []
            lfns_of = self.ledger.rounds.jobs_lfns([doc["_id"] for doc in docs[start:end]])
            for doc in docs[start:end]:
                lfns = lfns_of[doc["_id"]]
                retry = doc.get("retry_dirs") or []  # a directory job (ledger/pending_dirs.py) holds no file
                if not lfns and not retry:
                    self.ledger.outcomes.close_job(doc["_id"], JobState.FINISHED, "no files left")
                    continue
                site = site or self._site(rse)
                jobs.append(make_job(doc["_id"], rse, site, lfns, removable[doc["gen"]], bases, self.config,
                                     generation=doc["gen"], retry_dirs=retry, protected_at=fetched[1],
                                     **checks[doc["gen"]]))
            if jobs:
                yield jobs

    def _submit(self, rse: str, jobs: list[CleanupJob], sent: Optional[Sent]) -> int:
        self.leases.check(rse)  # fencing: never submit for an RSE another instance took over
        ids = self.backend.submit(jobs)
        self._changed.add(rse)
        if sent is not None:  # counted as it goes: a later batch's failure leaves this one's count
            sent(len(ids))
        log.info("%s: submitted %d jobs (%d files, %d directories to retry) to %s for site %s", rse, len(ids),
                 sum(len(j.step.lfns) for j in jobs), sum(len(j.step.retry_dirs) for j in jobs),
                 backend_name(self.backend, rse), jobs[0].site)
        self.hook("submitted", rse)
        self.ledger.rounds.mark_all_submitted(ids)
        self.hook("marked", rse)
        return len(ids)

    def _site(self, rse: str) -> str:
        return resolve_site(self.config.jobs, rse, self.sources)

    def removable(self, rse: str, generation: float, entry: Optional[dict[str, Any]] = None) -> set[str]:
        """The plan's removable directories: dirs.txt read as bytes, split on b"\\n" only, checked against
        the seal's digest recorded with the generation (`entry`, read when not given) and line by line
        (GuardTripped otherwise)."""
        entry = self.ledger.base.generation_entry(rse, generation) if entry is None else entry
        path = Path(entry.get("plan_dir", "")) / seal.DIRS_NAME
        if not entry or not path.exists():
            return set()
        data = path.read_bytes()
        if entry.get("dirs_sha256") not in (None, seal.sha256(data)):
            raise GuardTripped(PLAN_MODIFIED, f"{path} changed since its plan was recorded")
        check_plan_lines(data, self.config.planner.max_lfn_length, str(path))
        return {raw.decode("utf-8", errors="surrogateescape") for raw in split_lines(data)}

    def _checks(self, rse: str, generation: float, entry: dict[str, Any]) -> dict[str, Any]:
        """What the jobs' workers check their site against: Rucio's PFN of /store/unmerged/ (a Rucio failure
        raises SourceError: nothing is submitted) and the start of the scan the plan comes from (a generation
        recorded without one raises GuardTripped: nothing is submitted)."""
        started = entry.get("scan_started")
        if started is None:
            raise GuardTripped(GUARD_SCAN_START_MISSING, f"generation {gen_key(generation)} was recorded without "
                                                         "its scan's start_time: its files are not submitted")
        return {"unmerged_pfn": self.sources.unmerged_pfn(rse), "scan_started": started}

    # -- jobs in the batch system --------------------------------------------------------------

    def poll(self, rse: str, fetch: Optional[Callable[[], Fetched]] = None) -> int:
        """Ask the backend about live jobs; collect the finished ones. Returns how many were collected. A job the
        backend holds back until it is revalidated (adopted from an earlier service's queue) is revalidated now
        (`fetch`: see revalidate), so that it may start while the caller waits."""
        live = [j for j in self.ledger.base.jobs_in(rse, BACKEND_JOB_STATES) if j.get("batch_id")]
        if not live:
            return 0
        statuses = self.backend.poll({j["_id"]: j["batch_id"] for j in live})
        n = 0
        sites: dict[bool, tuple[float, str]] = {}  # site configuration usable? (latest job's submission, why not)
        for job in live:
            status = statuses.get(job["_id"]) or JobStatus(job["_id"], JobState.VANISHED, job["batch_id"])
            if status.state.terminal:
                n += self._collect(job, status, sites)
            elif status.state is not JobState(job["state"]) or status.reason != job.get("reason", ""):
                self.ledger.rounds.set_job_state(job["_id"], status.state, status.reason)  # e.g. why it waits
                self._changed.add(rse)
        if True in sites:
            self.ledger.site_backoff.cleared(rse)
        elif False in sites:  # one try however many of its jobs said so
            hold = self.ledger.site_backoff.failed(rse, sites[False][1], sites[False][0], self.config)
            log.warning("%s: %s", rse, sitebackoff.describe(hold))
        if n:
            self.hook("collected", rse)
        if any(s.awaits_revalidation for s in statuses.values()):
            self.revalidate(rse, fetch)
        return n

    def wait(self, rse: str, deadline: float, top_up: Optional[TopUp] = None) -> Waited:
        """The RSE's live jobs polled and the finished ones collected (`poll`) until none is live or
        time.monotonic() reaches `deadline` (a pause ends 0.05 s after it at most). Jobs left from before (no `top_up`):
        polled at once, then after pauses of up to 2 s. A run's jobs just sent (`top_up`): polled after pauses of up
        to 0.2 s, the first one too, each poll followed by more of the generation's released jobs as max_in_flight
        leaves room (`top_up`), with the run's protected list while younger than renew_s, then one fetched again
        (a ProtectedList)."""
        more = None if top_up is None else partial(self.top_up, rse, top_up.generation, sent=top_up.sent,
                                                   fetch=ProtectedList(self.fetch_protected, self.renew_s,
                                                                       top_up.fetched))
        collected = self.poll(rse) if more is None else 0
        live, pause = self.live(rse), 2.0 if more is None else 0.2
        while live and time.monotonic() < deadline:
            time.sleep(min(pause, max(0.05, deadline - time.monotonic())))
            collected += self.poll(rse)
            if more is not None:
                more()
            live = self.live(rse)
        return Waited(collected, live)

    def _collect(self, job: dict[str, Any], status: JobStatus, sites: dict[bool, tuple[float, str]]) -> bool:
        """Report -> per-file outcomes -> job closed (unreported files: unknown) -> job removed; True. A job that
        never started and left no report is planned again instead, its files' tries unchanged; False. So is a job
        whose worker left files because its protected list was too old (PROTECTION_EXPIRED), once the others'
        outcomes are recorded; True. A job whose worker reported says in `sites` whether the site configuration
        was usable (False: with why not)."""
        dest = self.config.state_dir / "reports" / job["rse"] / f"{job['_id'].replace(':', '_')}.jsonl"
        dest.parent.mkdir(parents=True, exist_ok=True)
        path = self.backend.fetch_report(job["_id"], job["batch_id"], dest)
        collected = not (path is None and status.never_ran)
        self._changed.add(job["rse"])
        if not collected:
            log.warning("%s: job %s never started (%s): planned again", job["rse"], job["_id"], status.reason)
            why = f"never started: {status.reason or status.state.value}"
            self._requeue(job["rse"], {job["_id"]: (job["gen"], why)})
        else:
            report = parse_report(path) if path is not None else None
            lfns = self.ledger.rounds.job_lfns(job["_id"], states=None)
            # The report may speak only of this job's files; the ledger changes only those still assigned to
            # this job, so a late report never overwrites a retry's outcome.
            got = self.collector.collect(job["_id"], lfns, report, status, self._other_dirs(job, lfns, report),
                                         lambda: self._given_dirs(job, lfns))
            if report is not None and report.exit_code in (EXIT_DONE, EXIT_PARTIAL, EXIT_CONFIG):  # it read the site
                usable = report.exit_code != EXIT_CONFIG
                said = (float(job.get("submitted_at") or 0), str((report.summary or {}).get("error") or ""))
                sites[usable] = max(said, sites.get(usable, said))  # the latest submitted job's
            if got.reissued:  # its protected list grew too old at the site: the rest goes out with a fresh one
                log.warning("%s: job %s: %d files or directories left with %s: planned again", job["rse"],
                            job["_id"], got.reissued, PROTECTION_EXPIRED)
                self._requeue(job["rse"], {job["_id"]: (job["gen"], f"{PROTECTION_EXPIRED}: {got.reason}")})
            elif job.get("retry_dirs"):
                self.ledger.pending_dirs.settle(job, held_dirs((), job["retry_dirs"]))
            if got.problems:
                log.warning("%s: job %s: %s", job["rse"], job["_id"], got.reason)
        try:
            self.backend.remove(job["_id"], job["batch_id"], "collected")
        except BackendError as exc:  # the outcome is recorded; a left-over queue entry is harmless
            log.warning("%s: removing %s after collection: %s", job["rse"], job["_id"], exc)
        return collected

    def _other_dirs(self, job: dict[str, Any], lfns: list[str], report: Optional[Report]) -> Callable[[str], bool]:
        """Directories a job may report on besides those of its files: its retried ones and those holding them
        (`held_dirs`: make_job gives it the plan's removable ones among them), and, when its report says it swept,
        any strictly below the dataset directories of its files (worker/sweep.py)."""
        retried = held_dirs((), job.get("retry_dirs") or [])
        floor = self.config.planner.dir_floor_depth
        swept = report is not None and (report.start or {}).get("method", {}).get("sweep") == "on"
        tops = {d + "/" for d in file_dirs(lfns) if depth(d) == floor} if swept else set()
        return lambda d: d in retried or any(d.startswith(top) for top in tops)

    def _given_dirs(self, job: dict[str, Any], lfns: list[str]) -> list[str]:
        """The directories a job was given to remove, as make_job gave them: the plan's removable ones among those
        it acts in (`held_dirs`), its retried ones."""
        retried = job.get("retry_dirs") or []
        given = job_dirs(held_dirs(lfns, retried), self.removable(job["rse"], job["gen"]))
        return given + sorted(set(retried) - set(given))

    def revalidate(self, rse: str, fetch: Optional[Callable[[], Fetched]] = None) -> tuple[int, int]:
        """Queued jobs are checked against a protected list fetched now (`fetch`, else fetch_protected) before they
        start: a job holding a file the list covers, or whose manifest has less than renew_s of use left (`renew`),
        is removed and planned again, its files' tries unchanged; the next submission sends it with a fresh
        manifest. The others may start (backend.revalidated: a job adopted from an earlier service's queue waits
        for this).

        A removed job's newly protected files become skipped_protected (protected_since_planning) first. A job
        that started meanwhile stays: the backend removes only jobs not started, and the worker re-checks
        protection itself, and deletes nothing once its list is too old. Returns (jobs removed for newly protected
        files, files dropped).
        """
        waiting = [j for j in self.ledger.base.jobs_in(rse, (JobState.QUEUED, JobState.HELD)) if j.get("batch_id")]
        if not waiting:
            return 0, 0
        protected, fetched = (fetch or self.fetch_protected)()
        protection, _ = self.protection(rse, protected)
        lfns_of = self.ledger.rounds.jobs_lfns([j["_id"] for j in waiting])  # a few queries, not one a job
        hit = {j["_id"]: j["batch_id"] for j in waiting
               if any(protection.holds_below(name.encode("utf-8", "surrogateescape")) for name in lfns_of[j["_id"]])}
        stale = self.renew(rse, [j for j in waiting if j["_id"] not in hit], fetched)
        self.backend.revalidated({j["_id"]: j["batch_id"] for j in waiting if j["_id"] not in hit.keys() | stale})
        if not hit:
            return 0, 0
        gens = {j["_id"]: j["gen"] for j in waiting}
        removed = self.backend.remove_pending(hit, "revalidation: files became protected")
        requeued, dropped = {}, 0
        for jid in removed:
            n = self.ledger.plans.drop_protected(rse, gens[jid], protection, job=jid)
            dropped += n
            requeued[jid] = (gens[jid], f"revalidation: {n} files became protected: the others sent again")
        self._requeue(rse, requeued)
        log.info("%s: revalidation removed %d of %d queued jobs (%d files now protected)", rse, len(removed),
                 len(hit), dropped)
        return len(removed), dropped

    def renew(self, rse: str, waiting: Sequence[dict[str, Any]], fetched: float) -> set[str]:
        """Of these waiting jobs (none holding a file the list fetched at `fetched` covers), those whose manifest's
        protected list may be used for less than renew_s more are removed (if not started) and planned again, their
        files' tries unchanged: the next submission gives them a fresh manifest. Returns those found so, removed
        or started meanwhile."""
        stale = {j["_id"]: j["batch_id"] for j in waiting if (j.get("protected_until") or 0.0) - fetched < self.renew_s}
        if not stale:
            return set()
        removed = self.backend.remove_pending(stale, "re-issued with a fresh protected list")
        gens = {j["_id"]: j["gen"] for j in waiting}
        self._requeue(rse, {jid: (gens[jid], "re-issued: its manifest's protected list was getting old")
                            for jid in removed})
        if removed:
            log.info("%s: %d waiting jobs re-issued with a fresh protected list", rse, len(removed))
        return set(stale)

    def _requeue(self, rse: str, jobs: Mapping[str, tuple[float, str]]) -> None:
        """These jobs (job id -> its generation, why) back to planned (ledger requeue_job). One of a generation a
        newer plan replaced ends superseded instead, as that plan's recording left the others (only the current
        generation is ever submitted): requeued first, the RSE's generation read after, so that a plan recorded
        meanwhile either finds it planned (and supersedes it) or is read here."""
        if not jobs:
            return
        for jid, (_, reason) in jobs.items():
            self.ledger.rounds.requeue_job(jid, reason)
        self._changed.add(rse)
        current = self.ledger.base.rse(rse).get("generation")
        if current is not None and any(gen < current for gen, _ in jobs.values()):
            n = self.ledger.plans.supersede(rse, current)
            log.info("%s: %d jobs planned again of a generation older than the current one: superseded", rse, n)
