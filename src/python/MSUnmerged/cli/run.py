"""`msunmerged run --rse RSE [--wait S]`: one RSE start to end by hand, with the service's own code path."""
from __future__ import annotations

import argparse

from MSUnmerged.cli import BadInput
from MSUnmerged.cli.apply import report, require_rse
from MSUnmerged.config import Config
from MSUnmerged.wiring import build_service


def register(p: argparse.ArgumentParser) -> None:
    p.add_argument("--rse", required=True, help="the RSE to work on")
    p.add_argument("--wait", type=float, default=0.0, metavar="S",
                   help="wait up to S seconds for its jobs to finish and collect them (default: do not wait)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace, config: Config) -> int:
    if args.wait < 0:
        raise BadInput("--wait must be zero or more seconds")
    with build_service(config) as service:
        require_rse(service.runner, args.rse)
        result = service.runner.run_once(args.rse, wait_s=args.wait)
    return report(result, "run")
