"""`msunmerged demo`: a full local cleanup of a bundled sample site, with no outside service.

The sample site T2_XX_Sample gets a storage folder holding every file of a generated dump, its own
site-local-config.xml and storage.json (POSIX), a plan, cleanup jobs run by the local backend with
the real worker zipapp, and the collected outcomes. Dry run unless `--apply` (or
service.dry_run = false); `--apply` deletes only inside the demo's own folder.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from MSUnmerged import planner, sample
from MSUnmerged.cli import EXIT_FAILED, EXIT_GUARD, EXIT_OK
from MSUnmerged.cli.output import Progress, table
from MSUnmerged.cli.plan import print_summary
from MSUnmerged.collector import Collector, MemorySink, parse_report
from MSUnmerged.config import Config
from MSUnmerged.dumpreader import iter_chunks
from MSUnmerged.jobs.local import LocalBackend
from MSUnmerged.jobs.spec import jobs_from_plan
from MSUnmerged.samplesite import DEMO_RSE, DEMO_SITE, count_files, fill_storage, write_site


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("demo", help="full local cleanup of a bundled sample site (no outside services)")
    p.add_argument("--files", type=int, default=2000, help="files in the generated sample site")
    p.add_argument("--dir", default=None, help="work folder (default: <state_dir>/demo)")
    p.add_argument("--apply", action="store_true", help="really delete (in the demo's storage folder only)")
    p.add_argument("--plan-only", action="store_true", help="stop after planning")
    p.set_defaults(run=run)


def demo_spec(files: int) -> sample.SampleSpec:
    """Small datasets, so that even a small site has protected, excluded and deletable ones."""
    return sample.SampleSpec(files=files, files_per_block=max(1, files // 80), blocks_per_dataset=4)


def run(args: argparse.Namespace, config: Config) -> int:
    work = Path(args.dir) if args.dir else config.state_dir / "demo"
    inputs = sample.write_sample_inputs(work / "inputs", DEMO_RSE, demo_spec(args.files))
    stats = json.loads(inputs["stats"].read_text())[DEMO_RSE]
    protected = json.loads(inputs["protected"].read_text())["result"]
    out = work / "plan"
    result = planner.plan(DEMO_RSE, iter_chunks(inputs["dump"]), protected, config, out, stats=stats,
                          progress=Progress(f"planning {DEMO_RSE}"))
    print_summary(result, str(out), sys.stdout)  # the current stdout, not the one at import
    if result.guard:
        return EXIT_GUARD
    if args.plan_only:
        return EXIT_OK

    storage = work / "storage"
    fill_storage(storage, inputs["dump"])
    before = count_files(storage)
    siteconf = write_site(work, storage)
    jobs = jobs_from_plan(out, DEMO_RSE, DEMO_SITE, config, generation=stats["end_time"], protected=protected)
    dry_run = config.service.dry_run and not args.apply
    for job in jobs:
        job.step.dry_run = dry_run
    backend = LocalBackend(config, work / "jobs", siteconfig=str(siteconf))
    for job in jobs:  # a re-run starts afresh: the backend never runs one job id twice
        backend.remove(job.job_id, "local:" + backend.dir_name(job.job_id), "demo re-run")
    print(f"\nrunning {len(jobs)} cleanup job(s) with the local backend "
          f"({'DRY RUN: nothing is deleted, add --apply' if dry_run else 'APPLY: deleting'}) ...")
    batch = backend.submit(jobs)
    states = backend.wait(batch, timeout=max(600.0, len(jobs) * 60.0))

    sink = MemorySink()
    collector = Collector(sink)
    totals: dict[str, int] = {}
    dirs: dict[str, int] = {}
    problems: list[str] = []
    for job in jobs:
        path = backend.fetch_report(job.job_id, batch[job.job_id], work / "reports" / f"{job.job_id.replace(':', '_')}.jsonl")
        report = parse_report(path) if path else None
        got = collector.collect(job.job_id, job.lfns, report, states[job.job_id])
        for k, v in got.counters.items():
            totals[k] = totals.get(k, 0) + v
        for k, v in got.dirs.items():
            dirs[k] = dirs.get(k, 0) + v
        if got.reason:
            problems.append(f"{job.job_id}: {states[job.job_id].state.value}: {got.reason}")
    after = count_files(storage)
    print()
    rows = [("jobs", len(jobs)), ("files in the sample site", f"{before:,}")]
    rows += [(f"files {k.replace('_', ' ')}", f"{v:,}") for k, v in sorted(totals.items())]
    rows += [(f"directories {k.replace('_', ' ')}", f"{v:,}") for k, v in sorted(dirs.items())]
    rows += [("files left in storage", f"{after:,}"), ("storage folder", str(storage)),
             ("job folders (manifest, report, log)", str(work / "jobs"))]
    table(rows, ("", "value"), sys.stdout)
    examples = [o for job in sink.outcomes.values() for o in job.values()][:5]
    if examples:
        print("\nexamples:")
        for o in examples:
            print(f"  {o['state']:<13} {o['lfn']}")
    for line in problems:
        print(f"problem: {line}", file=sys.stderr)
    deleted = totals.get("deleted", 0) + totals.get("missing", 0)
    if not dry_run and before - after != totals.get("deleted", 0):
        print(f"msunmerged demo: {before - after} files disappeared, the reports say {deleted} deleted",
              file=sys.stderr)
        return EXIT_FAILED
    return EXIT_FAILED if problems else EXIT_OK
