#!/usr/bin/env python3
"""How long a backlog takes to drain at a given cap: a generated dump of N files, every file really on a
local POSIX storage folder, worked by the service start to end on the embedded default database with the
local batch backend running the real worker, throttled (`planner.max_files_per_cycle`, smaller than the
count guard's `guards.max_delete_files` would allow in one plan) and capped (`jobs.max_in_flight` jobs of the
RSE at once, `jobs.local_parallel` the same).

Cycles run back to back: `Runner.run_once` (plan and record once, then one slice released per cycle) and,
between two cycles, the drainer `serve` runs every `jobs.top_up_s` (here every `--top-up` seconds) until the
RSE has no job left in flight. Per cap: wall time from the first cycle to every file deleted and the RSE
clean, cycles, slices, the first cycle's planning and recording, files deleted per second, the most jobs
ever in flight (from the ledger: intent to collection). Baseline in the same run: the same files unlinked by
one plain `os.unlink` loop (the storage's own speed on this machine), and the caps against each other.

Usage: python3 bench/bench_drain.py [--files 1000000] [--caps 1,2,4] [--slice 250000] [--quick]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Optional

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src" / "python"))

from MSUnmerged import sample  # noqa: E402
from MSUnmerged.config import Config, SiteConfig  # noqa: E402
from MSUnmerged.ledger import LIVE_JOB_STATES  # noqa: E402
from MSUnmerged.samplesite import fill_storage, rescan, write_site  # noqa: E402
from MSUnmerged.service.drain import Drainer  # noqa: E402
from MSUnmerged.sources.offline import (DUMPS_DIR, PROTECTED_FILE, RSES_FILE, STATS_FILE,  # noqa: E402
                                        OfflineSources, dump_file)
from MSUnmerged.wiring import build_service  # noqa: E402
from seam import backend_of, runner_of  # noqa: E402

RSE = "T2_XX_Backlog"
FILES_PER_DIR, DIRS_PER_DATASET, PROTECTED_DATASETS = 100, 10, 5  # at most 5 of them, and 1 in 20 of all


def make_inputs(data: Path, files: int) -> Path:
    """OfflineSources' layout: a dump of `files` LFNs in 100-file run directories, 10 per dataset directory,
    the first datasets protected; the scan just finished."""
    src = data / f"drain-{files}" / "sources"
    if (src / STATS_FILE).exists():
        return src
    (src / DUMPS_DIR).mkdir(parents=True, exist_ok=True)
    per_dataset = FILES_PER_DIR * DIRS_PER_DATASET
    with open(dump_file(src, RSE), "w") as out:
        for i in range(files):
            d, r = divmod(i // FILES_PER_DIR, DIRS_PER_DATASET)
            out.write(f"/store/unmerged/Run2024{'ABCDEFG'[d % 7]}/Prim{d:05d}/AODSIM/Proc{d:05d}-v1/"
                      f"{r:05d}/f{i:07d}.root\n")
    protected = [f"/store/unmerged/Run2024{'ABCDEFG'[d % 7]}/Prim{d:05d}/AODSIM/Proc{d:05d}-v1"
                 for d in range(max(1, min(PROTECTED_DATASETS, files // per_dataset // 20)))]
    (src / PROTECTED_FILE).write_text(json.dumps({"result": protected}))
    (src / RSES_FILE).write_text(json.dumps([RSE]))
    (src / STATS_FILE).write_text(json.dumps(sample.stats_for(RSE, files, time.time() - 60)))
    return src


def bench_config(work: Path, cap: int, per_cycle: int, top_up: float) -> Config:
    config = Config()
    config.service.state_dir = str(work / "state")
    config.service.dry_run = False
    config.mongo.url = ""  # the embedded default
    config.jobs.backend = "local"
    config.jobs.local_parallel = cap
    config.jobs.max_in_flight = cap
    config.jobs.top_up_s = top_up
    config.planner.max_files_per_cycle = per_cycle
    config.guards.max_delete_files = per_cycle  # the whole backlog in one plan would be refused
    config.guards.max_delete_fraction = 1.0  # nearly all of the generated RSE is deletable
    return config


def most_at_once(spans: list[tuple[float, float]]) -> int:
    events = sorted([(a, 1) for a, _ in spans] + [(b, -1) for _, b in spans])
    most = now = 0
    for _, step in events:
        now += step
        most = max(most, now)
    return most


def worker_seconds(reports: Path) -> list[float]:
    """Each collected job's own run time, from its report's summary line."""
    return [json.loads(p.read_text().splitlines()[-1])["summary"]["seconds"] for p in reports.rglob("*.jsonl")]


def drain(src: Path, work: Path, cap: int, per_cycle: int, top_up: float) -> dict[str, Any]:
    """One full drain at `cap`; the storage folder is filled first (not timed)."""
    shutil.rmtree(work, ignore_errors=True)
    storage = work / "storage"
    fill_storage(storage, dump_file(src, RSE))
    rescan(src, RSE)  # the scan starts after its files were made (the workers refuse files changed since)
    config = bench_config(work, cap, per_cycle, top_up)
    siteconf = write_site(work / "siteconf", storage, site=RSE, rse=RSE, volume=f"{RSE}_posix")
    config.jobs.sites[RSE] = SiteConfig(siteconfig=str(siteconf))
    row: dict[str, Any] = {"cap": cap, "per_cycle": per_cycle, "load_before": round(os.getloadavg()[0], 2)}
    with build_service(config, sources=OfflineSources(src)) as service:
        drainer = Drainer(config, service.ledger, service.sources, backend_of(service), service.instance,
                          lambda: [RSE])
        start = time.perf_counter()
        cycles, guarded = 0, 0
        while True:
            t = time.perf_counter()
            result = runner_of(service).run_once(RSE)
            cycles += 1
            if cycles == 1:
                row["first_cycle_s"] = round(time.perf_counter() - t, 1)  # planning, recording, first jobs
            guarded += result.state == "guarded"
            if result.action == "failed":
                raise RuntimeError(f"cycle {cycles}: {result.reason}: {result.detail}")
            if result.action == "finish" or cycles > 10_000:
                break
            while service.ledger.base.jobs_in(RSE, LIVE_JOB_STATES):
                time.sleep(top_up)
                drainer.once()
        row["drain_s"] = round(time.perf_counter() - start, 1)
        doc = service.ledger.base.rse(RSE)
        jobs = list(service.ledger.base.jobs.find({"rse": RSE}))
        spans = [(j["intent_at"], j["finished_at"]) for j in jobs if "intent_at" in j]
        row.update(cycles=cycles, guarded=guarded, state=doc.get("state"), slices=doc["counters"].get("slices"),
                   deleted=doc["counters"].get("deleted"), to_delete=doc["counters"].get("to_delete"), jobs=len(jobs),
                   most_in_flight=most_at_once(spans),
                   # Where a job's time goes: the worker's own run (its report), and intent to collection.
                   worker_median_s=round(statistics.median(worker_seconds(work / "state" / "reports")), 2),
                   in_flight_median_s=round(statistics.median(b - a for a, b in spans), 2))
    left = sum(len(files) for _, _, files in os.walk(storage / "store"))
    row.update(files_left=left, files_per_s=round((row["deleted"] or 0) / row["drain_s"]),
               load_after=round(os.getloadavg()[0], 2))
    shutil.rmtree(work, ignore_errors=True)
    return row


def raw_unlink(src: Path, work: Path) -> dict[str, Any]:
    """The baseline: the same files unlinked by one os.unlink loop over their paths."""
    shutil.rmtree(work, ignore_errors=True)
    storage = work / "storage"
    fill_storage(storage, dump_file(src, RSE))
    paths = [str(storage) + line for line in dump_file(src, RSE).read_text().split()]
    load = round(os.getloadavg()[0], 2)
    start = time.perf_counter()
    for path in paths:
        os.unlink(path)
    seconds = time.perf_counter() - start
    shutil.rmtree(work, ignore_errors=True)
    return {"baseline": "os.unlink loop", "files": len(paths), "s": round(seconds, 3),
            "files_per_s": round(len(paths) / seconds), "load_before": load}


def summary(files: int, base: dict[str, Any], rows: list[dict[str, Any]], interval_s: float) -> str:
    out = [f"{files:,} files; baseline os.unlink loop: {base['s']} s ({base['files_per_s']:,} files/s)\n",
           "| cap (jobs in flight) | files per cycle | slices | cycles | first cycle | drain | files/s | "
           "x unlink loop | most in flight | guarded | files left | job: worker / in flight (median) | at interval_s "
           + f"{interval_s:.0f} | load |", "|" + "---|" * 14]
    for r in rows:
        calendar = max(r["drain_s"], (r["slices"] or 1) * interval_s)
        out.append(f"| {r['cap']} | {r['per_cycle']:,} | {r['slices']} | {r['cycles']} | {r['first_cycle_s']} s | "
                   f"{r['drain_s']} s | {r['files_per_s']:,} | {r['drain_s'] / max(base['s'], 0.001):.1f} | {r['most_in_flight']} | "
                   f"{r['guarded']} | {r['files_left']:,} | {r['worker_median_s']} / {r['in_flight_median_s']} s | "
                   f"{calendar / 3600:.1f} h | {r['load_before']}-{r['load_after']} |")
    if len(rows) > 1:
        out.append(f"\ncap {rows[-1]['cap']} against cap {rows[0]['cap']}: "
                   f"{rows[0]['drain_s'] / rows[-1]['drain_s']:.2f}x as fast")
    return "\n".join(out)


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=1_000_000)
    ap.add_argument("--caps", default="1,2,4", help="jobs.max_in_flight values, comma-separated")
    ap.add_argument("--slice", type=int, default=250_000, help="planner.max_files_per_cycle")
    ap.add_argument("--top-up", type=float, default=1.0, help="seconds between two drainer passes")
    ap.add_argument("--interval-s", type=float, default=3600.0, help="service.interval_s for the calendar column")
    ap.add_argument("--data", default=str(REPO / "bench" / "data"))
    ap.add_argument("--quick", action="store_true", help="100,000 files, slices of 25,000, caps 1,2")
    args = ap.parse_args(argv)
    if args.quick:
        args.files, args.slice, args.caps = 100_000, 25_000, "1,2"
    data = Path(args.data)
    src = make_inputs(data, args.files)
    work = data / f"drain-{args.files}" / "work"
    base = raw_unlink(src, work)
    print(json.dumps(base), flush=True)
    rows = []
    for cap in (int(c) for c in args.caps.split(",")):
        rows.append(drain(src, work, cap, args.slice, args.top_up))
        print(json.dumps(rows[-1]), flush=True)
    (data / "results-drain.json").write_text(json.dumps({"baseline": base, "rows": rows}, indent=1))
    print(summary(args.files, base, rows, args.interval_s))
    shutil.rmtree(data / f"drain-{args.files}", ignore_errors=True)
    return 0 if all(r["state"] == "clean" and not r["guarded"] and r["most_in_flight"] <= r["cap"]
                    for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
