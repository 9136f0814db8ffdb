"""The per-file report: JSON lines, each written and flushed as soon as its outcome is known.

Line kinds (docs/jobs.md): one {"start": {...}}, then {"lfn": ...} per file and {"dir": ...} per
directory, then one {"summary": {...}, "exit_code": N}. A killed job leaves every line it wrote.
"""
from __future__ import annotations

import json
from typing import Any, Dict, IO, Optional

REPORT_VERSION = 2

# File outcomes. dry_run: would have been deleted; nothing was touched. auth_failed: the job's storage
# credential is missing, expired or was refused (worker/credentials.py).
FILE_OUTCOMES = ("deleted", "missing", "permission_denied", "timeout", "storage_error", "refused",
                 "not_attempted", "dry_run", "auth_failed")
DIR_OUTCOMES = ("removed", "not_empty", "missing", "permission_denied", "timeout", "storage_error", "refused",
                "not_attempted", "dry_run", "auth_failed")

# Why a file or directory was refused (the `reason` of a report line; docs/jobs.md, docs/operations.md).
SYMLINK_IN_PATH = "symlink_in_path"  # a symbolic link at or below the unmerged root on the way to it
PFN_OUTSIDE_UNMERGED = "pfn_outside_unmerged"  # the mapped PFN is not canonical / not the LFN's place
MAPPING_DISAGREES = "mapping_disagrees"  # the site config's PFN of /store/unmerged/ is not Rucio's
MODIFIED_SINCE_SCAN = "modified_since_scan"  # changed (mtime or ctime) after the scan started, or replaced since looked at
NOT_A_FILE = "not_a_file"  # a directory (or device, fifo, socket) where the plan names a file
PATH_CHANGED = "path_changed"  # found by the look, then not reached by the unlink: its path changed meanwhile
PROTECTED = "protected"  # at or under a protected base
INVALID_LFN = "invalid_lfn"  # not a canonical path under /store/unmerged/
NOT_JOB_DIR = "not_job_dir"  # a directory holding none of this job's files
KEPT = "kept"  # a directory that must stay (a protected or kept path at or below it)
ABOVE_FLOOR = "above_floor"  # a directory above the lowest removable level
NO_PFN = "no_pfn"  # the site config maps it to nothing this deleter can use
EXCLUDED = "excluded"  # outside the RSE's path filters (planner.include/exclude, jobs.sites.<RSE>.include/exclude)
# The unmerged root holds the site config's PFN of another CMS namespace (/store/data/, ...), or the file's PFN is
# also the PFN of an LFN outside /store/unmerged/.
OTHER_NAMESPACE = "other_namespace"
# A directory on the way to the file changed after the scan while its content did not (ctime only: renamed or
# moved into place, e.g. a directory of files of the planned names moved in from /store/data/).
DIR_MOVED_SINCE_SCAN = "dir_moved_since_scan"
# WebDAV: the DELETE cannot be made conditional on what the look saw (no ETag, or the server ignores the
# condition), so it could remove a directory put in the file's place with its content.
UNCONDITIONAL_DELETE = "unconditional_delete"
# (not_attempted) the manifest's protected list is older than jobs.max_protection_age_s: no try, the job is re-issued
PROTECTION_EXPIRED = "protection_expired"
REASONS = (SYMLINK_IN_PATH, PFN_OUTSIDE_UNMERGED, MAPPING_DISAGREES, MODIFIED_SINCE_SCAN, NOT_A_FILE, PATH_CHANGED,
           PROTECTED, INVALID_LFN, NOT_JOB_DIR, KEPT, ABOVE_FLOOR, NO_PFN, EXCLUDED, OTHER_NAMESPACE,
           DIR_MOVED_SINCE_SCAN, UNCONDITIONAL_DELETE, PROTECTION_EXPIRED)
# Directory refusals that are the plan working as meant: they alone do not make a job partial.
EXPECTED_DIR_REASONS = (PROTECTED, KEPT, EXCLUDED)

_dumps = json.JSONEncoder(ensure_ascii=True, separators=(",", ":")).encode


class ReportWriter:
    """Appends report lines to a file and keeps the per-outcome counters for the summary."""

    def __init__(self, fh: IO[str]) -> None:
        self.fh = fh
        self.files: Dict[str, int] = {k: 0 for k in FILE_OUTCOMES}
        self.dirs: Dict[str, int] = {k: 0 for k in DIR_OUTCOMES}
        self.unexpected_dir_refusals = 0
        self.protected_files = 0  # files refused as protected: the worker doing its job, not a failure

    @classmethod
    def open(cls, path: str) -> "ReportWriter":
        return cls(open(path, "w", encoding="utf-8"))

    def _write(self, text: str) -> None:
        self.fh.write(text + "\n")
        self.fh.flush()

    def start(self, info: Dict[str, Any]) -> None:
        self._write(_dumps({"start": dict(info, report_version=REPORT_VERSION)}))

    def file(self, lfn: str, pfn: Optional[str], outcome: str, error: Optional[str], attempts: int,
             reason: Optional[str] = None, size: Optional[int] = None) -> None:
        assert reason is None or reason in REASONS, reason
        self.files[outcome] += 1
        if outcome == "refused" and reason == PROTECTED:
            self.protected_files += 1
        self._write(_dumps({"lfn": lfn, "pfn": pfn, "outcome": outcome, "error": error, "attempts": attempts,
                            "reason": reason, "size": size}))

    def directory(self, path: str, pfn: Optional[str], outcome: str, error: Optional[str],
                  reason: Optional[str] = None) -> None:
        assert reason is None or reason in REASONS, reason
        self.dirs[outcome] += 1
        if outcome == "refused" and reason not in EXPECTED_DIR_REASONS:
            self.unexpected_dir_refusals += 1
        self._write(_dumps({"dir": path, "pfn": pfn, "outcome": outcome, "error": error, "reason": reason}))

    def summary(self, exit_code: int, info: Dict[str, Any]) -> None:
        summary = dict(info, files={k: v for k, v in self.files.items() if v},
                       dirs={k: v for k, v in self.dirs.items() if v})
        self._write(_dumps({"summary": summary, "exit_code": exit_code}))

    def close(self) -> None:
        self.fh.close()
