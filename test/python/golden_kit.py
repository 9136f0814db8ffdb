"""A fixed fleet at a fixed time for the tests that pin what the operator sees (the RSE page, `msunmerged status`,
/metrics) against golden files in test/python/golden/: RSE documents in six situations, as the ledger's
`refresh_counters` leaves them, behind a LedgerView that answers the same jobs, files, directories, cycles and
history every time.

A change of what the operator sees is made on purpose: write the golden files again with
`MSUNMERGED_WRITE_GOLDEN=1 python -m pytest <the test>` and review their diff."""
from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, Iterator, Optional

import pytest

from MSUnmerged import diskspace
from MSUnmerged.ledger.view import MongoLedgerView, health_of

GOLDEN = Path(__file__).resolve().parent / "golden"
NOW = 1_796_200_000.0  # 2026-12-02 08:26:40 UTC
HOUR = 3600
BAD = "T2_DE_Site004"  # 1,400 of its 1,700 files failed


def name(i: int) -> str:
    return f"T{1 + i % 3}_{'US' if i % 2 else 'DE'}_Site{i:03d}"


def rse_doc(i: int, now: float) -> dict[str, Any]:
    """An RSE in one of six situations (i % 6), as refresh_counters leaves its document."""
    gen = now - 5 * HOUR
    kind = i % 6
    doc: dict[str, Any] = {"_id": name(i), "generation": gen, "updated": now - 300, "reason": "", "detail": "",
                           "generations": [{"gen": gen, "planned": gen + 60}], "counted_gen": gen}
    if kind == 0:  # deleting: 6,000 done in the last 9 minutes, 3,000 to go
        c = {"to_delete": 9000, "deleted": 6000, "pending": 3000, "jobs_by_state": {"running": 2, "finished": 6}}
        doc.update(state="running", drained=[{"t": now - 600, "n": 0}, {"t": now - 60, "n": 6000}])
    elif kind == 1:  # queued behind other RSEs' jobs
        c = {"to_delete": 500, "pending": 500, "jobs_by_state": {"queued": 1}}
        doc.update(state="running", drained=[{"t": now - 60, "n": 0}])
    elif kind == 2:  # throttled: slice 2 of 4 done, the next cycle releases slice 3
        c = {"to_delete": 24000, "deleted": 12000, "pending": 12000, "slice": 2, "slices": 4, "cycle_files": 6000,
             "unreleased_files": 12000, "unreleased_jobs": 4, "jobs_by_state": {"finished": 8, "planned": 4}}
        doc.update(state="running", drained=[{"t": now - 1800, "n": 0}, {"t": now - 600, "n": 12000}])
        doc["generations"][0].update(slice_sizes=[6000] * 4, released=2)
    elif kind == 3:
        c = {"to_delete": 40, "deleted": 40, "pending": 0, "jobs_by_state": {"finished": 1}}
        doc.update(state="clean")
    elif kind == 4:  # done with errors; one of them badly
        failed = 1400 if name(i) == BAD else 3
        c = {"to_delete": failed + 300, "deleted": 300, "failed": failed, "pending": 0,
             "failed_by_class": {"permission_denied": failed}, "jobs_by_state": {"finished": 2, "superseded": 3}}
        doc.update(state="done_with_errors", reason="files_failed")
    else:  # working, counted once: no rate yet
        c = {"to_delete": 800, "pending": 800, "jobs_by_state": {"running": 1}}
        doc.update(state="running", drained=[{"t": now - 30, "n": 0}])
    c.update(dirs_removable=40, dirs_removed=42, dirs_removed_by_dir_jobs=2, dirs_by_state={"removed": 42},
             protected_count=812)
    doc["counters"] = c
    return doc


def fleet_doc(i: int) -> dict[str, Any]:
    """rse_doc at NOW, with what only some RSEs have: skips and failures, recent progress, bytes freed, refused
    directories, a markup-looking detail."""
    doc = rse_doc(i, NOW)
    if i % 2 == 0:
        doc["progress_at"] = NOW - 60
    doc["events"] = [{"at": NOW - (3 - n) * HOUR, "state": state, "reason": reason, "detail": detail}
                     for n, (state, reason, detail) in enumerate((
                         ("skipped", "rucio_timeout", "Rucio did not answer in 30 s"),
                         ("guarded", "guard_too_many", "would delete 97% of the dump"),
                         ("failed", "files_failed", "<b>3</b> files failed")))][:i % 4]
    if i % 6 == 4:
        doc["detail"] = "2 jobs <finished> & 3 superseded"
        doc["counters"].update(bytes_freed=300 * 2_500_000_000, dirs_refused=1,
                               dirs_refused_by_reason={"protected": 1}, skipped_protected=2)
    return doc


JOBS = [{"id": f"{name(i)}:{NOW - 5 * HOUR:.0f}:{i:03d}", "state": state, "slice": s, "round": r, "backend": "condor",
         "site": "T2_DE_DESY", "files": 500, "retry_dirs": ["/store/unmerged/a", "/store/unmerged/b"][:i % 3],
         "submitted_at": NOW - 4 * HOUR + i * 60, "finished_at": NOW - 3 * HOUR if state == "finished" else None,
         "exit_code": 0 if state == "finished" else None, "reason": reason}
        for i, (state, s, r, reason) in enumerate((("finished", 1, 1, ""), ("running", 2, 1, ""),
                                                   ("held", None, 2, "memory <exceeded>"), ("queued", None, 1, "")))]
