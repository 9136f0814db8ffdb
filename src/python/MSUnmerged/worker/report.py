"""The per-file report: JSON lines, each written and flushed as soon as its outcome is known.

Line kinds (docs/jobs.md): one {"start": {...}}, then {"lfn": ...} per file and {"dir": ...} per
directory, then one {"summary": {...}, "exit_code": N}. A killed job leaves every line it wrote.
"""
from __future__ import annotations

import json
from typing import Any, Dict, IO, Optional

REPORT_VERSION = 1

# File outcomes. dry_run: would have been deleted; nothing was touched.
FILE_OUTCOMES = ("deleted", "missing", "permission_denied", "timeout", "storage_error", "refused",
                 "not_attempted", "dry_run")
DIR_OUTCOMES = ("removed", "not_empty", "missing", "permission_denied", "timeout", "storage_error", "refused",
                "not_attempted", "dry_run")
# Why a file or directory was refused or kept: the `reason` of report v2 lines (docs/jobs.md).
REASONS = ("symlink_in_path", "pfn_outside_unmerged", "mapping_disagrees", "modified_since_scan", "protected",
           "invalid_lfn", "not_job_dir", "kept", "no_pfn")
_dumps = json.JSONEncoder(ensure_ascii=True, separators=(",", ":")).encode


class ReportWriter:
    """Appends report lines to a file and keeps the per-outcome counters for the summary."""

    def __init__(self, fh: IO[str]) -> None:
        self.fh = fh
        self.files: Dict[str, int] = {k: 0 for k in FILE_OUTCOMES}
        self.dirs: Dict[str, int] = {k: 0 for k in DIR_OUTCOMES}

    @classmethod
    def open(cls, path: str) -> "ReportWriter":
        return cls(open(path, "w", encoding="utf-8"))

    def _write(self, text: str) -> None:
        self.fh.write(text + "\n")
        self.fh.flush()

    def start(self, info: Dict[str, Any]) -> None:
        self._write(_dumps({"start": dict(info, report_version=REPORT_VERSION)}))

    def file(self, lfn: str, pfn: Optional[str], outcome: str, error: Optional[str], attempts: int) -> None:
        self.files[outcome] += 1
        self._write(_dumps({"lfn": lfn, "pfn": pfn, "outcome": outcome, "error": error, "attempts": attempts}))

    def directory(self, path: str, pfn: Optional[str], outcome: str, error: Optional[str]) -> None:
        self.dirs[outcome] += 1
        self._write(_dumps({"dir": path, "pfn": pfn, "outcome": outcome, "error": error}))

    def summary(self, exit_code: int, info: Dict[str, Any]) -> None:
        summary = dict(info, files={k: v for k, v in self.files.items() if v},
                       dirs={k: v for k, v in self.dirs.items() if v})
        self._write(_dumps({"summary": summary, "exit_code": exit_code}))

    def close(self) -> None:
        self.fh.close()
