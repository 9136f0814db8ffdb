"""`msunmerged apply DIR`: record and submit exactly the plan in a plan directory made by `msunmerged plan`."""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from MSUnmerged.cli import EXIT_GUARD, EXIT_OK, BadInput, failed_code
from MSUnmerged.cli.plan import load_json, protected_list
from MSUnmerged.config import Config
from MSUnmerged.service import RunResult
from MSUnmerged.wiring import build_service


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("apply", help="record and submit a plan directory, re-checked against the protected list")
    p.add_argument("dir", help="plan directory written by `msunmerged plan`")
    p.add_argument("--protected", required=True, help="CURRENT WMStats protectedlfns answer or a JSON list")
    p.set_defaults(run=run)


def exit_code(result: RunResult) -> int:
    """guarded -> EXIT_GUARD, failed -> EXIT_AUTH for refused credentials, else EXIT_FAILED."""
    if result.state == "guarded":
        return EXIT_GUARD
    return failed_code(result.reason) if result.action == "failed" else EXIT_OK


def run(args: argparse.Namespace, config: Config) -> int:
    plan_dir = Path(args.dir)
    if not (plan_dir / "summary.json").is_file():
        raise BadInput(f"{plan_dir} is not a plan directory (no summary.json)")
    protected = protected_list(load_json(args.protected, "protected list"), args.protected)
    with build_service(config) as service:
        result = service.apply_plan(plan_dir, protected)
    print(json.dumps(result.to_dict(), indent=1))
    return exit_code(result)
