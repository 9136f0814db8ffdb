"""`msunmerged files --rse RSE [--state failed] ...`: file records of an RSE's current generation."""
from __future__ import annotations

import argparse
import itertools
import json
import sys
from typing import Any

from MSUnmerged.cli import EXIT_OK, BadInput
from MSUnmerged.cli.ledgercli import known_rse, ledger_view
from MSUnmerged.cli.output import table, truncated
from MSUnmerged.config import Config
from MSUnmerged.rest.view import FILE_STATES


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("files", help="per-file records from the ledger")
    p.add_argument("--rse", required=True, help="RSE name")
    p.add_argument("--state", choices=FILE_STATES, help="only files in this state, e.g. failed")
    p.add_argument("--error-class", help="only failures of this class")
    p.add_argument("--dir", help="only LFNs under this prefix (/store/unmerged/...)")
    p.add_argument("--job", help="only files of this job")
    p.add_argument("--limit", type=int, default=100, help="at most this many; 0 for all (default 100)")
    p.add_argument("--json", action="store_true", help="one JSON object per line (streams any size)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace, config: Config) -> int:
    if args.dir is not None and not args.dir.startswith("/store/unmerged/"):
        raise BadInput("--dir must start with /store/unmerged/")
    if args.limit < 0:
        raise BadInput("--limit must be >= 0")
    with ledger_view(config) as view:
        known_rse(view, args.rse)
        # One record more than asked tells whether the listing is cut.
        records = iter(view.files(args.rse, args.state, args.error_class, args.dir, args.job, None,
                                  args.limit and args.limit + 1))
        shown = itertools.islice(records, args.limit or None)
        if args.json:
            for rec in shown:
                sys.stdout.write(json.dumps(rec, sort_keys=True, default=str) + "\n")
        else:
            table([(r.get("lfn"), r.get("state"), r.get("error_class"), (r.get("error") or "")[:80],
                    r.get("attempts")) for r in shown], ("LFN", "state", "error class", "error", "attempts"))
        if next(records, None) is not None:
            truncated(f"{args.limit:,} files", "--limit N for more, --limit 0 for all (--json streams any number)")
    return EXIT_OK
