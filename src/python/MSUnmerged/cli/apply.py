"""`msunmerged apply DIR`: record and submit exactly the plan in a plan directory made by `msunmerged plan`."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from MSUnmerged import seal
from MSUnmerged.cli import EXIT_BAD_INPUT, EXIT_GUARD, EXIT_OK, BadInput, failed_code, not_a_directory
from MSUnmerged.cli.plan import load_json, protected_list
from MSUnmerged.config import Config
from MSUnmerged.guards import UNKNOWN_RSE
from MSUnmerged.service import RunAction, RunResult, Runner, UnknownRSE
from MSUnmerged.statemachine import RSEState
from MSUnmerged.wiring import build_service


def register(p: argparse.ArgumentParser) -> None:
    p.add_argument("dir", help="plan directory written by `msunmerged plan`")
    p.add_argument("--protected", required=True, type=not_a_directory, help="CURRENT WMStats protectedlfns answer or a JSON list")
    p.set_defaults(run=run)


def exit_code(result: RunResult) -> int:
    """unknown RSE -> EXIT_BAD_INPUT, guarded (a guard, plan_modified, plan_outdated) -> EXIT_GUARD,
    failed -> EXIT_AUTH for refused credentials, else EXIT_FAILED."""
    if result.reason == UNKNOWN_RSE:
        return EXIT_BAD_INPUT
    if result.state == RSEState.GUARDED or result.action == RunAction.REFUSED:
        return EXIT_GUARD
    return failed_code(result.reason) if result.action == RunAction.FAILED else EXIT_OK


def require_rse(runner: Runner, rse: str) -> None:
    """Runner.require_rse for a command: an unknown RSE is BadInput (one line, exit 3); a SourceError (the
    RSE list unavailable) goes up as it is (exit 5)."""
    try:
        runner.require_rse(rse)
    except UnknownRSE as exc:
        raise BadInput(str(exc)) from None


def report(result: RunResult, command: str) -> int:
    """The result as JSON on stdout, a refusal as one line on stderr; returns the exit code."""
    print(json.dumps(result.to_dict(), indent=1))
    code = exit_code(result)
    if code != EXIT_OK:
        print(f"msunmerged {command}: {result.reason}: {result.detail}", file=sys.stderr)
    return code


def run(args: argparse.Namespace, config: Config) -> int:
    plan_dir = Path(args.dir)
    if not (plan_dir / seal.SUMMARY_NAME).is_file():
        raise BadInput(f"{plan_dir} is not a plan directory (no {seal.SUMMARY_NAME})")
    protected = protected_list(load_json(args.protected, "protected list"), args.protected)
    with build_service(config) as service:
        rse = seal.claimed_rse(plan_dir)
        if rse is not None:  # else apply_plan refuses the directory
            require_rse(service.runner, rse)
        result = service.runner.apply_plan(plan_dir, protected)
    return report(result, "apply")
