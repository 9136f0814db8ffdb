"""`msunmerged demo`: the main job on the embedded default, with no outside service."""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from MSUnmerged import planner, sample
from MSUnmerged.cli import EXIT_GUARD, EXIT_OK
from MSUnmerged.cli.output import Progress
from MSUnmerged.cli.plan import print_summary
from MSUnmerged.config import Config
from MSUnmerged.dumpreader import iter_chunks

DEMO_RSE = "T2_XX_Sample"


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("demo", help="plan the cleanup of a bundled sample RSE (no outside services)")
    p.add_argument("--files", type=int, default=20_000, help="files in the generated sample dump")
    p.add_argument("--dir", default=None, help="work folder (default: <state_dir>/demo)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace, config: Config) -> int:
    work = Path(args.dir) if args.dir else config.state_dir / "demo"
    inputs = sample.write_sample_inputs(work / "inputs", DEMO_RSE, sample.SampleSpec(files=args.files))
    stats = json.loads(inputs["stats"].read_text())[DEMO_RSE]
    protected = json.loads(inputs["protected"].read_text())["result"]
    out = work / "plan"
    result = planner.plan(DEMO_RSE, iter_chunks(inputs["dump"]), protected, config, out, stats=stats,
                          progress=Progress(f"planning {DEMO_RSE}"))
    print_summary(result, str(out))
    return EXIT_GUARD if result.guard else EXIT_OK
