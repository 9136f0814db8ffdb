"""`msunmerged plan`: offline planning of one RSE from local files into a plan directory."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from MSUnmerged import planner
from MSUnmerged.cli import EXIT_GUARD, EXIT_OK, BadInput, at_least, not_a_directory, not_a_file
from MSUnmerged.cli.output import reading, table
from MSUnmerged.config import Config
from MSUnmerged.dumpreader import iter_chunks


def register(p: argparse.ArgumentParser) -> None:
    p.add_argument("--rse", required=True, help="RSE name, e.g. T2_US_Nebraska")
    p.add_argument("--dump", required=True, type=not_a_directory, help="ConMon dump: text, gzip or JSON array")
    p.add_argument("--protected", required=True, type=not_a_directory, help="WMStats protectedlfns answer or a JSON list")
    p.add_argument("--stats", type=not_a_directory, help="ConMon stats answer (dict keyed by RSE); without it the scan is not checked")
    p.add_argument("--previous-protected-count", type=at_least(0), default=None,
                   help="protected-list size at the previous run (shrink guard, offline planning only: "
                        "apply checks against the ledger's baseline)")
    p.add_argument("--out", required=True, type=not_a_file, help="plan directory to write")
    p.add_argument("--json", action="store_true", help="print the summary as JSON instead of a table")
    p.set_defaults(run=run)


def load_json(path: str, what: str) -> Any:
    try:
        return json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise BadInput(f"{what} file not found: {path}") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BadInput(f"{what} file {path} is not readable JSON: {exc}") from None


def protected_list(data: Any, source: str) -> list[str]:
    """Accept the WMStats answer as served ({"result": [...]}) or a bare list of strings."""
    if isinstance(data, dict) and "result" in data:
        data = data["result"]
    if not isinstance(data, list) or not all(isinstance(x, str) for x in data):
        raise BadInput(f"{source}: expected {{\"result\": [strings]}} or a JSON list of strings")
    return data


def rse_stats(data: Any, rse: str, source: str) -> Any:
    if not isinstance(data, dict):
        raise BadInput(f"{source}: expected the ConMon stats answer, a JSON object keyed by RSE")
    return data.get(rse)


def print_summary(plan: planner.Plan, out_dir: str, out: Any = None) -> None:
    rows = [("RSE", plan.rse), ("files in dump", f"{plan.files_total:,}"),
            ("to delete", f"{plan.files_to_delete:,}"), ("protected", f"{plan.files_protected:,}"),
            ("excluded", f"{plan.files_excluded:,}"), ("invalid", f"{plan.invalid_total:,}")]
    rows += [(f"  {reason}", f"{n:,}") for reason, n in plan.files_invalid.items()]
    rows += [("directories removable", f"{plan.dirs_removable:,}"), ("jobs", f"{plan.jobs:,}")]
    if plan.slice_sizes:
        rows.append(("slices (one per cycle)", f"{len(plan.slice_sizes):,} of at most {plan.max_files_per_cycle:,} files"))
    filters = plan.filters or {}
    if filters.get("include") is not None:
        rows.append(("include", ", ".join(filters["include"]) or "nothing"))
    if filters.get("exclude"):
        rows.append(("exclude", ", ".join(filters["exclude"])))
    rows += [("guard", plan.guard or "none"), ("plan directory", out_dir)]
    if plan.guard:
        rows.append(("guard detail", plan.guard_detail))
        rows.append(("would have deleted", f"{plan.would_delete:,}"))
    table(rows, ("", "value"), out)


def run(args: argparse.Namespace, config: Config) -> int:
    protected = protected_list(load_json(args.protected, "protected list"), args.protected)
    stats = rse_stats(load_json(args.stats, "stats"), args.rse, args.stats) if args.stats else None
    if not Path(args.dump).exists():  # a pipe is fine: `--dump <(curl ...)`
        raise BadInput(f"dump file not found: {args.dump}")
    if args.stats is None:
        print("warning: no --stats given: scan status, age, start and line count are not checked, and `apply` "
              "refuses this plan (plan_scan_unknown)", file=sys.stderr)
    with reading(args.dump, f"planning {args.rse}") as (dump, progress):
        result = planner.plan(args.rse, iter_chunks(dump), protected, config, args.out, stats=stats,
                              previous_protected_count=args.previous_protected_count,
                              require_scan=args.stats is not None, progress=progress)
    if args.json:
        print(json.dumps(result.to_dict(), indent=1, sort_keys=True))
    else:
        print_summary(result, args.out)
    if result.guard:
        print(f"msunmerged plan: guard {result.guard}: {result.guard_detail}; nothing will be deleted",
              file=sys.stderr)
        return EXIT_GUARD
    return EXIT_OK
