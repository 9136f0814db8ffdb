"""Job reports -> per-file and per-directory ledger outcomes and counters.

`parse_report(path)` reads a worker report (JSON lines, docs/jobs.md; version 2, and version 1 from jobs
started before an upgrade) strictly: a malformed line is rejected with its line number and what is
wrong, the other lines are kept. `Collector.collect` hands one job's outcomes to a sink (the ledger:
`record_outcomes`, `record_dirs`, `close_job`); files the report does not mention are left to the
sink's `close_job`, which marks them unknown.
"""
from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Callable, Collection, Iterable, Mapping, NamedTuple, Optional, Protocol

from MSUnmerged.jobs.backend import JobState, JobStatus
from MSUnmerged.ledger.states import FileState
from MSUnmerged.worker.cleanup import EXIT_CONFIG, REFUSED_PROTECTED
from MSUnmerged.worker.paths import ancestors
from MSUnmerged.worker.report import DIR_OUTCOMES, FILE_OUTCOMES, PROTECTED, PROTECTION_EXPIRED, REASONS

# Worker outcome -> (ledger state, error class). A v2 line's `reason` becomes the error class.
LEDGER_STATE = {
    "deleted": (FileState.DELETED, ""),
    "missing": (FileState.MISSING, ""),
    "dry_run": (FileState.WOULD_DELETE, ""),
    "permission_denied": (FileState.FAILED, "permission_denied"),
    "timeout": (FileState.FAILED, "timeout"),
    "storage_error": (FileState.FAILED, "storage_error"),
    "refused": (FileState.FAILED, "refused"),
    "not_attempted": (FileState.UNKNOWN, "not_attempted"),
    "auth_failed": (FileState.FAILED, "auth_failed"),
}
# The file is gone or was found: no error to keep.
DONE_STATES = (FileState.DELETED, FileState.MISSING, FileState.WOULD_DELETE)
# A job whose site configuration was unusable touched nothing: its files fail as config_error (retried only
# up to jobs.retries like any failure, not taken for lost jobs).
CONFIG_ERROR = (FileState.FAILED, "config_error")
_OPT_STR = (str, type(None))
_OPT_INT = (int, type(None))
# Report version -> keys of a file line and of a directory line.
_FILE_KEYS = {1: {"lfn": str, "pfn": _OPT_STR, "outcome": str, "error": _OPT_STR, "attempts": int}}
_FILE_KEYS[2] = {**_FILE_KEYS[1], "reason": _OPT_STR, "size": _OPT_INT}
_DIR_KEYS = {1: {"dir": str, "pfn": _OPT_STR, "outcome": str, "error": _OPT_STR}}
_DIR_KEYS[2] = {**_DIR_KEYS[1], "reason": _OPT_STR}


@dataclass
class FileOutcome:
    lfn: str
    pfn: Optional[str]
    outcome: str
    error: Optional[str]
    attempts: int
    line: int
    reason: Optional[str] = None
    size: Optional[int] = None  # bytes, from the worker's stat before deleting


@dataclass
class DirOutcome:
    dir: str
    pfn: Optional[str]
    outcome: str
    error: Optional[str]
    line: int
    reason: Optional[str] = None


@dataclass
class Report:
    """A parsed report. `complete` is False when the worker did not write its summary (killed)."""

    path: str
    start: Optional[dict[str, Any]] = None
    files: list[FileOutcome] = field(default_factory=list)
    dirs: list[DirOutcome] = field(default_factory=list)
    summary: Optional[dict[str, Any]] = None
    exit_code: Optional[int] = None
    version: Any = 1  # the start line's report_version (1 when it has none)
    problems: list[str] = field(default_factory=list)  # "line N: what is wrong"

    @property
    def complete(self) -> bool:
        return self.summary is not None

    @property
    def dry_run(self) -> bool:
        """The start line says the job ran in dry run: it deleted nothing (a line saying otherwise is rejected)."""
        return (self.start or {}).get("dry_run") is True

    def counters(self) -> dict[str, int]:
        """Files per worker outcome."""
        return dict(Counter(f.outcome for f in self.files))

    def dir_counters(self) -> dict[str, int]:
        return dict(Counter(d.outcome for d in self.dirs))


def _check_keys(rec: dict[str, Any], spec: Optional[Mapping[str, Any]], version: Any) -> Optional[str]:
    if spec is None:
        return f"report version {version!r} is not understood"
    for key, kind in spec.items():
        if key not in rec:
            return f"missing key {key!r}"
        if not isinstance(rec[key], kind) or isinstance(rec[key], bool):  # no key takes a boolean
            return f"key {key!r} has the wrong type ({type(rec[key]).__name__})"
    extra = set(rec) - set(spec)
    if extra:
        return f"unexpected keys {sorted(extra)}"
    if rec.get("reason") is not None and rec["reason"] not in REASONS:
        return f"unknown reason {rec['reason']!r}"
    return None


