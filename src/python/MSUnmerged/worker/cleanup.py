"""Runs one cleanup job at the site: checks, stage-out method, deletions, rmdirs, report."""
from __future__ import annotations

import os
import pkgutil
import platform
import signal
import sys
import time
from typing import Any, Dict, Iterable, List, Mapping, NamedTuple, Optional, Tuple

from . import choose, credentials, deleters, paths, pfn, siteconf, storage, sweep
from .deleters import AUTH_FAILED, DELETED, DENIED, MISSING, REFUSED, Deleter, Result, Seen
from .manifest import Job
from .pace import Pacer
from .report import (ABOVE_FLOOR, DIR_MOVED_SINCE_SCAN, EXCLUDED, INVALID_LFN, KEPT, MAPPING_DISAGREES,
                     MODIFIED_SINCE_SCAN, NO_PFN, NOT_JOB_DIR, OTHER_NAMESPACE, PATH_CHANGED, PFN_OUTSIDE_UNMERGED,
                     PROTECTED, PROTECTION_EXPIRED, ReportWriter)

# Exit codes (docs/jobs.md).
EXIT_DONE = 0  # every file deleted, already missing, or (dry run) would be deleted
EXIT_PARTIAL = 1  # the job ran; some files or directories did not reach that state
# The job refused to start: deadline passed, protected list too old or manifest unusable; nothing touched.
EXIT_REFUSED = 2
EXIT_CONFIG = 3  # the site configuration gives no usable way to delete, or disagrees with Rucio; nothing touched
EXIT_INTERNAL = 4  # the worker itself failed; the report holds what was done until then
EXIT_AUTH = 5  # the storage credential is missing, expired or was refused: files are auth_failed

REFUSED_PROTECTED = "under a protected directory"  # the error text of a PROTECTED refusal
GOOD_FILE = ("deleted", "missing", "dry_run")
BAD_DIR = ("permission_denied", "timeout", "storage_error", AUTH_FAILED)
Refusal = Tuple[str, str]  # (report.REASONS code, error text)


def worker_version() -> str:
    """The build's source hash (VERSION inside the zipapp), or "source" when run from the tree."""
    try:
        data = pkgutil.get_data(__package__ or __name__, "VERSION")
    except OSError:
        data = None
    return data.decode().strip() if data else "source"


class ConfigProblem(Exception):
    """The site configuration cannot be used (exit 3)."""


def map_path(mapper: storage.Mapper, path: str) -> Tuple[Optional[str], Optional[str]]:
    """(PFN, None), or (None, why) when the site's rules give none or fail (bad group, chain loop)."""
    try:
        got = mapper(path)
    except siteconf.SiteConfigError as exc:
        return None, str(exc)
    return got, None if got is not None else "no rule of the site config maps it"


class Choice(NamedTuple):
    """The stage-out method a job deletes through, and why (the report's method.choice)."""

    method: siteconf.StageOutMethod
    mapper: storage.Mapper
    deleter: Deleter
    root: Optional[str]  # its PFN of /store/unmerged/
    rule: str  # pfn.FIRST_USABLE, SAME_PFN, SAME_NAMESPACE or RUCIO_VOLUME
    why: str
    passed: List[str]  # the methods before it, with why each was not used
    doors: List[Optional[str]]  # the PFNs of /store/unmerged/ of the other protocols of its catalog
    namespaces: pfn.Namespaces  # the PFNs its mapping gives for CMS's other namespaces


def _root(mapper: storage.Mapper) -> Optional[str]:
    return pfn.unmerged_root(lambda path: map_path(mapper, path)[0])


class MappingDisagrees(ConfigProblem):
    """No usable stage-out method maps /store/unmerged/ where Rucio does (exit 3, mapping_disagrees)."""

    def __init__(self, message: str, first: Choice) -> None:
        super().__init__(message)
        self.first = first  # the site's first usable method: what the report's start line describes


class OtherNamespace(ConfigProblem):
    """Every method that could map the RSE's LFNs has a PFN of /store/unmerged/ holding another namespace's PFN
    (exit 3, other_namespace)."""


