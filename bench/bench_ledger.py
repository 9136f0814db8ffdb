"""Ledger benchmark: plan -> ledger ingest of N file records vs raw insert_many of the same documents
into a collection with the same indexes, on the same SecantusDB server in the same run; then the
latency of the operators' questions at N records. Appends its figures to bench/README.md.

usage: python bench/bench_ledger.py [--files 1000000] [--no-readme]
"""
from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from pymongo import MongoClient

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src" / "python"))
from MSUnmerged import planner  # noqa: E402
from MSUnmerged.config import Config  # noqa: E402
from MSUnmerged.embedded_mongo import EmbeddedMongo  # noqa: E402
from MSUnmerged.ledger import Ledger, buckets, gen_key, job_id  # noqa: E402
from MSUnmerged.seal import PlanReader  # noqa: E402

RSE = "T1_US_FNAL_Disk"
GEN = 1_700_000_000.0


def dump_chunks(n: int):
    """A dump of n files: 200 datasets, 20 blocks each, ~250 files per directory."""
    buf = []
    for i in range(n):
        ds, blk = i % 200, (i // 200) % 20
        buf.append(f"/store/unmerged/Run3Summer23/Primary{ds:03d}/AODSIM/Proc-v{ds % 3 + 1}/{blk:05d}/"
                   f"{i:08d}-4F2A-11EE-B7C3-0242AC120002.root\n")
        if len(buf) == 50_000:
            yield "".join(buf).encode()
            buf = []
    if buf:
        yield "".join(buf).encode()


def timed(fn, repeat: int = 3) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", type=int, default=1_000_000)
    ap.add_argument("--outcome-jobs", type=int, default=20, help="round-1 jobs whose outcomes are recorded, timed")
    ap.add_argument("--no-readme", action="store_true")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-ledger-"))
    server = EmbeddedMongo(work / "state")
    url = server.start()
    try:
        client = MongoClient(url)
        config = Config()
        config.planner.files_per_job = 2000
        config.guards.max_delete_fraction = 1.0
        protected = ["/store/unmerged/Run3Summer23/Primary000/AODSIM/Proc-v1"]
        t = time.perf_counter()
        plan = planner.plan(RSE, dump_chunks(args.files), protected, config, work / "plan", stats=None,
                            require_scan=False)
        t_plan = time.perf_counter() - t
        assert not plan.guard, plan.guard_detail
        n = plan.files_to_delete

        # Raw: the same bucket documents, built beforehand, one insert_many into identically indexed buckets.
        raw = Ledger(client["bench_raw"])
        raw.ensure_indexes()
        docs = []
        prefix = f"{RSE}|{gen_key(GEN)}|"
        for i, name in enumerate(plan.job_files, 1):
            lines = (work / "plan" / "jobs" / name).read_text().splitlines()
            docs += buckets.build(RSE, GEN, prefix, job_id(RSE, GEN, 1, i), i, lines, time.time(),
                                  config.planner.dir_floor_depth)
        t = time.perf_counter()
        raw.base.buckets.insert_many(docs, ordered=False)
        t_raw = time.perf_counter() - t
        del docs

        ledger = Ledger(client["bench_ledger"])
        ledger.ensure_indexes()
        t = time.perf_counter()
        recorded = ledger.plans.record_plan(PlanReader(work / "plan"), plan, GEN)
        t_ledger = time.perf_counter() - t
        assert recorded == n == ledger.counters.count_files(RSE, GEN, ["planned"]), (recorded, n)
        t = time.perf_counter()
        ledger.plans.record_plan(PlanReader(work / "plan"), plan, GEN)  # crash-repeat: every record already there
        t_repeat = time.perf_counter() - t

        # The collector's sink: whole reports of round-1 jobs (every 20th file failed: a row), timed together.
        reports = {j: [{"lfn": x, "state": "failed", "error_class": "permission_denied", "error": "Permission denied"}
                       if k % 20 == 0 else {"lfn": x, "state": "deleted", "size": 10}
                       for k, x in enumerate(ledger.rounds.job_lfns(j))]
                   for j in (job_id(RSE, GEN, 1, i) for i in range(2, min(2 + args.outcome_jobs, plan.jobs // 2)))}
        t = time.perf_counter()
        for j, report in reports.items():
            ledger.outcomes.record_outcomes(j, report)
        t_outcomes = time.perf_counter() - t
        n_outcomes = sum(len(r) for r in reports.values())
        some_job = job_id(RSE, GEN, 1, plan.jobs // 2)
        some_dir = "/store/unmerged/Run3Summer23/Primary123/AODSIM/Proc-v1/"
        ledger.outcomes.record_outcomes(some_job, [{"lfn": x, "state": "deleted", "size": 10}
                                                   for x in ledger.rounds.job_lfns(some_job)])
        lfn = ledger.rounds.job_lfns(job_id(RSE, GEN, 1, 1))[0]
        queries = {
            "files by rse+state (planned, first page of 100)": lambda: ledger.reads.query_files(RSE, state="planned"),
            "files by rse+state (deleted, 2000 of 1M, page)": lambda: ledger.reads.query_files(RSE, state="deleted"),
            "files by job (2000 files)": lambda: ledger.reads.query_files(RSE, job=some_job, limit=2000),
            "files by directory prefix (first page of 100)": lambda: ledger.reads.query_files(RSE, dir_prefix=some_dir),
            "files by directory prefix (all ~5000)": lambda: ledger.reads.query_files(RSE, dir_prefix=some_dir,
                                                                                  limit=10_000),
            "one file's history": lambda: ledger.reads.file_history(RSE, lfn),
            "count by rse+generation+state (deleted)": lambda: ledger.counters.count_files(RSE, GEN, ["deleted"]),
            "files in live jobs ('submitted', page)": lambda: ledger.reads.query_files(RSE, state="submitted"),
            "recompute RSE counters (all states)": lambda: ledger.counters.refresh_counters(RSE),
        }
        latencies = {name: timed(fn) for name, fn in queries.items()}
        check = ledger.reads.query_files(RSE, dir_prefix=some_dir, limit=10_000)
        assert check["items"] and all(d["lfn"].startswith(some_dir) for d in check["items"])
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)

    ratio = t_raw / t_ledger
    lines = [f"files recorded: {n:,} (dump {args.files:,}, plan {t_plan:.1f} s)",
             f"raw insert_many (prebuilt buckets, same indexes): {t_raw:.1f} s ({n / t_raw:,.0f} files/s)",
             f"ledger record_plan (read plan files, build, insert): {t_ledger:.1f} s ({n / t_ledger:,.0f} files/s)",
             f"ledger / raw throughput: {ratio:.2f}x (target >= 0.8x)",
             f"record_plan repeated over existing records (crash restart): {t_repeat:.1f} s",
             f"record_outcomes of {len(reports)} jobs, {n_outcomes:,} files (5 % failed): {t_outcomes:.2f} s "
             f"({n_outcomes / t_outcomes:,.0f} files/s)"]
    lines += [f"{name}: {sec * 1000:.1f} ms" for name, sec in latencies.items()]
    print("\n".join(lines))
    if not args.no_readme:
        rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                             cwd=Path(__file__).parent).stdout.strip()
        readme = Path(__file__).with_name("README.md")
        head = "" if readme.exists() else "# Benchmarks\n"
        with open(readme, "a") as fh:
            fh.write(f"{head}\n## Ledger ingest and operator queries (bench_ledger.py)\n\n"
                     f"{time.strftime('%Y-%m-%d')}, commit {rev}, {platform.machine()}, {os.cpu_count()} cores, "
                     f"SecantusDB (embedded, WiredTiger) on 127.0.0.1, median of 3 for queries.\n\n")
            fh.write("".join(f"- {line}\n" for line in lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