class _OutcomeLine(NamedTuple):
    """A kind of line that gives one file's or directory's outcome."""

    what: str
    keys: Mapping[Any, Mapping[str, Any]]  # by report version
    outcomes: Collection[str]
    done: str  # the outcome a dry run cannot give
    record: Callable[[dict[str, Any], int], Any]  # the line (and its number) as the report keeps it
    kept: Callable[[Report], list[Any]]  # where


_FILE_LINE = _OutcomeLine("file", _FILE_KEYS, FILE_OUTCOMES, "deleted", lambda rec, n: FileOutcome(
    rec["lfn"], rec["pfn"], rec["outcome"], rec["error"], rec["attempts"], n, rec.get("reason"), rec.get("size")),
    lambda report: report.files)
_DIR_LINE = _OutcomeLine("directory", _DIR_KEYS, DIR_OUTCOMES, "removed", lambda rec, n: DirOutcome(
    rec["dir"], rec["pfn"], rec["outcome"], rec["error"], n, rec.get("reason")), lambda report: report.dirs)


def _outcome_problem(rec: dict[str, Any], kind: _OutcomeLine, dry_run: bool) -> Optional[str]:
    """What is wrong with an outcome line's values (its keys and types are right), or None."""
    if rec["outcome"] not in kind.outcomes:
        return f"unknown {kind.what} outcome {rec['outcome']!r}"
    if rec.get("attempts", 0) < 0:  # a file line's
        return "negative attempts"
    if (rec.get("size") or 0) < 0:
        return "negative size"
    if rec["outcome"] == kind.done and dry_run:
        return f"a dry run reports a {kind.what} {kind.done}"
    return None


def _outcome_line(kind: _OutcomeLine, report: Report, n: int, rec: dict[str, Any]) -> Optional[str]:
    why = _check_keys(rec, kind.keys.get(report.version), report.version) \
        or _outcome_problem(rec, kind, report.dry_run)
    if why is None:
        kind.kept(report).append(kind.record(rec, n))
    return why


def _start_line(report: Report, n: int, rec: dict[str, Any]) -> Optional[str]:
    if set(rec) != {"start"} or not isinstance(rec["start"], dict):
        return "start line must be {\"start\": {...}}"
    if report.start is not None or report.files or report.dirs:
        return "start line not first"
    report.start = rec["start"]
    report.version = rec["start"].get("report_version", 1)
    return None if report.version in _FILE_KEYS else f"report version {report.version!r} is not understood"


def _summary_line(report: Report, n: int, rec: dict[str, Any]) -> Optional[str]:
    if set(rec) != {"summary", "exit_code"} or not isinstance(rec["summary"], dict) \
            or not isinstance(rec["exit_code"], int) or isinstance(rec["exit_code"], bool):
        return "summary line must be {\"summary\": {...}, \"exit_code\": N}"
    report.summary, report.exit_code = rec["summary"], rec["exit_code"]
    return None


# The key that makes a line of each kind (the first one a line holds) -> what adds such a line to a report.
_LINES: tuple[tuple[str, Callable[[Report, int, dict[str, Any]], Optional[str]]], ...] = (
    ("lfn", partial(_outcome_line, _FILE_LINE)), ("dir", partial(_outcome_line, _DIR_LINE)), ("start", _start_line),
    ("summary", _summary_line))


def _parse_line(report: Report, n: int, text: str) -> Optional[str]:
    """Add one line to `report`; returns what is wrong with it, or None."""
    try:
        rec = json.loads(text)
    except ValueError as exc:
        return f"not JSON ({exc.msg})"
    if not isinstance(rec, dict):
        return "not a JSON object"
    if report.summary is not None:
        return "line after the summary"
    for key, add in _LINES:
        if key in rec:
            return add(report, n, rec)
    return "not a start, file, directory or summary line"


def parse_report(path: Path | str) -> Report:
    """Read a worker report; malformed lines go to `problems`, the rest is kept."""
    report = Report(str(path))
    seen: set[str] = set()
    with open(path, "rb") as fh:
        for n, raw in enumerate(fh, 1):
            if not raw.strip():
                continue
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                report.problems.append(f"line {n}: not UTF-8 ({exc.reason} at byte {exc.start})")
                continue
            if not text.endswith("\n"):
                # A killed worker may leave half a line: it says nothing about that file.
                report.problems.append(f"line {n}: incomplete (no newline; the worker was cut off)")
                continue
            before = len(report.files)
            why = _parse_line(report, n, text)
            if why is None and len(report.files) > before:
                lfn = report.files[-1].lfn
                if lfn in seen:
                    report.files.pop()
                    why = f"second outcome for {lfn}"
                seen.add(lfn)
            if why is not None:
                report.problems.append(f"line {n}: {why}")
    return report


