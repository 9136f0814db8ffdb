"""`msunmerged jobs [--rse RSE] [--state STATE]`: cleanup jobs from the ledger, newest first."""
from __future__ import annotations

import argparse
from typing import Any

from MSUnmerged.cli import EXIT_OK
from MSUnmerged.cli.ledgercli import ledger_view, print_json
from MSUnmerged.cli.output import table
from MSUnmerged.config import Config
from MSUnmerged.rest.page import when
from MSUnmerged.rest.view import JOB_STATES


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("jobs", help="cleanup jobs recorded in the ledger")
    p.add_argument("--rse", help="only this RSE")
    p.add_argument("--state", choices=JOB_STATES, help="only jobs in this state")
    p.add_argument("--limit", type=int, default=50, help="at most this many (default 50)")
    p.add_argument("--json", action="store_true", help="print the WMCore-style JSON envelope")
    p.set_defaults(run=run)


def run(args: argparse.Namespace, config: Config) -> int:
    with ledger_view(config) as view:
        jobs = view.jobs(args.rse, args.state, max(1, args.limit))
    if args.json:
        print_json(jobs)
    else:
        table([(j["id"], j.get("state", ""), j.get("site", "") or "", f"{j.get('files', 0):,}",
                when(j.get("submitted_at")), when(j.get("finished_at"))) for j in jobs],
              ("job", "state", "site", "files", "submitted", "finished"))
    return EXIT_OK