_WHY = {pfn.FIRST_USABLE: "the site's first usable stage-out method (no Rucio PFN to compare)",
        pfn.SAME_PFN: "the first usable method speaking Rucio's protocol whose PFN of %s is Rucio's" % paths.UNMERGED,
        pfn.SAME_NAMESPACE: "no usable method speaks Rucio's protocol; this one reaches the host and physical "
                            "path of Rucio's PFN of %s, which another protocol of its catalog names" % paths.UNMERGED,
        pfn.RUCIO_VOLUME: "no usable stage-out method maps %s to Rucio's PFN; this protocol of the site's "
                          "storage.json volume of the RSE maps it there exactly" % paths.UNMERGED}


def _consider(method: siteconf.StageOutMethod, catalog: storage.Catalog, protocol: str, tools: List[Deleter],
              probe_lfn: Optional[str]) -> Tuple[Optional[Choice], str, bool]:
    """(the method as a Choice, "", False) when one of `tools` can act on its PFNs and its PFN of /store/unmerged/
    holds no other namespace; else (None, why not, whether it holds one)."""
    mapper = storage.normalised(catalog, protocol)
    root = _root(mapper)
    sample, why = map_path(mapper, probe_lfn) if probe_lfn is not None else (root, None)
    deleter = next((d for d in tools if sample is not None and d.accepts(sample)), None)
    if deleter is None:
        return None, "%s gives PFN %r, not usable by %s%s" % (probe_lfn or paths.UNMERGED, sample, "/".join(
            d.name for d in tools), ": " + why if why else ""), False
    namespaces = pfn.namespace_roots(lambda path: map_path(mapper, path)[0])
    held = pfn.holds_namespace(root, namespaces) if root is not None else None
    if held is not None:
        return None, held, True
    # The other protocols of its catalog: one of them may name Rucio's door of the same storage.
    doors = [_root(storage.normalised(catalog, other)) for other in catalog.rules if other != protocol]
    return Choice(method, mapper, deleter, root, "", "", [], doors, namespaces), "", False


def _rucio_volume(job: Job, cfg: siteconf.SiteLocalConfig, env: Mapping[str, str], probe_lfn: Optional[str],
                  reasons: List[str]) -> Tuple[Optional[Choice], bool]:
    """A protocol of the site's own storage.json volume of the RSE whose PFN of /store/unmerged/ is exactly
    Rucio's, with a deleter for it (pfn.RUCIO_VOLUME); (None, whether one held another namespace) otherwise."""
    path = storage.storage_json_path(env, cfg.site, cfg.subsite, cfg.site)
    held_any = False
    try:
        entries = storage.load_storage_json(path) if os.path.exists(path) else []
        for entry in entries:
            if not isinstance(entry, dict) or entry.get("site") != cfg.site or entry.get("rse") != job.rse:
                continue
            catalog = storage.catalog_for(entries, cfg.site, entry.get("volume"), path)  # type: ignore[arg-type]
            for protocol in catalog.rules if catalog is not None else ():
                root = _root(storage.normalised(catalog, protocol))  # type: ignore[arg-type]
                if root is None or not pfn.same_place(root, job.unmerged_pfn):  # type: ignore[arg-type]
                    continue
                method = siteconf.StageOutMethod("volume", "", volume=str(entry.get("volume")), protocol=protocol,
                                                 storage_site=cfg.site)
                label = "%s %s" % (method.kind, method.describe())
                tools, why = choose.for_scheme(pfn.scheme(root), job.timeout, env)
                choice, why_not, held = _consider(method, catalog, protocol, tools, probe_lfn) if tools \
                    else (None, why, False)
                held_any = held_any or held
                if choice is not None:
                    method.command = choice.deleter.name
                    return choice._replace(rule=pfn.RUCIO_VOLUME, why=_WHY[pfn.RUCIO_VOLUME],
                                           passed=list(reasons)), False
                reasons.append("%s: %s" % (label, why_not))
    except siteconf.SiteConfigError as exc:
        reasons.append("storage.json volume of %s: %s" % (job.rse, exc))
    return None, held_any


