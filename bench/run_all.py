#!/usr/bin/env python3
"""Runs every benchmark of this folder in turn (`make bench`), each in its own process, with its own
default sizes or the quick ones (`--quick`), and stops at the first that fails.

Each benchmark prints its own JSON lines; this script adds one line per benchmark saying how long it
took and how it ended. Usage: python3 bench/run_all.py [--quick] [--only NAME[,NAME...]]
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
# Name -> arguments for a quick run (a few minutes in all on this machine kind); full runs use the
# benchmarks' own defaults, which are the sizes the figures in README.md were measured at.
QUICK = {
    "bench_plan": ["--sizes", "1000000", "--baseline-lines", "1000000"],
    "bench_ledger": ["--files", "100000", "--no-readme"],
    "bench_metrics": ["--rses", "20", "--scrapes", "10"],
    "bench_rest": ["--files", "100000", "--clients", "20", "--seconds", "5"],
    "bench_scale": ["--quick"],
    "bench_sizing": ["--rses", "1", "--lines", "50000"],
    "bench_delete": ["--posix-files", "20000", "--xrootd-files", "2000"],
    "bench_condor_submit": ["--jobs", "200"],
    "bench_drain": ["--quick"],
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smaller inputs (see QUICK in this file)")
    ap.add_argument("--only", default="", help="comma-separated benchmark names, e.g. bench_plan,bench_rest")
    args = ap.parse_args()
    names = sorted(p.stem for p in HERE.glob("bench_*.py"))
    if args.only:
        wanted = [n.strip() for n in args.only.split(",") if n.strip()]
        unknown = sorted(set(wanted) - set(names))
        if unknown:
            print(f"run_all: unknown benchmark(s) {', '.join(unknown)}; known: {', '.join(names)}", file=sys.stderr)
            return 2
        names = [n for n in names if n in wanted]
    for name in names:
        argv = [sys.executable, str(HERE / f"{name}.py"), *(QUICK.get(name, []) if args.quick else [])]
        print(f"run_all: {' '.join(argv[1:])}", file=sys.stderr, flush=True)
        started = time.monotonic()
        rc = subprocess.call(argv)
        print(json.dumps({"benchmark": name, "exit_code": rc, "seconds": round(time.monotonic() - started, 1)}),
              flush=True)
        if rc != 0:
            return rc
    return 0


if __name__ == "__main__":
    sys.exit(main())
