"""`msunmerged status [--rse RSE]`: every RSE's state and counters, or one RSE in detail."""
from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from MSUnmerged.cli import EXIT_OK
from MSUnmerged.cli.demo import default_work, look_command
from MSUnmerged.cli.ledgercli import known_rse, ledger_view, print_json
from MSUnmerged.cli.output import moment, table
from MSUnmerged.config import Config
from MSUnmerged.drainstatus import drain, total
from MSUnmerged.present import cycle_share, expected_end, next_slice, rate, shares_label, size


def register(p: argparse.ArgumentParser) -> None:
    p.add_argument("--rse", help="one RSE in detail")
    p.add_argument("--json", action="store_true", help="print the WMCore-style JSON envelope")
    p.set_defaults(run=run)


def header(config: Config, health: dict[str, Any]) -> str:
    """One line above the tables: the service's mode and, when there is one, the failing-cycles alert."""
    mode = ("DRY RUN: jobs delete nothing (service.dry_run = true)" if config.service.dry_run
            else "real mode: jobs delete files")
    return f"{mode}; ALERT: {health['alert']}" if health.get("alert") else mode


def run(args: argparse.Namespace, config: Config) -> int:
    with ledger_view(config) as view:
        health = view.health(config.service.stale_after_s)
        given_up: list[dict[str, Any]] = []
        if args.rse:
            rses = [known_rse(view, args.rse)]
            given_up = view.given_up_dirs(args.rse, 1 + config.jobs.retries)
        else:
            rses = view.rses()
    if args.json:
        print_json(rses)
        return EXIT_OK
    print(header(config, health))
    if args.rse:
        one_rse(rses[0], given_up, config)
    else:
        every_rse(rses, config)
    return EXIT_OK


def one_rse(r: dict[str, Any], given_up: list[dict[str, Any]], config: Config) -> None:
    """One RSE in detail: its state, its backlog's drain, every counter; the directories given up on."""
    now = time.time()
    d = drain(r, now, config.service.interval_s)
    counters = r.get("counters") or {}
    rows = [("state", r.get("state")), ("reason", r.get("reason")), ("detail", r.get("detail")),
            ("generation", moment(r.get("generation"))), ("updated", moment(r.get("updated"))),
            ("progress", shares_label(counters)), ("now", f"{d['waiting']}: {d['why']}"),
            ("backlog", f"{d['backlog_files']:,} files"), ("rate", rate(d)), ("expected end", expected_end(d, now))]
    if cycle_share(counters):
        rows.append(("throttle", cycle_share(counters)))
    if next_slice(d, now):
        rows.append(("next slice", next_slice(d, now)))
    rows += [(k, size(v) if k.startswith("bytes") and isinstance(v, int) else v) for k, v in sorted(counters.items())]
    table(rows, ("", "value"))
    if given_up:
        print(f"directories given up on ({len(given_up)}, tried {1 + config.jobs.retries} times):")
        table([(g.get("dir"), g.get("state"), g.get("error") or "", g.get("tries")) for g in given_up],
              ("directory", "last outcome", "why", "tries"))


def every_rse(rses: list[dict[str, Any]], config: Config) -> None:
    """A line per RSE, the fleet's drain; where the demo's ledger is when this one is empty."""
    now = time.time()
    drains = [drain(r, now, config.service.interval_s) for r in rses]
    rows = []
    for r, d in zip(rses, drains):
        c = r.get("counters") or {}
        rows.append((r["name"], r.get("state"), r.get("reason"), moment(r.get("generation")),
                     c.get("to_delete", 0), c.get("deleted", 0), c.get("failed", 0),
                     " · ".join(x for x in (shares_label(c), cycle_share(c)) if x),
                     d["backlog_files"], rate(d), expected_end(d, now), d["waiting"]))
    table(rows, ("RSE", "state", "reason", "generation", "to delete", "deleted", "failed", "progress", "backlog",
                 "rate", "expected end", "now"))
    if rses:
        t = total(drains)
        print(f"total: {t['backlog_files']:,} files left at {rate(t)}, expected end {expected_end(t, now)}"
              + (f" ({t['unknown_end']} RSEs without a rate yet)" if t["unknown_end"] else ""))
    demo = default_work(config) / "state"
    if not rses and not config.mongo.url and (demo / "db").is_dir():
        print(f"(no RSE in this ledger; the demo's: {look_command(demo)})", file=sys.stderr)