FAILED_FILES = [{"lfn": f"/store/unmerged/RunIII/Muon/AOD/v{n}/{n:04d}.root", "error_class": "permission_denied",
                 "error": f"Permission denied (errno 13) on file {n}", "attempts": 1 + n % 3,
                 "job": JOBS[0]["id"], "cursor": str(n)} for n in range(4)]
GIVEN_UP = [{"dir": "/store/unmerged/RunIII/Muon/AOD/v1", "state": "failed_storage", "error": "Input/output error",
             "tries": 4, "since": NOW - 30 * HOUR},
            {"dir": "/store/unmerged/RunIII/Muon/AOD/v2", "state": "refused_protected", "tries": 4}]
CYCLES = [{"id": f"cycle-{n}", "started": NOW - n * HOUR - 900, "finished": NOW - n * HOUR - 300,
           "duration_s": 600.0, "rses": 6, "answered": ["rucio", "conmon", "wmstats"],
           "failures": [{"source": "conmon", "reason": "conmon_timeout", "rse": name(1),
                         "detail": "ConMon did not answer in 60 s"}] if n % 2 == 0 else []} for n in range(4)]
HISTORY = [{"rse": name(r), "day": time.strftime("%Y-%m-%d", time.gmtime(NOW - d * 86400)), "deleted": 1000 * (d + r),
            "would_delete": 0, "missing": d, "bytes_freed": 2_500_000_000 * (d + r), "failed": 3 * d * r,
            "failed_by_class": {"permission_denied": 3 * d * r} if d * r else {}}
           for d in (6, 4, 2, 1, 0) for r in (0, 4)]
DISK = [diskspace.Space("state", "/data/state", 40_000_000_000, 100_000_000_000),
        diskspace.Space("jobs", "/data/jobs", 2_000_000_000, 100_000_000_000)]


class FixedView:
    """A LedgerView over the fixed fleet: RSE summaries as MongoLedgerView makes them from its documents."""

    def __init__(self, n_rses: int = 6) -> None:
        self.docs = {d["_id"]: d for d in map(fleet_doc, range(n_rses))}

    def ping(self) -> None:
        pass

    def rses(self) -> list[dict[str, Any]]:
        return [MongoLedgerView._rse_summary(d) for d in self.docs.values()]

    def rse(self, rse: str) -> Optional[dict[str, Any]]:
        doc = self.docs.get(rse)
        return MongoLedgerView._rse_summary(doc) if doc else None

    def files(self, rse: Optional[str], state: Optional[str], error_class: Optional[str],
              dir_prefix: Optional[str], job: Optional[str], after: Optional[str],
              limit: int) -> Iterator[dict[str, Any]]:
        return iter(FAILED_FILES[:limit])

    def jobs(self, rse: Optional[str], state: Optional[str], limit: int) -> list[dict[str, Any]]:
        return JOBS[:limit]

    def cycles(self, limit: int, brief: bool = False) -> list[dict[str, Any]]:
        return CYCLES[:limit]

    def health(self, stale_after_s: float, brief: bool = False) -> dict[str, Any]:
        return health_of(CYCLES, CYCLES[1], CYCLES[-1]["started"], stale_after_s, NOW)

    def history(self, rse: Optional[str], days: int) -> list[dict[str, Any]]:
        return [h for h in HISTORY if rse in (None, h["rse"])]

    def failure_totals(self) -> dict[tuple[str, str], int]:
        return {("conmon", "conmon_timeout"): 2, ("rucio", "rucio_timeout"): 1}

    def given_up_dirs(self, rse: str, max_tries: int) -> list[dict[str, Any]]:
        return GIVEN_UP


@pytest.fixture
def fixed_clock(monkeypatch: pytest.MonkeyPatch) -> float:
    """time.time() is NOW, local time is UTC, and the service's folders have fixed free space."""
    gmtime = time.gmtime
    monkeypatch.setattr(time, "time", lambda: NOW)
    monkeypatch.setattr(time, "gmtime", lambda secs=None: gmtime(NOW if secs is None else secs))
    monkeypatch.setattr(time, "localtime", lambda secs=None: gmtime(NOW if secs is None else secs))
    monkeypatch.setattr(diskspace, "measure", lambda paths: [s for s in DISK if s.folder in paths])
    return NOW


def assert_golden(file: str, text: str) -> None:
    """`text` is test/python/golden/<file> (MSUNMERGED_WRITE_GOLDEN=1: becomes it)."""
    path = GOLDEN / file
    if os.environ.get("MSUNMERGED_WRITE_GOLDEN") == "1":
        path.parent.mkdir(exist_ok=True)
        path.write_text(text)
    assert path.is_file(), f"no golden file {path}: write it with MSUNMERGED_WRITE_GOLDEN=1 and review it"
    expected = path.read_text()
    if text != expected:
        at = next((i for i, (a, b) in enumerate(zip(text, expected)) if a != b), min(len(text), len(expected)))
        pytest.fail(f"{file} differs at character {at}: got {text[max(0, at - 80):at + 80]!r}, "
                    f"golden {expected[max(0, at - 80):at + 80]!r}")
