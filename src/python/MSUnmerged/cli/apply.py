"""`msunmerged apply DIR`: record and submit exactly the plan in a plan directory made by `msunmerged plan`."""
from __future__ import annotations

import argparse
import importlib
import json
from pathlib import Path
from typing import Any

from MSUnmerged.cli import EXIT_GUARD, EXIT_OK, BadInput
from MSUnmerged.cli.plan import load_json, protected_list
from MSUnmerged.config import Config
from MSUnmerged.jobs.backend import BatchBackend
from MSUnmerged.ledger import Ledger, open_client
from MSUnmerged.service import Service


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("apply", help="record and submit a plan directory, re-checked against the protected list")
    p.add_argument("dir", help="plan directory written by `msunmerged plan`")
    p.add_argument("--protected", required=True, help="CURRENT WMStats protectedlfns answer or a JSON list")
    p.set_defaults(run=run)


def make_backend(config: Config) -> BatchBackend:
    """The configured batch backend (jobs.backend)."""
    name = config.jobs.backend
    workdir = config.state_dir / "jobs"
    if name == "condor":
        from MSUnmerged.jobs.condor import CondorBackend
        return CondorBackend(config.condor, config.jobs, workdir)
    try:
        module = importlib.import_module(f"MSUnmerged.jobs.{name}")
    except ImportError:
        raise BadInput(f"jobs.backend {name!r} is not available in this build") from None
    factory = getattr(module, "from_config", None)
    if factory is None:
        raise BadInput(f"jobs.backend {name!r} has no from_config(config) factory")
    return factory(config)


def run(args: argparse.Namespace, config: Config) -> int:
    plan_dir = Path(args.dir)
    if not (plan_dir / "summary.json").is_file():
        raise BadInput(f"{plan_dir} is not a plan directory (no summary.json)")
    protected = protected_list(load_json(args.protected, "protected list"), args.protected)
    client, embedded = open_client(config)
    try:
        ledger = Ledger(client[config.mongo.database], config.mongo.generations_kept)
        ledger.ensure_indexes()
        service = Service(config, ledger, sources=None, backend=make_backend(config))  # type: ignore[arg-type]
        try:
            result = service.apply_plan(plan_dir, protected)
        finally:
            service.stop()
    finally:
        client.close()
        if embedded is not None:
            embedded.stop()
    print(json.dumps(result.to_dict(), indent=1))
    return EXIT_GUARD if result.state == "guarded" else EXIT_OK
