#!/usr/bin/env python3
"""`/metrics` at partition scale: the time one scrape takes to render every family from the ledger
(rest.metrics.render, what the REST server answers), over RSEs with their jobs in every state.

Standalone: its own SecantusDB (on disk in a temporary folder), N RSEs recorded through the Ledger API
(bench/ledgersim.py: a generated dump each, planned and recorded, a share of the jobs collected, counters
refreshed as the service does at the end of each RSE's run), then `--cycles` polling cycles and one under way
(its document is read again at each scrape, as while `serve` works). The scrapes are timed in a child process
(`render_with`: its own imports and heap, so that this code and `--before`'s are timed alike; see bench/README.md,
issue 29's seventh session). Baselines in the
same run, on the same database: the RSE documents alone (`view.rses()`, what any scrape reads), and the
aggregate of every job document by RSE and state (what the `msunmerged_jobs` gauge did before issue 29), and
with `--before SRC` the same scrape rendered by another checkout's code (e.g. /work/main/src/python) in a child
process on the same database: first on the database as found (`render_before_as_found`: on one written by older
code, e.g. a `--data` folder that code loaded, its RSE documents as it left them), then after this code's start-up
(ensure_indexes: the RSE documents cut to base.EVENTS_KEPT events) interleaved with this code's scrapes.

    python3 bench/bench_metrics.py [--rses 150] [--jobs-per-rse 34] [--scrapes 30] [--before SRC] [--data DIR]
                                   [--busy N] [--events N]

`--data DIR`: the database lives in DIR and is kept; a later run with the same DIR and sizes reuses it.
`--busy N`: N processes spin on the CPU while the scrapes are timed (a busy machine, as when a cycle's local
workers run beside `serve`); `load_busy` gives the load average at the end of the timing. `--events N`: each
RSE skipped N times at the load (its document keeps the last base.EVENTS_KEPT events, as for an RSE skipped cycle
after cycle; the code before issue 29's seventh session kept 50).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

from prometheus_client.parser import text_string_to_metric_families
from pymongo import MongoClient

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src" / "python"))

import bench_rest  # noqa: E402
import ledgersim  # noqa: E402

from MSUnmerged import embedded_mongo  # noqa: E402
from MSUnmerged.config import EVENTS_KEPT, Config  # noqa: E402
from MSUnmerged.ledger import Ledger  # noqa: E402
from MSUnmerged.rest import metrics  # noqa: E402

TARGET_MS = 50.0
LINES_PER_RSE = 3000


def rse_name(r: int) -> str:
    return f"T2_BE_Metrics{r:03d}"


def timed(fn: Callable[[], Any], n: int) -> dict[str, float]:
    """Median and worst milliseconds of n calls."""
    walls = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        walls.append((time.perf_counter() - t) * 1000)
    return {"median_ms": round(statistics.median(walls), 1), "max_ms": round(max(walls), 1)}


def load(ledger: Ledger, rses: int, jobs_per_rse: int, work: Path, n_cycles: int, events: int = 0) -> int:
    """The RSEs recorded, half of each RSE's jobs collected, counters refreshed, `events` skips of each RSE kept in
    its document (then its state as it was); returns the job documents."""
    ledger.ensure_indexes()
    gen = time.time() - 86400
    names = [rse_name(r) for r in range(rses)]
    for r, rse in enumerate(names):
        ledgersim.record_sample(ledger, rse, LINES_PER_RSE, work, gen, seed=r,
                                files_per_job=max(1, LINES_PER_RSE // 10 // jobs_per_rse))
        jobs = [j["_id"] for j in ledger.reads.query_jobs(rse, limit=10_000)["items"]]
        ledgersim.collect(ledger, jobs[:len(jobs) // 2])
        ledger.counters.refresh_counters(rse)
        state = ledger.base.rse(rse)["state"]
        for i in range(events):  # an RSE skipped cycle after cycle: its document keeps the last EVENTS_KEPT
            ledger.base.set_rse_state(rse, "skipped", "conmon_scan_not_done",
                                      f"ConMon status 'running' for {rse}; skip {i}: the dump is not final yet")
        if events:
            ledger.base.set_rse_state(rse, state)
    ledgersim.cycles(ledger, n_cycles, names)
    return ledger.base.db.jobs.count_documents({})


def events_per_rse(db: Any) -> int:
    """The most events an RSE document holds."""
    return max((len(d.get("events") or []) for d in db.rses.find({}, {"events": 1})), default=0)


def stop_all(spinners: list[subprocess.Popen]) -> None:
    while spinners:
        spinner = spinners.pop()
        spinner.kill()
        spinner.wait()


def cycle_under_way(ledger: Ledger, rses: int) -> None:
    """A cycle started, half its RSEs' results recorded (as while `serve` works: each scrape reads its document
    again); on a kept database, only when none is under way yet."""
    if ledger.base.db.cycles.find_one({"finished": {"$exists": False}}, {"_id": 1}) is None:
        cid = ledger.cycles.start_cycle("bench-0", 10_000, [rse_name(r) for r in range(rses)])
        for r in range(rses // 2):
            ledger.cycles.record_cycle_result(cid, rse_name(r),
                                              {"action": "poll", "state": "submitted", "reason": "", "source": ""})


def render_with(src: str, url: str, scrapes: int, server: int) -> dict[str, float]:
    """metrics.render timed by the code under `src`, in a child process (its own imports) on the same database: wall
    median and worst, and the CPU per scrape of the child and of the database server (pid `server`), which the
    machine's load bends less than the wall."""
    code = ("import json, sys, time, statistics\n"
            "from pymongo import MongoClient\n"
            "from MSUnmerged.config import Config\n"
            "from MSUnmerged.ledger import Ledger\n"
            "from MSUnmerged.ledger.view import MongoLedgerView\n"
            "from MSUnmerged.rest import metrics\n"
            "from procstat import cpu_s\n"
            "server_cpu = lambda: cpu_s(sys.argv[3])\n"
            "db = MongoClient(sys.argv[1]).msunmerged\n"
            "# A checkout from before the ledger built its view (issue 40) builds it from the database.\n"
            "view = Ledger(db).view() if hasattr(Ledger, 'view') else MongoLedgerView(db)\n"
            "config, walls = Config(), []\n"
            "n, cpu, served = int(sys.argv[2]), time.process_time(), server_cpu()\n"
            "for _ in range(n):\n"
            "    t = time.perf_counter(); metrics.render(view, config); walls.append((time.perf_counter() - t) * 1000)\n"
            "print(json.dumps({'median_ms': round(statistics.median(walls), 1), 'max_ms': round(max(walls), 1),\n"
            "                  'cpu_ms': round((time.process_time() - cpu) * 1000 / n, 1),\n"
            "                  'server_cpu_ms': round((server_cpu() - served) * 1000 / n, 1)}))\n")
    out = subprocess.run([sys.executable, "-c", code, url, str(scrapes), str(server)],
                         env={**os.environ, "PYTHONPATH": os.pathsep.join([src, str(REPO / "bench")])},
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rses", type=int, default=150)
    ap.add_argument("--jobs-per-rse", type=int, default=34, help="about; 150 x 34: the 5,146 jobs of issue 29's cycle")
    ap.add_argument("--scrapes", type=int, default=30)
    ap.add_argument("--before", help="a checkout's src/python whose metrics.render is timed too (child process)")
    ap.add_argument("--cycles", type=int, default=48, help="polling cycles recorded (48: 2 days, hourly)")
    ap.add_argument("--events", type=int, default=0,
                    help=f"skips of each RSE at the load (its document keeps up to {EVENTS_KEPT}: an RSE skipped cycle "
                         "after cycle)")
    ap.add_argument("--busy", type=int, default=0, help="processes spinning on the CPU while timing")
    ap.add_argument("--data", type=Path, help="the database's folder, kept and reused (default: a temporary one)")
    args = ap.parse_args()
    work = args.data or Path(tempfile.mkdtemp(prefix="bench-metrics-"))
    work.mkdir(parents=True, exist_ok=True)
    sizes = {"rses": args.rses, "jobs_per_rse": args.jobs_per_rse, "cycles": args.cycles, "events": args.events}
    loaded = work / "loaded.json"  # written once the load finished: what a later run may reuse
    reuse = args.data is not None and loaded.exists() and json.loads(loaded.read_text()) == sizes
    if args.data is not None and not reuse:
        shutil.rmtree(work / "db", ignore_errors=True)
    port = bench_rest.free_port()
    proc, spinners = None, []
    try:
        with open(work / "db.log", "wb") as log:
            proc = subprocess.Popen(embedded_mongo.command(port, work / "db"), stdout=log, stderr=subprocess.STDOUT,
                                    start_new_session=True)
        bench_rest.wait_port(port, proc)
        url = f"mongodb://127.0.0.1:{port}/?directConnection=true"
        db = MongoClient(url).msunmerged
        t = time.time()
        if reuse:
            jobs = db.jobs.count_documents({})
        else:
            loaded.unlink(missing_ok=True)
            jobs = load(Ledger(db), args.rses, args.jobs_per_rse, work, args.cycles, args.events)
            loaded.write_text(json.dumps(sizes))
        cycle_under_way(Ledger(db), args.rses)
        found: dict[str, Any] = {"load_s": round(time.time() - t), "events_per_rse_found": events_per_rse(db)}
        if args.before:  # on a database written by older code: its scrapes before this code's start-up
            found["render_before_as_found"] = render_with(args.before, url, args.scrapes, proc.pid)
        Ledger(db).ensure_indexes()  # serve's start-up (cuts RSE documents written with more events)
        found["events_per_rse"] = events_per_rse(db)
        view, config = Ledger(db).view(), Config()
        gauge = sum(x.value for f in text_string_to_metric_families(metrics.render(view, config))
                    if f.name == "msunmerged_jobs" for x in f.samples)
        if gauge != jobs:  # the counts per RSE must be the job documents, or the timing means nothing
            raise SystemExit(f"bench_metrics: msunmerged_jobs sums to {gauge}, the ledger holds {jobs} jobs")
        pipeline = [{"$group": {"_id": {"rse": "$rse", "state": "$state"}, "count": {"$sum": 1}}}]
        row: dict[str, Any] = {"rses": args.rses, "jobs": jobs, "reused": reuse,
                               "load_before": round(os.getloadavg()[0], 2), **found}
        spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.busy)]
        if args.busy:
            time.sleep(5)  # the load average follows
        for _ in range(2):  # interleaved, so that a busy minute weighs on each alike
            row["render"] = render_with(str(REPO / "src" / "python"), url, args.scrapes, proc.pid)
            if args.before:
                row["render_before"] = render_with(args.before, url, args.scrapes, proc.pid)
            row["rses_only"] = timed(view.rses, args.scrapes)
            row["jobs_aggregate"] = timed(lambda: list(db.jobs.aggregate(pipeline)), args.scrapes)
        if args.busy:
            row["busy"], row["load_busy"] = args.busy, round(os.getloadavg()[0], 2)
        stop_all(spinners)
        row["render_vs_rses_only"] = round(row["render"]["median_ms"] / row["rses_only"]["median_ms"], 2)
        if args.before:
            row["before_vs_render"] = round(row["render_before"]["median_ms"] / row["render"]["median_ms"], 2)
        row["target_ms"], row["met"] = TARGET_MS, row["render"]["median_ms"] < TARGET_MS
        row["load_after"] = round(os.getloadavg()[0], 2)
        print(json.dumps(row), flush=True)
        return 0
    finally:
        stop_all(spinners)
        if proc is not None:
            bench_rest.stop(proc)
        if args.data is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