def _site_method(method: siteconf.StageOutMethod, job: Job, cfg: siteconf.SiteLocalConfig, env: Mapping[str, str],
                 probe_lfn: Optional[str]) -> Tuple[Optional[Choice], str, bool]:
    """One of the site's stage-out methods as _consider gives it, when a tool here runs its command and it maps the
    RSE's LFNs; else (None, why not, False)."""
    tools, why = choose.for_command(method.command, job.timeout, env)
    if not tools:
        return None, why, False
    try:
        catalog, protocol = storage.method_catalog(method, cfg, env, job.rse)
    except siteconf.SiteConfigError as exc:
        catalog, protocol = None, str(exc)
    if catalog is None:
        return None, protocol, False  # why it cannot map
    choice, why_not, held = _consider(method, catalog, protocol, tools, probe_lfn)
    return choice, why_not + (" (%s)" % why if why else ""), held  # why: tools missing


def choose_method(job: Job, env: Mapping[str, str], probe_lfn: Optional[str]) -> Choice:
    """Among the site's stage-out methods (in order) that map this RSE's LFNs with a tool usable here, the one
    to delete through: pfn.choose against Rucio's PFN of /store/unmerged/; when none gives it, the site's
    storage.json volume of the RSE where one of its protocols does (docs/jobs.md). A method whose PFN of
    /store/unmerged/ holds another namespace is never used. ConfigProblem when none is usable (OtherNamespace when
    only such ones are), MappingDisagrees when none agrees with Rucio."""
    try:
        cfg = siteconf.parse(siteconf.locate(env))
    except siteconf.SiteConfigError as exc:
        raise ConfigProblem(str(exc)) from None
    if cfg.site != job.site:
        raise ConfigProblem("this worker node belongs to site %r, the job is for %r" % (cfg.site, job.site))
    reasons: List[str] = []
    usable: List[Choice] = []
    held_any = False
    for method in cfg.methods:
        label = "%s %s" % (method.kind, method.describe())
        choice, why_not, held = _site_method(method, job, cfg, env, probe_lfn)
        held_any = held_any or held
        if choice is None:
            reasons.append("%s: %s" % (label, why_not))
            continue
        usable.append(choice._replace(passed=list(reasons)))
        reasons.append("%s: maps %s to %s" % (label, paths.UNMERGED, choice.root))
    index, rule = pfn.choose([c.root for c in usable], job.unmerged_pfn, [c.doors for c in usable]) if usable \
        else (None, "")
    if index is not None:
        return usable[index]._replace(rule=rule, why=_WHY[rule])
    if job.unmerged_pfn is not None:
        volume, held = _rucio_volume(job, cfg, env, probe_lfn, reasons)
        if volume is not None:
            return volume
        held_any = held_any or held
    if not usable:
        kind = OtherNamespace if held_any else ConfigProblem
        raise kind("no usable stage-out method in %s: %s" % (cfg.path, " | ".join(reasons) or "none listed"))
    raise MappingDisagrees("the site config's PFN of %s is %s, Rucio's is %s: %s (%s)" % (
        paths.UNMERGED, usable[0].root, job.unmerged_pfn, rule, " | ".join(reasons)), usable[0])


class _Stop:
    """Why the job stops early (SIGTERM, deadline, storage refusing), checked between batches."""

    def __init__(self) -> None:
        self.reason: Optional[str] = None
        self.code: Optional[str] = None  # the report's reason for the files left (report.REASONS), if any

    def __call__(self, signum: int, frame: Any) -> None:
        self.reason = "stopped by signal %d" % signum


