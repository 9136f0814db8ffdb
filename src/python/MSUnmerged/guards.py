"""The guards: each one means "delete nothing for this RSE". Every path (run_once, apply, clean, the
REST trigger) calls these same functions with the configuration in force, and names the same reasons.
"""
from __future__ import annotations

import math
import re
from typing import Any, Iterable, Mapping, NamedTuple, Optional

from MSUnmerged import lfn
from MSUnmerged.config import GuardConfig
from MSUnmerged.lfn import PrefixSet, PreparedByList

# Guard reasons (values are stable: they appear in plans, the ledger and the docs).
GUARD_PROTECTED_EMPTY = "protected_list_empty"
GUARD_PROTECTED_INVALID = "protected_list_invalid"
GUARD_PROTECTED_SHRANK = "protected_list_shrank"
# The scan guards are also the state machine's skip reasons (statemachine.decide calls check_scan).
GUARD_SCAN_MISSING = "scan_missing"
GUARD_SCAN_RUNNING = "scan_running"
GUARD_SCAN_FAILED = "scan_failed"
GUARD_SCAN_NOT_DONE = "scan_not_done"
GUARD_SCAN_NO_END_TIME = "scan_end_time_missing"
GUARD_SCAN_STALE = "scan_stale"
# The scan's start_time: the workers refuse files changed after it, so without a usable one nothing is deleted.
GUARD_SCAN_START_MISSING = "scan_start_missing"
GUARD_SCAN_START_INVALID = "scan_start_invalid"  # not a number, after end_time or in the future
SCAN_GUARDS = (GUARD_SCAN_MISSING, GUARD_SCAN_RUNNING, GUARD_SCAN_FAILED, GUARD_SCAN_NOT_DONE, GUARD_SCAN_NO_END_TIME,
               GUARD_SCAN_STALE, GUARD_SCAN_START_MISSING, GUARD_SCAN_START_INVALID)  # check_scan's reasons
GUARD_LINE_COUNT = "scan_line_count_mismatch"
GUARD_DELETE_FRACTION = "delete_fraction_exceeded"
GUARD_DELETE_COUNT = "delete_count_exceeded"
GUARD_DUMP_UNREADABLE = "dump_unreadable"
GUARD_NOT_A_DUMP = "dump_not_a_dump"
# Refusals of `apply` (a plan directory is not what was planned, or not the current plan).
PLAN_MODIFIED = "plan_modified"
PLAN_OUTDATED = "plan_outdated"
# `apply` re-derives the scan and the deletable files from the sources; a plan that differs is refused.
PLAN_SCAN_UNKNOWN = "plan_scan_unknown"  # planned without the scan's stats (`plan` without --stats)
PLAN_NOT_FROM_CURRENT_SCAN = "plan_not_from_current_scan"  # its generation or scan start is not ConMon's now
PLAN_NOT_IN_CURRENT_DUMP = "plan_not_in_current_dump"  # a planned file or directory the current dump does not give
# Not a guard: the RSE is not this instance's; nothing is recorded for it at all.
UNKNOWN_RSE = "unknown_rse"


class GuardTripped(Exception):
    """A guard refused the plan; `reason` is one of the names above."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


# The index of each protected list, built once per list (its content) for every caller and RSE; the guards below
# still check it against each caller's baseline.
_indexes: PreparedByList[PrefixSet] = PreparedByList(PrefixSet)


def check_protection(protected: Iterable[str], baseline: Optional[int], max_shrink: float) -> PrefixSet:
    """Build the protection index, or raise GuardTripped when the list cannot be trusted.

    `baseline` is the ledger's (ledger.plans.protected_baseline), or the operator's for offline planning.
    """
    bases = list(protected)
    if not bases:
        raise GuardTripped(GUARD_PROTECTED_EMPTY, "the protected LFN list is empty")
    try:
        index = _indexes(bases)
    except lfn.ProtectionListError as exc:
        raise GuardTripped(GUARD_PROTECTED_INVALID, str(exc)) from None
    if baseline and len(index) < baseline * (1.0 - max_shrink):
        raise GuardTripped(GUARD_PROTECTED_SHRANK,
                           f"{len(index)} protected bases now, {baseline} at the baseline "
                           f"(more than {max_shrink:.0%} fewer)")
    return index


class Scan(NamedTuple):
    """A usable ConMon scan of one RSE (check_scan)."""

    end_time: float  # the generation
    start_time: float  # files changed after it are refused at the site
    files: Optional[int]  # the file count it reports, when it reports one


def _number(value: Any) -> Optional[float]:
    """A finite JSON number as a float, else None (booleans, strings, NaN and infinities are not times)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def check_scan(stats: Optional[Mapping[str, Any]], max_age_h: float, now: float) -> Scan:
    """The scan's times and file count, or GuardTripped when the scan is not complete, fresh and consistent."""
    if not stats:
        raise GuardTripped(GUARD_SCAN_MISSING, "ConMon has no scan of this RSE")
    status = stats.get("status")
    if status == "started":
        raise GuardTripped(GUARD_SCAN_RUNNING, "the ConMon scan is still running")
    if status == "failed":
        raise GuardTripped(GUARD_SCAN_FAILED, f"the ConMon scan failed: {stats.get('error') or 'no error given'}")
    if status != "done":
        raise GuardTripped(GUARD_SCAN_NOT_DONE, f"ConMon scan status is {status!r}, not 'done'")
    end_time = _number(stats.get("end_time"))
    if end_time is None:
        raise GuardTripped(GUARD_SCAN_NO_END_TIME, f"the finished scan's end_time is {stats.get('end_time')!r}")
    age_h = (now - end_time) / 3600.0
    if age_h > max_age_h:
        raise GuardTripped(GUARD_SCAN_STALE, f"the scan ended {age_h:.1f} h ago, limit {max_age_h:g} h")
    raw = stats.get("start_time")
    if raw is None:
        raise GuardTripped(GUARD_SCAN_START_MISSING, "the scan gives no start_time: files changed since it "
                                                     "cannot be told apart")
    start = _number(raw)
    if start is None or start > end_time or start > now:
        raise GuardTripped(GUARD_SCAN_START_INVALID, f"the scan's start_time {raw!r} is not a time before its "
                                                     f"end_time {end_time!r} and now")
    return Scan(end_time, start, scan_files(stats))