def ledger_outcome(f: FileOutcome, exit_code: Optional[int] = None) -> dict[str, Any]:
    """One file's outcome as the ledger records it: a refusal's reason is its error class (`exit_code`: the
    worker's, from the report's summary; 3 makes not_attempted files config_error)."""
    config_error = exit_code == EXIT_CONFIG and f.outcome == "not_attempted"
    state, cls = CONFIG_ERROR if config_error else LEDGER_STATE[f.outcome]
    if f.outcome == "refused" and (f.reason == PROTECTED or f.error == REFUSED_PROTECTED):  # v2, v1
        state, cls = FileState.SKIPPED_PROTECTED, PROTECTED if f.reason else ""
    elif f.reason and state not in DONE_STATES:
        cls = f.reason
    # Success needs no message; a per-path one would also defeat the ledger's grouping of updates.
    error = "" if state in DONE_STATES else (f.error or "")
    out = {"lfn": f.lfn, "state": state.value, "error_class": cls, "error": error, "attempts": f.attempts}
    if f.size is not None:
        out["size"] = f.size
    return out


def ledger_dir_outcome(d: DirOutcome) -> dict[str, Any]:
    """One directory's outcome as the ledger records it: the worker's outcome, its reason as the error class."""
    return {"dir": d.dir, "state": d.outcome, "error_class": d.reason or "", "error": d.error or "", "pfn": d.pfn}


class OutcomeSink(Protocol):
    """Where outcomes go: the ledger (MSUnmerged.ledger.Ledger; the demo's too); tests also use an in-memory one."""

    def record_outcomes(self, job_id: str, outcomes: Iterable[Mapping[str, Any]]) -> Any: ...

    def record_dirs(self, job_id: str, outcomes: Iterable[Mapping[str, Any]]) -> Any: ...

    def close_job(self, job_id: str, state: str, reason: str = "", **facts: Any) -> Any: ...


@dataclass
class Collected:
    """What `collect` did for one job."""

    job_id: str
    state: JobState
    recorded: int = 0
    counters: dict[str, int] = field(default_factory=dict)
    dirs: dict[str, int] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    reason: str = ""
    # Files (and directories) left for PROTECTION_EXPIRED: no file outcome recorded, the job not closed (re-issued).
    reissued: int = 0


def _accepted(lines: Iterable[Any], path: Callable[[Any], str], allowed: Optional[Callable[[str], bool]], what: str,
              problems: list[str], convert: Callable[[Any], dict[str, Any]]) -> list[dict[str, Any]]:
    """The report lines whose path is `allowed` (all when None), converted; the others become problems."""
    out = []
    for line in lines:
        if allowed is not None and not allowed(path(line)):
            problems.append(f"line {line.line}: {path(line)} is not {what}")
        else:
            out.append(convert(line))
    return out


def batch_facts(status: JobStatus, report: Optional[Report]) -> dict[str, Any]:
    """What the batch system and the worker said, kept on the job as they said it: the job's exit code
    (the batch system's, else the worker's summary line), the worker's own, the batch system's reason, and the
    stage-out method the worker used and why (its report's `method`, with `choice`)."""
    worker = report.exit_code if report is not None else None
    said = (report.summary or report.start or {}) if report is not None else {}
    method = said.get("method")
    return {"exit_code": status.exit_code if status.exit_code is not None else worker,
            "worker_exit_code": worker, "batch_reason": status.reason,
            "method": method if isinstance(method, dict) and method else None}


