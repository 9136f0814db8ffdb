"""Ledger contents for the benchmarks, written only through the public Ledger API (so they measure
whatever shape the ledger stores): a generated dump planned and recorded, and jobs collected with a
realistic mix of outcomes. Not a benchmark itself (run_all runs bench_*.py only).
"""
from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src" / "python"))

from MSUnmerged import planner, sample  # noqa: E402
from MSUnmerged.config import Config  # noqa: E402
from MSUnmerged.dumpreader import iter_chunks  # noqa: E402
from MSUnmerged.jobs.backend import JobState  # noqa: E402
from MSUnmerged.ledger import DirState, FileState, Ledger  # noqa: E402
from MSUnmerged.seal import PlanReader  # noqa: E402

# Per 100 files of a collected job: 2 failed (3 classes in turn), 3 missing, 1 not reported (the job's
# close makes it unknown), the rest deleted with a size.
FAILED_PER_100, MISSING_PER_100, UNREPORTED_PER_100 = 2, 3, 1
ERROR_CLASSES = ("permission_denied", "timeout", "storage_error")
FILE_SIZE = 2_500_000_000


def outcomes_for(lfns: Sequence[str]) -> list[dict[str, Any]]:
    """The report of a job over these files (deterministic: by position); unreported files are left out."""
    out: list[dict[str, Any]] = []
    for i, lfn in enumerate(lfns):
        k = i % 100
        if k < FAILED_PER_100:
            cls = ERROR_CLASSES[(i // 100) % len(ERROR_CLASSES)]
            out.append({"lfn": lfn, "state": FileState.FAILED.value, "error_class": cls,
                        "error": f"[FATAL] {cls} on {lfn}"})
        elif k < FAILED_PER_100 + MISSING_PER_100:
            out.append({"lfn": lfn, "state": FileState.MISSING.value})
        elif k < FAILED_PER_100 + MISSING_PER_100 + UNREPORTED_PER_100:
            continue
        else:
            out.append({"lfn": lfn, "state": FileState.DELETED.value, "size": FILE_SIZE})
    return out


def collect(ledger: Ledger, job_ids: Sequence[str]) -> int:
    """For each job, as the collector does: its files' outcomes, its directories removed, then the job closed;
    returns the files."""
    n = 0
    for jid in job_ids:
        lfns = ledger.rounds.job_lfns(jid, states=None)
        ledger.outcomes.record_outcomes(jid, outcomes_for(lfns))
        ledger.outcomes.record_dirs(jid, [{"dir": d, "state": DirState.REMOVED.value}
                                          for d in sorted({lfn.rsplit("/", 1)[0] for lfn in lfns})])
        ledger.outcomes.close_job(jid, JobState.FINISHED.value, "bench: worker report without some files")
        n += len(lfns)
    return n


def record_sample(ledger: Ledger, rse: str, lines: int, work: Path, generation: float, seed: int = 12345,
                  files_per_job: int = 2000) -> tuple[planner.Plan, float]:
    """Plan a generated dump of `lines` lines for the RSE and record it (Ledger.record_plan); returns the plan
    and the seconds the recording took."""
    dump = work / f"{rse}.dump"
    spec = sample.SampleSpec(files=lines, seed=seed)
    smp = sample.make_sample(spec)
    sample.write_dump(spec, smp, dump)
    config = Config()
    config.planner.files_per_job = files_per_job
    config.guards.max_delete_fraction = 1.0
    with open(dump, "rb") as fh:
        plan = planner.plan(rse, iter_chunks(fh), smp.protected, config,
                            work / f"plan-{rse}", require_scan=False)
    dump.unlink()
    assert not plan.guard, plan.guard_detail
    t = time.perf_counter()
    ledger.plans.record_plan(PlanReader(work / f"plan-{rse}"), plan, generation)
    return plan, time.perf_counter() - t


def cycles(ledger: Ledger, n: int, rses: Sequence[str], instances: int = 2) -> None:
    """`n` polling cycles of `instances` instances over the RSEs (a result each), one in ten with a failure: the
    history an operator's status page sits on (30 days of hourly cycles: 720)."""
    for i in range(n):
        cid = ledger.cycles.start_cycle(f"bench-{i % instances}", i, list(rses))
        for rse in rses:
            ledger.cycles.record_cycle_result(cid, rse, {"action": "poll", "state": "submitted", "reason": "",
                                                         "source": ""})
        failures = [{"source": "rucio", "reason": "timeout", "detail": "bench", "rse": ""}] if i % 10 == 0 else []
        ledger.cycles.end_cycle(cid, failures, dry_run=True, unfinished=[])
