"""`msunmerged clean --rse RSE`: plan one RSE now, show the plan, then work it only when told to."""
from __future__ import annotations

import argparse
import sys
from typing import Optional, TextIO

from MSUnmerged.cli import EXIT_FAILED, EXIT_GUARD, EXIT_OK, BadInput, failed_code, source_code
from MSUnmerged.cli.output import Progress, table
from MSUnmerged.cli.plan import print_summary
from MSUnmerged.config import Config
from MSUnmerged.guards import GuardTripped
from MSUnmerged.service import RunAction, Service, UnknownRSE
from MSUnmerged.sources.errors import SourceError

# RunResult actions that mean the RSE was not worked on.
NOT_WORKED = (RunAction.FAILED, RunAction.LEASED_ELSEWHERE, RunAction.DONE_THIS_CYCLE, RunAction.REFUSED)


def register(p: argparse.ArgumentParser) -> None:
    p.add_argument("--rse", required=True, help="RSE name, e.g. T2_US_Nebraska")
    p.add_argument("--apply", action="store_true", help="work the RSE without asking (jobs are dry-run unless "
                                                        "service.dry_run = false)")
    p.set_defaults(run=run)


def confirmed(rse: str, stdin: Optional[TextIO] = None) -> bool:
    """Ask on the terminal; without one (scripts, pipes) the answer is no."""
    stdin = stdin or sys.stdin
    if not stdin.isatty():
        print("msunmerged clean: no terminal to confirm on: nothing applied (use --apply)", file=sys.stderr)
        return False
    print(f"Work {rse} now (record this plan and submit its cleanup jobs)? [y/N] ", end="", flush=True)
    return stdin.readline().strip().lower() in ("y", "yes")


def apply(service: Service, rse: str) -> int:
    """run_once for the RSE, with one progress line per step on stderr."""
    service.runner.hook = lambda step, name: print(f"{name}: {step}", file=sys.stderr, flush=True)
    print(f"{rse}: working (ConMon and WMStats are read again; the state machine decides) ...",
          file=sys.stderr, flush=True)
    result = service.runner.run_once(rse)
    table([(k, v if v not in (None, "") else "-") for k, v in result.to_dict().items()], ("", "value"), sys.stdout)
    if result.action == RunAction.FAILED:
        return failed_code(result.reason)
    return EXIT_FAILED if result.action in NOT_WORKED else EXIT_OK


def run(args: argparse.Namespace, config: Config) -> int:
    from MSUnmerged.wiring import build_service  # imports the live sources and backends only when needed
    with build_service(config) as service:
        try:
            # The current streams, not the ones bound at import (tests capture them).
            plan = service.runner.preview(args.rse, Progress(f"planning {args.rse}", out=sys.stderr))
        except UnknownRSE as exc:
            raise BadInput(str(exc)) from None  # as cli.apply.require_rse
        except SourceError as exc:
            print(f"msunmerged clean: cannot plan {args.rse}: {exc}", file=sys.stderr)
            return source_code(exc)
        except GuardTripped as guard:  # WMStats answered an empty protected list
            print(f"msunmerged clean: guard {guard}; nothing will be deleted", file=sys.stderr)
            return EXIT_GUARD
        print_summary(plan, str(service.runner.preview_dir(args.rse)))
        if plan.guard:
            print(f"msunmerged clean: guard {plan.guard}: {plan.guard_detail}; nothing will be deleted",
                  file=sys.stderr)
            return EXIT_GUARD
        if not (args.apply or confirmed(args.rse)):
            return EXIT_OK
        return apply(service, args.rse)
