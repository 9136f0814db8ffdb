"""`msunmerged jobs [--rse RSE] [--state STATE]`: cleanup jobs from the ledger, newest first."""
from __future__ import annotations

import argparse
from typing import Any

from MSUnmerged.cli import EXIT_OK, at_least
from MSUnmerged.cli.ledgercli import known_rse, ledger_view, print_json
from MSUnmerged.cli.output import moment, table, truncated
from MSUnmerged.config import Config
from MSUnmerged.ledger.view import JOB_STATES
from MSUnmerged.present import job_slice, job_work


def register(p: argparse.ArgumentParser) -> None:
    p.add_argument("--rse", help="only this RSE")
    p.add_argument("--state", choices=JOB_STATES, help="only jobs in this state")
    p.add_argument("--limit", type=at_least(1), default=50, help="at most this many (default 50)")
    p.add_argument("--json", action="store_true", help="print the WMCore-style JSON envelope")
    p.set_defaults(run=run)


def method_of(job: dict[str, Any]) -> str:
    """The stage-out method the job's worker used and the rule that chose it ("WebDAV same_pfn"), "" before."""
    method = job.get("method") or {}
    choice = method.get("choice") or {}
    return " ".join(str(x) for x in (method.get("protocol") or method.get("kind"), choice.get("rule")) if x)


def run(args: argparse.Namespace, config: Config) -> int:
    limit = args.limit
    with ledger_view(config) as view:
        if args.rse:
            known_rse(view, args.rse)
        jobs = view.jobs(args.rse, args.state, limit + 1)  # one more tells whether the list is cut
    more, jobs = len(jobs) > limit, jobs[:limit]
    if args.json:
        print_json(jobs)
    else:
        table([(j["id"], j.get("state"), job_slice(j), j.get("site"), job_work(j), method_of(j),
                moment(j.get("submitted_at")), moment(j.get("finished_at")), j.get("reason") or "") for j in jobs],
              ("job", "state", "slice", "site", "work", "method", "submitted", "finished", "why"))
    if more:
        truncated(f"{limit:,} jobs", "raise --limit, or narrow with --rse/--state")
    return EXIT_OK
