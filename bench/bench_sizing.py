#!/usr/bin/env python3
"""CMS-wide sizing of the ledger on MongoDB, by simulation: a realistic sample recorded through the
public Ledger API on SecantusDB (generated dumps planned and recorded, every job collected with a
realistic outcome mix, one retry round collected), measured per file, extrapolated to the CMS-wide
load, and the query plans (`explain`) of the operator queries.

Measured per generation life (record, collect, retry): documents, data (BSON) and index bytes
(collStats of every collection), and what the client sent: write commands, documents inserted,
update statements, BSON bytes (a pymongo CommandListener). Extrapolated: RSEs x files per generation x
generations kept (defaults 150, 100M CMS-wide, 3), write volume per generation and per polling cycle.
The read commands each operator query sends are captured and explained (queryPlanner; executionStats
where the server gives it). The arithmetic is in docs/ledger.md ("CMS-wide sizing").

With `--before SRC` the same sample first runs with another checkout's code (e.g. /work/main/src/python) in a
child process, whose results go under "before" in the same JSON: before/after in one command.

Usage: python3 bench/bench_sizing.py [--rses 2] [--lines 100000] [--json out.json] [--before SRC]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import bson
from pymongo import MongoClient, monitoring

REPO = Path(__file__).resolve().parents[1]
SRC = sys.argv[sys.argv.index("--src") + 1] if "--src" in sys.argv else str(REPO / "src" / "python")
sys.path.insert(0, SRC)

import MSUnmerged  # noqa: E402,F401  (first: the bench modules below put this checkout's code on the path)
import bench_rest  # noqa: E402
import ledgersim  # noqa: E402

from MSUnmerged.embedded_mongo import EmbeddedMongo  # noqa: E402
from MSUnmerged.ledger import Ledger  # noqa: E402

WRITES = ("insert", "update", "delete", "findAndModify")
READS = ("find", "aggregate", "count", "distinct")
MAX_ATTEMPTS = 3  # 1 + jobs.retries (default 2)
FILES_PER_JOB = 2000


class Traffic(monitoring.CommandListener):
    """Counts the write commands the client sends and keeps the read commands while `capture` is on."""

    def __init__(self) -> None:
        self.reset()
        self.capture: list[dict[str, Any]] | None = None

    def reset(self) -> None:
        self.counts = {"write_commands": 0, "inserted": 0, "update_statements": 0, "bytes_sent": 0}

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        cmd = event.command
        if event.command_name in WRITES:
            self.counts["write_commands"] += 1
            self.counts["inserted"] += len(cmd.get("documents", ()))
            self.counts["update_statements"] += len(cmd.get("updates", ()))
            self.counts["bytes_sent"] += len(bson.encode(cmd))
        elif event.command_name in READS and self.capture is not None:
            self.capture.append({k: v for k, v in cmd.items() if k not in ("lsid", "$db", "$readPreference")})

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass


def collections(db: Any) -> dict[str, dict[str, Any]]:
    """collStats of every collection: documents, data bytes, index bytes."""
    out = {}
    for name in sorted(db.list_collection_names()):
        s = db.command("collStats", name)
        out[name] = {"count": s["count"], "size": s["size"], "storage": s.get("storageSize", s["size"]),
                     "indexes": s["totalIndexSize"], "index_sizes": s.get("indexSizes", {})}
    return out


def totals(colls: dict[str, dict[str, Any]]) -> dict[str, int]:
    return {k: sum(c[k] for c in colls.values()) for k in ("count", "size", "storage", "indexes")}


def plan_of(stage: dict[str, Any]) -> str:
    """A winning plan as 'IXSCAN(index) > FETCH > SORT' (innermost first)."""
    parts = []
    while stage:
        name = stage.get("stage", "?")
        parts.append(f"{name}({stage['indexName']})" if name == "IXSCAN" else name)
        stage = stage.get("inputStage") or (stage.get("inputStages") or [None])[0]
    return " > ".join(reversed(parts))


def explain(db: Any, cmd: dict[str, Any]) -> dict[str, Any]:
    """The query plan of one captured read command (executionStats when the server gives it)."""
    cmd = {k: v for k, v in cmd.items() if k not in ("batchSize", "singleBatch")}
    try:
        out = db.command("explain", cmd, verbosity="executionStats")
    except Exception:  # noqa: BLE001 - a server without executionStats: the plan alone
        out = db.command("explain", cmd, verbosity="queryPlanner")
    planner = out.get("queryPlanner") or (out.get("stages") or [{}])[0].get("$cursor", {}).get("queryPlanner", {})
    stats = out.get("executionStats") or {}
    kind = next(iter(cmd))
    what = {k: cmd[k] for k in ("filter", "query", "sort", "limit", "pipeline") if k in cmd}
    return {"command": kind, "collection": cmd[kind], "what": json.loads(json.dumps(what, default=str)),
            "plan": plan_of(planner.get("winningPlan", {})), "docs_examined": stats.get("totalDocsExamined"),
            "keys_examined": stats.get("totalKeysExamined"), "returned": stats.get("nReturned")}


def phase(traffic: Traffic, db: Any, name: str, fn: Callable[[], Any]) -> dict[str, Any]:
    traffic.reset()
    t = time.perf_counter()
    fn()
    row = {"phase": name, "s": round(time.perf_counter() - t, 1), **traffic.counts, "after": totals(collections(db))}
    print(json.dumps(row), flush=True)
    return row


def simulate(db: Any, traffic: Traffic, rses: int, lines: int, work: Path) -> dict[str, Any]:
    ledger = Ledger(db)
    ledger.ensure_indexes()
    gen = time.time() - 3600
    names = [f"T2_XX_Size{r:02d}" for r in range(rses)]
    planned: dict[str, int] = {}

    def record() -> None:
        for r, rse in enumerate(names):
            planned[rse] = ledgersim.record_sample(ledger, rse, lines, work, gen, seed=r, files_per_job=FILES_PER_JOB)[
                0].files_to_delete

    def round_jobs(round_: int) -> list[str]:
        return [j["_id"] for rse in names for j in ledger.reads.query_jobs(rse, generation=gen, limit=10_000)["items"]
                if j.get("round") == round_]

    def retry() -> None:
        for rse in names:
            ledger.rounds.new_round(rse, gen, MAX_ATTEMPTS, FILES_PER_JOB)
        ledgersim.collect(ledger, round_jobs(2))

    phases = [phase(traffic, db, "record", record),
              phase(traffic, db, "collect round 1", lambda: ledgersim.collect(ledger, round_jobs(1))),
              phase(traffic, db, "retry round 2", retry),
              phase(traffic, db, "refresh counters", lambda: [ledger.counters.refresh_counters(r) for r in names])]
    files = sum(planned.values())
    colls = collections(db)
    # Operator queries on the first RSE, their read commands captured and explained.
    job = round_jobs(1)[0]
    target = bench_rest.find_target(ledger, names[0], job)
    view = Ledger(db).view()
    plans = []
    for name, _path, call in bench_rest.operator_queries(target):
        traffic.capture = []
        call(view)
        captured, traffic.capture = traffic.capture, None
        plans.append({"query": name, "commands": [explain(db, c) for c in captured]})
    return {"rses": rses, "lines_per_rse": lines, "files": files, "jobs_round1": len(round_jobs(1)),
            "phases": phases, "collections": colls, "plans": plans}


def extrapolate(m: dict[str, Any], rses: int, files_per_gen: float, gens: int, dumps_per_week: float,
                interval_s: float) -> dict[str, Any]:
    """Per-file figures of the sample times the CMS-wide load."""
    n = m["files"]
    final = totals(m["collections"])
    per_file = {k: final[k] / n for k in ("count", "size", "storage", "indexes")}
    kept = files_per_gen * gens
    writes_per_file = {k: sum(p[k] for p in m["phases"]) / n
                       for k in ("write_commands", "inserted", "update_statements", "bytes_sent")}
    gens_per_cycle = rses * dumps_per_week * interval_s / (7 * 86400)  # RSEs starting a new generation per cycle
    files_per_cycle = files_per_gen / rses * gens_per_cycle
    return {"rses": rses, "files_per_generation": files_per_gen, "generations_kept": gens,
            "per_file": {k: round(v, 4) for k, v in per_file.items()},
            "documents": round(per_file["count"] * kept), "data_gib": round(per_file["size"] * kept / 2**30, 1),
            "index_gib": round(per_file["indexes"] * kept / 2**30, 1),
            "writes_per_file": {k: round(v, 4) for k, v in writes_per_file.items()},
            "writes_per_generation": {k: round(v * files_per_gen) for k, v in writes_per_file.items()},
            "new_generations_per_cycle": round(gens_per_cycle, 2),
            "writes_per_cycle": {k: round(v * files_per_cycle) for k, v in writes_per_file.items()}}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rses", type=int, default=2, help="RSEs in the sample")
    ap.add_argument("--lines", type=int, default=100_000, help="dump lines per sample RSE")
    ap.add_argument("--cms-rses", type=int, default=150)
    ap.add_argument("--cms-files", type=float, default=100e6, help="files per generation, CMS-wide")
    ap.add_argument("--generations", type=int, default=3)
    ap.add_argument("--dumps-per-week", type=float, default=1.0, help="new dumps per RSE and week (assumed)")
    ap.add_argument("--interval-s", type=float, default=3600.0, help="service.interval_s")
    ap.add_argument("--json", default=str(REPO / "bench" / "data" / "results-sizing.json"))
    ap.add_argument("--src", help="the src/python whose code runs (default: this checkout's)")
    ap.add_argument("--before", help="run the same sample first with this src/python, in a child process")
    args = ap.parse_args()
    before = None
    if args.before:
        child = Path(args.json).with_suffix(".before.json")
        same = [f"--{k.replace('_', '-')}={getattr(args, k)}" for k in
                ("rses", "lines", "cms_rses", "cms_files", "generations", "dumps_per_week", "interval_s")]
        subprocess.run([sys.executable, __file__, *same, "--src", args.before, "--json", str(child)], check=True)
        before = json.loads(child.read_text())
        child.unlink()
    load_before = os.getloadavg()[0]
    work = Path(tempfile.mkdtemp(prefix="bench-sizing-"))
    traffic = Traffic()
    server = EmbeddedMongo(work / "state")
    try:
        client = MongoClient(server.start(), event_listeners=[traffic])
        measured = simulate(client.msunmerged, traffic, args.rses, args.lines, work)
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)
    cms = extrapolate(measured, args.cms_rses, args.cms_files, args.generations, args.dumps_per_week,
                      args.interval_s)
    out = {"code": SRC, "measured": measured, "cms_wide": cms, "load_before": load_before,
           "load_average": os.getloadavg()[0],
           "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), **({"before": before} if before else {})}
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(out, indent=1, default=str))
    print(f"\ncode: {SRC}; sample: {measured['files']:,} files over {args.rses} RSEs, "
          f"{measured['jobs_round1']} round-1 jobs")
    print("| collection | documents | data bytes | index bytes | per file: docs | data B | index B |")
    print("|---" * 7 + "|")
    for name, c in measured["collections"].items():
        n = measured["files"]
        print(f"| {name} | {c['count']:,} | {c['size']:,} | {c['indexes']:,} | {c['count'] / n:.4f} | "
              f"{c['size'] / n:.1f} | {c['indexes'] / n:.1f} |")
    print("\n| phase | s | write commands | inserted | update statements | bytes sent |\n|---|---|---|---|---|---|")
    for p in measured["phases"]:
        print(f"| {p['phase']} | {p['s']} | {p['write_commands']:,} | {p['inserted']:,} | {p['update_statements']:,} | "
              f"{p['bytes_sent']:,} |")
    print(f"\nCMS-wide ({args.cms_rses} RSEs, {args.cms_files:,.0f} files per generation, {args.generations} kept):")
    print(json.dumps(cms, indent=1))
    print("\nquery plans:")
    for q in measured["plans"]:
        for c in q["commands"]:
            print(f"- {q['query']}: {c['command']} {c['collection']} {json.dumps(c['what'])[:160]}: {c['plan']} "
                  f"(examined {c['docs_examined']} docs / {c['keys_examined']} keys, returned {c['returned']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
