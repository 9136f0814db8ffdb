"""`msunmerged files --rse RSE [--state failed] [--dirs] ...`: file (or directory) records of an RSE's current
generation."""
from __future__ import annotations

import argparse
import itertools
import json
import sys

from MSUnmerged.cli import EXIT_OK, BadInput, at_least
from MSUnmerged.cli.ledgercli import known_rse, ledger_view
from MSUnmerged.cli.output import table, truncated
from MSUnmerged.config import Config
from MSUnmerged.ledger.view import DIR_STATES, FILE_STATES


def register(p: argparse.ArgumentParser) -> None:
    p.add_argument("--rse", required=True, help="RSE name")
    p.add_argument("--dirs", action="store_true",
                   help="directory outcomes instead of files (removed, not_empty, refused with its reason, ...)")
    p.add_argument("--state", choices=sorted({*FILE_STATES, *DIR_STATES}),
                   help="only records in this state, e.g. failed (files) or refused (--dirs)")
    p.add_argument("--error-class", help="only failures of this class (with --dirs: refusals for this reason)")
    p.add_argument("--dir", help="only paths under this prefix (/store/unmerged/...)")
    p.add_argument("--job", help="only records of this job")
    p.add_argument("--limit", type=at_least(0), default=100, help="at most this many; 0 for all (default 100)")
    p.add_argument("--json", action="store_true", help="one JSON object per line (streams any size)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace, config: Config) -> int:
    if args.dir is not None and not args.dir.startswith("/store/unmerged/"):
        raise BadInput("--dir must start with /store/unmerged/")
    states = DIR_STATES if args.dirs else FILE_STATES
    if args.state is not None and args.state not in states:
        raise BadInput(f"--state {args.state} is not a {'directory' if args.dirs else 'file'} state: "
                       + ", ".join(states))
    with ledger_view(config) as view:
        known_rse(view, args.rse)
        fetch = view.dirs if args.dirs else view.files
        # One record more than asked tells whether the listing is cut.
        records = iter(fetch(args.rse, args.state, args.error_class, args.dir, args.job, None,
                             args.limit and args.limit + 1))
        shown = itertools.islice(records, args.limit or None)
        if args.json:
            for rec in shown:
                sys.stdout.write(json.dumps(rec, sort_keys=True, default=str) + "\n")
        elif args.dirs:
            table([(r.get("dir"), r.get("state"), r.get("error_class"), (r.get("error") or "")[:80], r.get("job"))
                   for r in shown], ("directory", "state", "reason", "error", "job"))
        else:
            table([(r.get("lfn"), r.get("state"), r.get("error_class"), (r.get("error") or "")[:80],
                    r.get("attempts")) for r in shown], ("LFN", "state", "error class", "error", "attempts"))
        if next(records, None) is not None:
            what = "directories" if args.dirs else "files"
            truncated(f"{args.limit:,} {what}", "--limit N for more, --limit 0 for all (--json streams any number)")
    return EXIT_OK