def scan_files(stats: Any) -> Optional[int]:
    """The scan's `files` count; None when the scan is not an object or its `files` is not an int (a bool is not)."""
    files = stats.get("files") if isinstance(stats, Mapping) else None
    return files if isinstance(files, int) and not isinstance(files, bool) else None


def check_plan_scan(generation: Optional[float], scan_started: Optional[float], scan: Scan) -> None:
    """A plan to apply comes from the RSE's current scan: its generation and scan start are ConMon's now."""
    if generation is None or scan_started is None:
        raise GuardTripped(PLAN_SCAN_UNKNOWN, "the plan was made without the scan's stats (plan --stats): the "
                                              "scan it comes from is unknown")
    if (generation, scan_started) != (scan.end_time, scan.start_time):
        raise GuardTripped(PLAN_NOT_FROM_CURRENT_SCAN,
                           f"the plan is of the scan {generation!r} started {scan_started!r}; ConMon's current scan "
                           f"of the RSE ended {scan.end_time!r}, started {scan.start_time!r}")


def check_counts(files_total: int, files_to_delete: int, g: GuardConfig, per_cycle: Optional[int] = None) -> None:
    """The deletion count and fraction limits; raise GuardTripped when a plan exceeds one. A throttled plan's
    count limit holds for the most files one cycle releases (`per_cycle`, its largest slice); the fraction
    limit always judges the whole plan against the whole dump."""
    released = files_to_delete if per_cycle is None else per_cycle
    if released > g.max_delete_files:
        in_one = "" if per_cycle is None else " in one cycle"
        raise GuardTripped(GUARD_DELETE_COUNT, f"{released} files to delete{in_one}, limit {g.max_delete_files}")
    if files_total and files_to_delete / files_total > g.max_delete_fraction:
        raise GuardTripped(GUARD_DELETE_FRACTION,
                           f"{files_to_delete / files_total:.1%} of the files to delete, "
                           f"limit {g.max_delete_fraction:.1%}")


def line_problem(raw: bytes, max_length: int) -> Optional[str]:
    """Why one line of a jobs file or dirs.txt is not exactly a canonical path below /store/unmerged
    (an lfn.INVALID_REASONS name), or None. Nothing is stripped: a CR or a blank line is refused."""
    line, reason = lfn.classify_line(raw, max_length)
    if reason is not None:
        return reason
    return None if line == raw else lfn.CONTROL_OR_SPACE


def split_lines(data: bytes) -> list[bytes]:
    """The lines of a plan file: split on b"\\n" only (never universal newlines)."""
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    return lines


# Sequences no canonical line holds (empty, '.' or '..' components, a trailing slash), in one pass: each starts
# with "/" (one regex ~4x faster than six substring searches over a plan file).
_NOT_CANONICAL = re.compile(rb"/(?:/|\n|\.\.?(?=[/\n]))")


def _all_canonical_ascii(data: bytes, max_length: int) -> bool:
    """The common case with C-level byte operations only: every line printable ASCII, canonical, below
    /store/unmerged and not too long. False means "check line by line", not "invalid"."""
    n = data.count(b"\n")
    return (data.endswith(b"\n") and data.startswith(lfn.UNMERGED)
            and data.count(b"\n" + lfn.UNMERGED) == n - 1
            and not data.translate(None, lfn.PRINTABLE + b"\n")
            and _NOT_CANONICAL.search(data) is None
            and max(map(len, data.split(b"\n"))) <= max_length)


def check_plan_lines(data: bytes, max_length: int, where: str) -> int:
    """Every line of a plan file is exactly a canonical LFN; returns how many, else raises plan_modified."""
    if not data or _all_canonical_ascii(data, max_length):
        return data.count(b"\n")
    lines = split_lines(data)
    for n, raw in enumerate(lines, 1):
        reason = line_problem(raw, max_length)
        if reason is not None:
            shown = raw.decode("utf-8", errors="backslashreplace")[:200]
            raise GuardTripped(PLAN_MODIFIED, f"{where} line {n} is not a valid LFN ({reason}): {shown!r}")
    return len(lines)