class Collector:
    """Hands each finished job's report to the sink and closes the job."""

    def __init__(self, sink: OutcomeSink) -> None:
        self.sink = sink

    def collect(self, job_id: str, lfns: Optional[Iterable[str]], report: Optional[Report],
                status: JobStatus, other_dirs: Optional[Callable[[str], bool]] = None,
                given_dirs: Callable[[], Iterable[str]] = tuple) -> Collected:
        """Record the report's outcomes (only for files of this job when `lfns` is given), then close (unless
        files were left for PROTECTION_EXPIRED: `reissued`).

        A directory line is accepted for a directory of the job's files, or one `other_dirs` allows (the
        job's retried directories and those holding them, those its sweep may reach). `given_dirs`: the
        directories the job was given to remove, asked only when the report is missing or cut off; those it says
        nothing of are recorded not attempted (a later cycle retries them, ledger/pending_dirs.py)."""
        out = Collected(job_id, status.state if status.state.terminal else JobState.FAILED)
        said = self._record(out, report, lfns, other_dirs) if report is not None else set()
        if report is None or not report.complete:
            unsaid = [{"dir": d, "state": "not_attempted", "error_class": "", "pfn": None,
                       "error": "the job ended without a word on this directory"}
                      for d in given_dirs() if d not in said]
            if unsaid:
                self.sink.record_dirs(job_id, unsaid)
        out.reason = _close_reason(status, report, out.problems)
        if not out.reissued:
            self.sink.close_job(job_id, out.state, out.reason, **batch_facts(status, report))
        return out

    def _record(self, out: Collected, report: Report, lfns: Optional[Iterable[str]],
                other_dirs: Optional[Callable[[str], bool]]) -> set[str]:
        """Hands the report's accepted outcomes to the sink and says so in `out`; the directories it recorded."""
        job_id = out.job_id
        allowed = set(lfns) if lfns is not None else None
        # A file left because the manifest's protected list was too old gets no outcome: it stays planned in
        # the job, its tries unchanged, and the job is not closed but re-issued (service/jobkeeper.py).
        left = [f.outcome == "not_attempted" and f.reason == PROTECTION_EXPIRED for f in report.files]
        # A directory job (no file) refused for it says so on its directories.
        out.reissued = sum(left) + sum(d.reason == PROTECTION_EXPIRED for d in report.dirs)
        outcomes = _accepted([f for f, expired in zip(report.files, left) if not expired], lambda f: f.lfn,
                             allowed.__contains__ if allowed is not None else None, f"a file of job {job_id}",
                             out.problems, lambda f: ledger_outcome(f, report.exit_code))
        dir_outcomes = _accepted(report.dirs, lambda d: d.dir, _job_dirs(allowed, report, other_dirs),
                                 f"a directory of job {job_id}'s files or retried directories", out.problems,
                                 ledger_dir_outcome)
        out.problems[:0] = report.problems
        self.sink.record_outcomes(job_id, outcomes)
        self.sink.record_dirs(job_id, dir_outcomes)
        out.recorded = len(outcomes)
        out.counters = report.counters()
        out.dirs = report.dir_counters()
        return {d["dir"] for d in dir_outcomes}


def _job_dirs(allowed: Optional[set[str]], report: Report,
              other_dirs: Optional[Callable[[str], bool]]) -> Optional[Callable[[str], bool]]:
    """Which directory lines a job's report may hold: those of the `allowed` files' directories or that
    `other_dirs` allows (None: any, when no files are given)."""
    dirs = None if allowed is None or not report.dirs else {d for lfn in allowed for d in ancestors(lfn)}
    return None if dirs is None else (lambda d: d in dirs or other_dirs is not None and other_dirs(d))


def _close_reason(status: JobStatus, report: Optional[Report], problems: list[str]) -> str:
    """Why the job ended as it did: the batch system's reason, a missing or cut off report, the worker's error, the
    report lines rejected."""
    reasons = []
    if status.reason:
        reasons.append(status.reason)
    if report is None:
        reasons.append("no report")
    elif not report.complete:
        reasons.append("report has no summary: the worker was cut off")
    elif report.summary and report.summary.get("error"):
        reasons.append(str(report.summary["error"]))
    if problems:
        reasons.append(f"{len(problems)} report lines rejected, first: {problems[0]}")
    return "; ".join(reasons)


class MemorySink:
    """An in-memory sink (demo, tests): the last outcome per (job, LFN) and per (job, directory), the closed jobs."""

    def __init__(self) -> None:
        self.outcomes: dict[str, dict[str, dict[str, Any]]] = {}
        self.dirs: dict[str, dict[str, dict[str, Any]]] = {}
        self.closed: dict[str, tuple[str, str]] = {}

    def record_outcomes(self, job_id: str, outcomes: Iterable[Mapping[str, Any]]) -> None:
        job = self.outcomes.setdefault(job_id, {})
        for o in outcomes:
            job[o["lfn"]] = dict(o)

    def record_dirs(self, job_id: str, outcomes: Iterable[Mapping[str, Any]]) -> None:
        job = self.dirs.setdefault(job_id, {})
        for o in outcomes:
            job[o["dir"]] = dict(o)

    def close_job(self, job_id: str, state: str, reason: str = "", **facts: Any) -> None:
        self.closed[job_id] = (state, reason)