class Cleanup:
    """One job's run. `run()` returns the exit code; the report says what happened to each file."""

    def __init__(self, job: Job, report: ReportWriter, env: Mapping[str, str], now: Optional[float] = None,
                 force_dry_run: bool = False) -> None:
        self.job = job
        self.report = report
        self.env = env
        self.started = time.time() if now is None else now
        self.dry_run = job.dry_run or force_dry_run
        self.stop = _Stop()
        self.method: Dict[str, Any] = {}
        self.errors: List[str] = []
        self.duplicates = 0
        self.credential = credentials.NONE
        self.auth_refused = False  # the storage refused the credential: the job stopped
        self.pacer = Pacer(job.max_ops_per_s)
        self.namespaces: pfn.Namespaces = []  # the chosen method's PFNs of CMS's other namespaces

    def info(self) -> Dict[str, Any]:
        return {"job_id": self.job.job_id, "rse": self.job.rse, "site": self.job.site, "dry_run": self.dry_run,
                "credential": credentials.describe(self.credential), "host": platform.node(),
                "python": platform.python_version(), "worker": worker_version(), "pid": os.getpid(),
                "time": round(self.started, 3)}

    def run(self) -> int:
        late = self._too_late()
        if late is not None:
            return late
        checked = self._check_files()
        probe = next((lfn for lfn, why in checked if why is None), None)
        self.credential, problem = credentials.discover(self.env, os.getcwd())
        if problem is not None:
            self.report.start(self.info())
            return self._refuse_all(EXIT_AUTH, problem, AUTH_FAILED)
        self.env = credentials.tool_env(self.env, self.credential)
        try:
            choice = choose_method(self.job, self.env, probe)
        except ConfigProblem as exc:
            return self._refuse_config(exc)
        return self._act(choice, checked)

    def _too_late(self) -> Optional[int]:
        """The exit code when the job starts after its deadline or its protected list's bound (nothing touched)."""
        job = self.job
        if self.started > job.deadline:
            self.report.start(self.info())
            return self._refuse_all(EXIT_REFUSED, "deadline passed %.0fs ago" % (self.started - job.deadline))
        if self.started > job.protected_until:
            self.report.start(self.info())
            return self._refuse_all(EXIT_REFUSED, self._expired(self.started), reason=PROTECTION_EXPIRED)
        return None

    def _refuse_config(self, exc: ConfigProblem) -> int:
        """No stage-out method to delete through: every file and directory says why (the start line describes the
        site's first usable method when it disagrees with Rucio)."""
        if isinstance(exc, MappingDisagrees):
            self._describe(exc.first, None, str(exc))
            self.report.start(dict(self.info(), method=self.method))
            return self._refuse_all(EXIT_CONFIG, str(exc), REFUSED, MAPPING_DISAGREES)
        self.report.start(self.info())
        if isinstance(exc, OtherNamespace):
            return self._refuse_all(EXIT_CONFIG, str(exc), REFUSED, OTHER_NAMESPACE)
        return self._refuse_all(EXIT_CONFIG, str(exc))

    def _act(self, choice: Choice, checked: List[Tuple[Any, Optional[Refusal]]]) -> int:
        """Deletes the checked files through the chosen method, then removes and sweeps directories."""
        mapper, deleter = choice.mapper, choice.deleter
        deleter.root = choice.root or ""
        self._describe(choice, choice.rule, choice.why)
        self.report.start(dict(self.info(), method=self.method))
        self.namespaces = choice.namespaces
        bad_root = self._root_refusal(choice)
        todo = self._placed(checked, mapper, deleter, bad_root)
        blocked = deleter.prepare(self.dry_run) if todo else None
        if blocked is not None:  # the storage cannot be deleted through safely: every file gets why
            self._report_files(todo, blocked)
            self.auth_refused = blocked.outcome == AUTH_FAILED
            todo = []
        lfns = [lfn for lfn, why in checked if why is None]
        old = signal.signal(signal.SIGTERM, self.stop)
        try:
            self._delete(todo, deleter)
            self._rmdirs(mapper, deleter, lfns, bad_root)
            if self.method["sweep"] == "on":
                self._sweep(mapper, deleter, lfns, bad_root)
        finally:
            signal.signal(signal.SIGTERM, old)
        return self._finish()

    def _describe(self, choice: Choice, rule: Optional[str], why: str) -> None:
        """The method the job uses (or, refused, the site's first usable one) and why, for the report."""
        deleter, job = choice.deleter, self.job
        self.method = dict(choice.method.describe(), deleter=deleter.name, unmerged_pfn=choice.root,
                           checks=deleter.checks() if self._looks(deleter) else "none", pfn_layout=job.pfn_layout,
                           mapping_check=job.mapping_check,
                           sweep=("on" if deleter.lists() else "unsupported") if job.sweep else "off",
                           choice={"rule": rule, "why": why, "rucio_pfn": job.unmerged_pfn,
                                   "unmerged_root": job.unmerged_root, "passed": choice.passed})

    # -- checks -----------------------------------------------------------------------------------

    def _check_files(self) -> List[Tuple[Any, Optional[Refusal]]]:
        """Each LFN with why it is refused (None: may be deleted)."""
        protected = paths.PathSet(self.job.protected)
        seen = set()
        out: List[Tuple[Any, Optional[Refusal]]] = []
        for lfn in self.job.lfns:
            why = paths.problem(lfn)
            refusal = None if why is None else (INVALID_LFN, why)
            # A line may name a directory: one holding a protected base is refused like one under it.
            if refusal is None and (protected.covers(lfn) or protected.at_or_above(lfn)):
                refusal = (PROTECTED, REFUSED_PROTECTED)
            if refusal is None and self._excluded(lfn):
                refusal = (EXCLUDED, "outside the RSE's path filters")
            if refusal is None and lfn in seen:
                self.duplicates += 1  # one outcome per file: a repeated LFN gets no second line
                continue
            if refusal is None:
                seen.add(lfn)
            out.append((lfn, refusal))
        return out

    def _placed(self, checked: List[Tuple[Any, Optional[Refusal]]], mapper: storage.Mapper, deleter: Deleter,
                bad_root: Optional[Refusal]) -> List[Tuple[str, str]]:
        """The files to delete, each with its PFN; those refused by their check or their place are reported."""
        todo: List[Tuple[str, str]] = []
        for lfn, refusal in checked:
            got = None
            if refusal is None:
                got, refusal = self._place(mapper, deleter, lfn, bad_root)
            if refusal is not None:
                self.report.file(str(lfn), got, REFUSED, refusal[1], 0, refusal[0])
            else:
                todo.append((lfn, got))  # type: ignore[arg-type]
        return todo

    def _root_refusal(self, choice: Choice) -> Optional[Refusal]:
        """Why no PFN may be acted on through this method's root (or the configured unmerged_root), or None."""
        job = self.job
        why = pfn.root_problem(choice.root, job.pfn_layout, choice.rule, job.unmerged_root)
        if why is not None:
            return PFN_OUTSIDE_UNMERGED, why
        held = pfn.holds_namespace(job.unmerged_root, choice.namespaces) if job.unmerged_root is not None else None
        return None if held is None else (OTHER_NAMESPACE, "unmerged_root: " + held)

    def _place(self, mapper: storage.Mapper, deleter: Deleter, path: str,
               bad_root: Optional[Refusal]) -> Tuple[Optional[str], Optional[Refusal]]:
        """(PFN, None) when `path` maps to a PFN safe to act on, else (PFN or None, refusal)."""
        got, why = map_path(mapper, path)
        if got is None or not deleter.accepts(got):
            return got, (NO_PFN, "no PFN usable by %s (got %r)%s" % (deleter.name, got, ": " + why if why else ""))
        if bad_root is not None:
            return got, bad_root
        why = pfn.pfn_problem(got, path, deleter.root, self.job.pfn_layout)
        if why is not None:
            return got, (PFN_OUTSIDE_UNMERGED, why)
        why = pfn.other_lfn(got, path, lambda lfn: map_path(mapper, lfn)[0], self.namespaces)
        return got, None if why is None else (OTHER_NAMESPACE, why)

    def _excluded(self, path: str) -> bool:
        """Outside the RSE's path filters: under an excluded prefix, or (include set) under no included one."""
        job = self.job
        return job.exclude.covers(path) or job.include is not None and not job.include.covers(path)

    def _dir_problem(self, directory: Any, held: Optional[set], protected: paths.PathSet,
                     keep: paths.PathSet) -> Optional[Refusal]:
        """Why a directory must not be removed; `held`: the directories holding the job's files or retried
        directories, one of which it must be (None: it need not)."""
        why = paths.problem(directory)
        if why is not None:
            return INVALID_LFN, why
        if paths.depth(directory) < self.job.floor:
            return ABOVE_FLOOR, "above the lowest removable level"
        if protected.at_or_above(directory) or keep.at_or_above(directory):
            return KEPT, "a directory that must be kept (a protected or kept path at or below it)"
        if protected.covers(directory):
            return PROTECTED, REFUSED_PROTECTED
        if self.job.exclude.covers(directory) or self.job.exclude.at_or_above(directory):
            return EXCLUDED, "an excluded path at, above or below it"
        if held is not None and directory not in held:
            return NOT_JOB_DIR, "holds none of this job's files or retried directories"
        return None

    def _modified(self, seen: Seen, deleter: Deleter) -> Optional[Result]:
        """A refusal when the entry may have changed after the scan the plan comes from: its mtime, or its ctime
        (which moves on a rename into place or a utime too, and cannot be set back) where the storage gives it."""
        started, step = self.job.scan_started, deleter.time_step()
        for what, when in (("modified", seen.mtime), ("changed", seen.ctime)):
            if when is not None and when + step > started:
                return Result(REFUSED, "%s at %.3f, after the scan started at %.3f" % (what, when, started),
                              reason=MODIFIED_SINCE_SCAN)
        # A directory renamed or moved into place keeps its files' times and its own mtime; its ctime moves. A
        # directory whose content changed (a later round's files, this job's deletions) moved its mtime too.
        for where in seen.dirs:
            if where.ctime + step > started >= where.mtime + step:
                return Result(REFUSED, "directory %s changed at %.3f (its content last at %.3f), after the scan "
                              "started at %.3f: renamed or moved into place?" % (
                                  where.path, where.ctime, where.mtime, started), reason=DIR_MOVED_SINCE_SCAN)
        return None

    def _expired(self, now: float) -> str:
        """Why nothing more is deleted once the manifest's protected list is too old (jobs.max_protection_age_s)."""
        return "its protected list (fetched at %s) may be used until %.3f, now %.3f" % (
            "?" if self.job.protected_at is None else "%.3f" % self.job.protected_at, self.job.protected_until, now)

    def _in_time(self) -> bool:
        """False, with the stop's reason set, once the job's deadline or its protected list's bound has passed (or
        it was stopped): checked before each batch of files and before each directory removal."""
        now = time.time()
        if self.stop.reason is None and now > self.job.deadline:
            self.stop.reason = "deadline passed during the job"
        if self.stop.reason is None and now > self.job.protected_until:
            self.stop.reason, self.stop.code = self._expired(now), PROTECTION_EXPIRED
        return self.stop.reason is None

    # -- deletion ---------------------------------------------------------------------------------

    def _looks(self, deleter: Deleter) -> bool:
        """Whether files are looked at before deletion: unless the RSE turned the look off, and then still
        everywhere but on xrootd, whose delete cannot take a directory's content (docs/jobs.md)."""
        return self.job.look or not deleters.deletes_files_only(deleter.root)

    def _delete(self, todo: List[Tuple[str, str]], deleter: Deleter) -> None:
        """Each batch is inspected first (links, size, mtime); a dry run stops there."""
        denied_run = 0
        start = 0
        batch_size = self.pacer.batch(deleter.batch_size)
        looks = self._looks(deleter)
        while start < len(todo):
            if not self._in_time():
                self._report_files(todo[start:], Result("not_attempted", self.stop.reason, reason=self.stop.code))
                return
            # The first batch probes the storage; once it refuses, batches shrink so that the job stops
            # after exactly max_denied refusals in a row.
            size = self.job.max_denied - denied_run if start == 0 or denied_run else batch_size
            batch = todo[start:start + max(1, min(size, batch_size))]
            start += len(batch)
            seen, final = self._delete_batch(batch, deleter, looks)
            denied_run = self._report_batch(batch, seen, final, denied_run)

    def _delete_batch(self, batch: List[Tuple[str, str]], deleter: Deleter,
                      looks: bool) -> Tuple[List[Seen], List[Tuple[Result, int]]]:
        """What the look saw of each file (unless the look is off) and its final result with its attempts: refused
        by the look or as changed since the scan, else deleted (in a dry run: would be)."""
        if looks and deleter.checks() != "none":
            self.pacer.take(len(batch))
        seen = deleter.inspect([p for _, p in batch]) if looks else [Seen()] * len(batch)
        final: List[Optional[Tuple[Result, int]]] = []
        go = []
        for i, look in enumerate(seen):
            verdict = look.result or self._modified(look, deleter)
            final.append(None if verdict is None else (verdict, 0))
            if verdict is None:
                go.append(i)
        if self.dry_run:
            done = [(Result("dry_run"), 0)] * len(go)
        else:
            done = self._with_retries(deleter, [batch[i] for i in go], [seen[i] for i in go], looks)
        for i, answer in zip(go, done):
            final[i] = answer
        return seen, final  # type: ignore[return-value]

    def _report_batch(self, batch: List[Tuple[str, str]], seen: List[Seen], final: List[Tuple[Result, int]],
                      denied_run: int) -> int:
        """Reports each file of a batch, and stops the job once the storage refused its credential or `max_denied`
        deletions in a row; the refusals in a row after it."""
        for (lfn, pfn_), look, (result, attempts) in zip(batch, seen, final):
            self.report.file(lfn, pfn_, result.outcome, result.error, attempts, result.reason, look.size)
            if result.outcome == AUTH_FAILED and not self.auth_refused:
                # Every further request would be refused the same way.
                self.auth_refused = True
                self.stop.reason = "storage refused the job's %s credential" % (self.credential.kind or "missing")
            denied_run = denied_run + 1 if result.outcome == DENIED else 0
            if denied_run >= self.job.max_denied and self.stop.reason is None:
                self.stop.reason = "storage refused %d deletions in a row" % denied_run
        return denied_run

    def _with_retries(self, deleter: Deleter, batch: List[Tuple[str, str]],
                      looks: List[Seen], looked: bool = True) -> List[Tuple[Result, int]]:
        """Final result and attempt count per file; transient failures are retried with backoff. Every file
        here was found by the look: gone at the unlink, it is `path_changed` (retried), never `missing`
        (unless the RSE turned the look off: then a file not there is just missing)."""
        final: List[Optional[Tuple[Result, int]]] = [None] * len(batch)
        pending = list(range(len(batch)))
        ambiguous = set()  # an attempt that may have deleted the file before failing
        attempt = 0
        while pending:
            attempt += 1
            self.pacer.take(len(pending))
            results = deleter.unlink([batch[i][1] for i in pending], [looks[i] for i in pending])
            retry = []
            for i, result in zip(pending, results):
                if result.outcome == MISSING and i in ambiguous:
                    result = Result(DELETED, "gone after an earlier attempt that failed: %s" % result.error)
                elif result.outcome == MISSING and looked:  # seen by the look, not reached now: moved, or swapped
                    result = Result(REFUSED, "found by the look, not at the unlink: %s" % result.error,
                                    reason=PATH_CHANGED)
                if result.transient and attempt <= self.job.retries and self._in_time():
                    retry.append(i)
                    ambiguous.add(i)
                else:
                    final[i] = (result, attempt)
            pending = retry
            if pending:
                time.sleep(self.job.backoff * (2 ** (attempt - 1)))
        return [f for f in final if f is not None]

    def _rmdirs(self, mapper: storage.Mapper, deleter: Deleter, lfns: List[str], bad_root: Optional[Refusal]) -> None:
        """Checks the given directories: a `remove_dirs` one must hold one of the job's checked files or retried
        directories (a directory job's are its only content), a `retry_dirs` one need not; then removes them."""
        job = self.job
        protected = paths.PathSet(job.protected)
        keep = paths.PathSet(job.keep_dirs)
        retried = [d for d in job.retry_dirs if self._dir_problem(d, None, protected, keep) is None]
        held = set(retried)
        for path in lfns + retried:
            held.update(paths.ancestors(path))
        valid = []
        given = [(d, held) for d in job.remove_dirs]
        given += [(d, None) for d in job.retry_dirs if d not in job.remove_dirs]
        for directory, must_hold in given:
            refusal = self._dir_problem(directory, must_hold, protected, keep)
            if refusal is not None:
                self.report.directory(str(directory), None, REFUSED, refusal[1], refusal[0])
            else:
                valid.append(directory)
        self._remove_dirs(mapper, deleter, valid, bad_root)

    def _remove_dirs(self, mapper: storage.Mapper, deleter: Deleter, valid: List[str],
                     bad_root: Optional[Refusal]) -> None:
        """rmdir of checked directories, leaf first (whatever order they came in), each reported."""
        job = self.job
        for directory in sorted(set(valid), key=lambda d: (-paths.depth(d), d)):
            got, refusal = self._place(mapper, deleter, directory, bad_root)
            stopped = not self.dry_run and not self._in_time()
            seen = deleter.inspect([got], directory=True)[0].result if refusal is None and not stopped else None
            if refusal is not None:
                self.report.directory(directory, got, REFUSED, refusal[1], refusal[0])
            elif stopped:
                self.report.directory(directory, got, "not_attempted", self.stop.reason, self.stop.code)
            elif seen is not None:
                self.report.directory(directory, got, seen.outcome, seen.error, seen.reason)
            elif self.dry_run:
                self.report.directory(directory, got, "dry_run", None)
            elif not deleter.can_rmdir:
                self.report.directory(directory, got, "not_attempted", "%s has no non-recursive rmdir" % deleter.name)
            else:
                self.pacer.take(1)
                result = deleter.rmdir(got)  # type: ignore[arg-type]
                for attempt in range(job.retries):
                    if not result.transient or not self._in_time():
                        break
                    time.sleep(job.backoff * (2 ** attempt))
                    result = deleter.rmdir(got)  # type: ignore[arg-type]
                self.report.directory(directory, got, result.outcome, result.error, result.reason)

    def _sweep(self, mapper: storage.Mapper, deleter: Deleter, lfns: List[str], bad_root: Optional[Refusal]) -> None:
        """Remove old empty directories below the dataset directories of the job's files (worker/sweep.py)."""
        job = self.job
        protected, keep = paths.PathSet(job.protected), paths.PathSet(job.keep_dirs)
        tops = sorted({d for lfn in lfns for d in paths.ancestors(lfn) if paths.depth(d) == job.floor})
        if self.stop.reason is not None:
            return

        def listing(directory: str) -> sweep.Listing:
            got, refusal = self._place(mapper, deleter, directory, bad_root)
            if refusal is not None:
                return None, None  # a directory the job may not act on is not looked into
            self.pacer.take(1)
            return deleter.list_dir(got)  # type: ignore[arg-type]

        def descend(directory: str) -> bool:
            return not (protected.covers(directory) or job.exclude.covers(directory))

        def eligible(directory: str, changed: float) -> bool:
            return (changed + deleter.time_step() <= job.scan_started
                    and self._dir_problem(directory, None, protected, keep) is None
                    and (job.include is None or job.include.covers(directory)))

        def failed(directory: str, error: Result) -> None:
            self.report.directory(directory, None, error.outcome, error.error, error.reason)
        found = [d for top in tops if descend(top) for d in sweep.empty_below(top, listing, descend, eligible, failed)]
        self._remove_dirs(mapper, deleter, found, bad_root)

    # -- endings ----------------------------------------------------------------------------------

    def _refuse_all(self, code: int, why: str, outcome: str = "not_attempted", reason: Optional[str] = None) -> int:
        """Nothing is touched: every file and directory gets `outcome` with the reason."""
        self.errors.append(why)
        self._report_files([(str(lfn), None) for lfn in self.job.lfns], Result(outcome, why, reason=reason))
        for directory in self.job.remove_dirs + self.job.retry_dirs:
            self.report.directory(str(directory), None, outcome, why, reason)
        return self._finish(code)

    def _report_files(self, files: Iterable[Tuple[str, Optional[str]]], result: Result) -> None:
        """One outcome for each of these files (LFN, PFN), none of them attempted."""
        for lfn, pfn_ in files:
            self.report.file(lfn, pfn_, result.outcome, result.error, 0, result.reason)

    def _finish(self, code: Optional[int] = None) -> int:
        files, dirs = self.report.files, self.report.dirs
        if code is None:
            # Files refused as protected and directories refused because they must stay (protected, kept) are the
            # plan working.
            bad = sum(n for k, n in files.items() if k not in GOOD_FILE) - self.report.protected_files \
                + sum(dirs[k] for k in BAD_DIR) + self.report.unexpected_dir_refusals
            code = EXIT_AUTH if self.auth_refused else EXIT_PARTIAL if bad or self.stop.reason else EXIT_DONE
        if self.stop.reason:
            self.errors.append(self.stop.reason)
        self.report.summary(code, {"job_id": self.job.job_id, "dry_run": self.dry_run, "method": self.method,
                                   "error": "; ".join(self.errors) or None, "duplicates_ignored": self.duplicates,
                                   "seconds": round(time.time() - self.started, 3)})
        return code


def refuse_unreadable(report: ReportWriter, reason: str) -> int:
    """A manifest that cannot be read: only a summary can be written."""
    report.start({"job_id": None, "python": platform.python_version(), "time": round(time.time(), 3)})
    report.summary(EXIT_REFUSED, {"job_id": None, "error": reason, "method": {}, "dry_run": True})
    return EXIT_REFUSED


def internal_error(report: ReportWriter, exc: BaseException) -> int:
    report.summary(EXIT_INTERNAL, {"error": "worker failed: %s: %s" % (type(exc).__name__, exc)})
    print("msunmerged-worker: internal error: %r" % exc, file=sys.stderr)
    return EXIT_INTERNAL
