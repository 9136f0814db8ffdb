"""`msunmerged demo`: the main job on the embedded default, with no outside service.

A generated sample site T2_XX_Sample gets a storage folder holding every file of its dump and its
own site-local-config.xml and storage.json (POSIX). The service then works the RSE start to end,
exactly as in production but with file-based sources, the embedded MongoDB-compatible database
and the local batch backend: plan, ledger, cleanup jobs running the real worker, collection.
Dry run unless `--apply` (or service.dry_run = false); `--apply` deletes only inside the demo's
own folder.
"""
from __future__ import annotations

import argparse
import dataclasses
import shlex
import shutil
import sys
from pathlib import Path
from typing import Any

from MSUnmerged import sample
from MSUnmerged.cli import EXIT_FAILED, EXIT_GUARD, EXIT_OK, BadInput, at_least, not_a_file
from MSUnmerged.cli.output import table
from MSUnmerged.config import Config, SiteConfig
from MSUnmerged.embedded_mongo import in_use
from MSUnmerged.samplesite import DEMO_RSE, DEMO_SITE, count_files, fill_storage, rescan, write_site
from MSUnmerged.service import RunAction
from MSUnmerged.sources.offline import OfflineSources, dump_file
from MSUnmerged.statemachine import RSEState
from MSUnmerged.wiring import build_service


def register(p: argparse.ArgumentParser) -> None:
    p.add_argument("--files", type=at_least(1), default=2000, help="files in the generated sample site")
    p.add_argument("--dir", type=not_a_file, default=None, help="work folder (default: <state_dir>/demo)")
    p.add_argument("--apply", action="store_true", help="really delete (in the demo's storage folder only)")
    p.add_argument("--wait", type=float, default=600.0, help="seconds to wait for the cleanup jobs")
    p.set_defaults(run=run)


def demo_spec(files: int) -> sample.SampleSpec:
    """Small datasets, so that even a small site has protected, excluded and deletable ones."""
    return sample.SampleSpec(files=files, files_per_block=max(1, files // 80), blocks_per_dataset=4)


def write_sources(directory: Path, files: int) -> Path:
    """The sample RSE as OfflineSources reads it: stats, protected list and dump."""
    if directory.exists():
        shutil.rmtree(directory)
    inputs = sample.write_sample_inputs(directory, DEMO_RSE, demo_spec(files))  # stats and protected in place
    dump = dump_file(directory, DEMO_RSE)
    dump.parent.mkdir()
    inputs["dump"].rename(dump)
    return directory


def demo_config(config: Config, work: Path, siteconf: Path, apply: bool) -> Config:
    """The given configuration with the demo's own state folder, embedded database and local site."""
    cfg = dataclasses.replace(config)
    cfg.service = dataclasses.replace(config.service, state_dir=str(work / "state"),
                                      dry_run=config.service.dry_run and not apply)
    cfg.mongo = dataclasses.replace(config.mongo, url="")
    cfg.jobs = dataclasses.replace(config.jobs, backend="local",
                                   sites={DEMO_RSE: SiteConfig(site=DEMO_SITE, siteconfig=str(siteconf))})
    return cfg


def default_work(config: Config) -> Path:
    return config.state_dir / "demo"


def look_command(state: Path) -> str:
    """The command that shows the ledger of a demo state folder (its embedded database, whatever mongo.url says)."""
    return f"MSUNMERGED_SERVICE__STATE_DIR={shlex.quote(str(state))} MSUNMERGED_MONGO__URL= msunmerged status"


def run(args: argparse.Namespace, config: Config) -> int:
    work = (Path(args.dir) if args.dir else default_work(config)).resolve()
    if in_use(work / "state"):
        raise BadInput(f"the demo's database in {work / 'state'} is in use by another process; stop it first")
    sources = write_sources(work / "sources", args.files)
    storage = work / "storage"
    fill_storage(storage, dump_file(sources, DEMO_RSE))
    rescan(sources, DEMO_RSE, storage)  # the scan lists the files made: it starts after them
    siteconf = write_site(work, storage)
    shutil.rmtree(work / "state", ignore_errors=True)  # each demo starts from an empty ledger
    cfg = demo_config(config, work, siteconf, args.apply)
    before = count_files(storage)
    mode = "APPLY: deleting" if not cfg.service.dry_run else "DRY RUN: nothing is deleted, add --apply"
    print(f"msunmerged demo: {DEMO_RSE}, {before:,} files in {storage}; {mode}", flush=True)
    print("starting the embedded database and working the RSE (plan, ledger, cleanup jobs, collection) ...",
          flush=True)
    with build_service(cfg, sources=OfflineSources(sources)) as service:
        result = service.runner.run_once(DEMO_RSE, wait_s=args.wait)
        final = service.runner.run_once(DEMO_RSE)  # jobs collected: the state machine closes the RSE
        counters = service.ledger.counters.refresh_counters(DEMO_RSE)
        examples = service.ledger.reads.query_files(DEMO_RSE, limit=5)["items"]
        service.stop()
    after = count_files(storage)
    c = counters
    failed = ", ".join(f"{k} {v:,}" for k, v in sorted(c.get("failed_by_class", {}).items()))
    rows: list[tuple[str, Any]] = [
        ("RSE", DEMO_RSE), ("first run", f"{result.action}: {result.submitted} jobs submitted, "
                                         f"{result.collected} collected"),
        ("state", f"{final.state} {final.reason}".strip()), ("files in the sample site", f"{before:,}"),
        ("files to delete (planned)", f"{c.get('to_delete', 0):,}"), ("files deleted", f"{c.get('deleted', 0):,}"),
        ("files would delete (dry run)", f"{c.get('would_delete', 0):,}"),
        ("files missing", f"{c.get('missing', 0):,}"), ("files failed", f"{c.get('failed', 0):,} {failed}".strip()),
        ("files unknown", f"{c.get('unknown', 0):,}"),
        ("files protected", f"{c.get('protected', 0):,}"), ("files excluded", f"{c.get('excluded', 0):,}"),
        ("files invalid", f"{sum(c.get('invalid', {}).values()):,}"),
        ("directories removable", f"{c.get('dirs_removable', 0):,}"),
        ("files left in storage", f"{after:,}"), ("storage folder", str(storage)),
        ("state folder (ledger, plans, jobs)", str(work / "state"))]
    table(rows, ("", "value"), sys.stdout)
    print(f"\nto look at the demo's ledger later: {look_command(work / 'state')}  (jobs and files likewise)")
    if examples:
        print("\nexamples from the ledger:")
        for f in examples:
            print(f"  {f['state']:<13} {f['lfn']}")
    if result.state == RSEState.GUARDED:
        return EXIT_GUARD
    for r in (result, final):
        if r.action == RunAction.FAILED:
            print(f"msunmerged demo: {r.reason}: {r.detail}", file=sys.stderr)
            return EXIT_FAILED
    if not cfg.service.dry_run and before - after != c.get("deleted", 0):
        print(f"msunmerged demo: {before - after} files disappeared, the ledger says {c.get('deleted', 0)} "
              "deleted", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK

