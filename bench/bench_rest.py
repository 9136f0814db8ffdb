"""Operator-query latency under load: p50/p99 of every query an operator uses, through the REST server
(`msunmerged serve`) and through the CLI's code path (MongoLedgerView, what `msunmerged status/files`
call), with C concurrent clients.

Standalone, it starts its own SecantusDB (on disk in a temporary folder) and records N files over 10 RSEs
through the Ledger API (generated dumps planned and recorded with Ledger.record_plan, 3/4 of each RSE's
jobs collected with a realistic mix of outcomes: bench/ledgersim.py), so it measures whatever shape the
ledger stores. bench_scale.py uses `measure` on its 10M-line RSE. The load generator is closed-loop: each
client sends its next request as soon as the previous answer is read, for at most `--seconds` or
`--requests` per query. Generator, server and database share the machine's cores.

    python bench/bench_rest.py --files 1000000 --clients 20 --seconds 10
"""
from __future__ import annotations

import argparse
import http.client
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Optional
from urllib.parse import quote

from pymongo import MongoClient

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src" / "python"))

import ledgersim  # noqa: E402
from procstat import cpu_s  # noqa: E402

from MSUnmerged import embedded_mongo  # noqa: E402
from MSUnmerged.ledger import Ledger, buckets  # noqa: E402
from MSUnmerged.ledger.view import MongoLedgerView  # noqa: E402
from MSUnmerged.worker.paths import ancestors  # noqa: E402

N_RSES = 10
BASE = "/ms-unmerged/data"
STALE_AFTER_S = 3 * 3600.0  # the default service.stale_after_s, for the CLI path's health()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_port(port: int, proc: subprocess.Popen, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"process {proc.args[0]} exited with {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), 1).close()
            return
        except OSError:
            time.sleep(0.1)
    raise TimeoutError(f"nothing on port {port}")


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)


def start_serve(env: Mapping[str, str], log: Path, cache_ttl: float = 2.0,
                src: Optional[str] = None) -> tuple[subprocess.Popen, int]:
    """`msunmerged serve` on a free loopback port with the given environment (which names its database) and the
    code of `src` (default: this checkout's src/python); its polling loop's live sources are unreachable here, so
    it idles."""
    port = free_port()
    code = src or str(REPO / "src" / "python")
    # Every client of the generator is one caller (127.0.0.1, unauthenticated): its limits are lifted, where the
    # code has them (rest/limits.py; older code refuses their keys).
    limited = (Path(code) / "MSUnmerged" / "rest" / "limits.py").exists()
    caller = {} if not limited else {"MSUNMERGED_REST__MAX_REQUESTS_PER_CALLER": "48",
                             "MSUNMERGED_REST__MAX_REQUESTS_UNVERIFIED": "48",
                             "MSUNMERGED_REST__CALLER_REQUESTS_PER_S": "1000000",
                             "MSUNMERGED_REST__CALLER_BURST": "1000000"}
    env = {**os.environ, **env, **caller, "MSUNMERGED_REST__CACHE_TTL_S": str(cache_ttl),
           "MSUNMERGED_REST__MAX_CONNECTIONS_PER_CLIENT": "48",
           "MSUNMERGED_SERVICE__LOG_LEVEL": "WARNING", "PYTHONPATH": code}
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "MSUnmerged.cli", "serve", "--port", str(port)], env=env,
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    wait_port(port, proc)
    return proc, port


@dataclass
class Target:
    """What the operator queries are about: an RSE, one of its jobs, a directory, one LFN, an error class."""

    rse: str
    job: str
    dir: str
    lfn: str
    error_class: str = ledgersim.ERROR_CLASSES[0]


def find_target(ledger: Ledger, rse: str, job: str) -> Target:
    """A Target from one collected job: its first file, and that file's dataset folder."""
    lfn = ledger.rounds.job_lfns(job, states=None)[0]
    return Target(rse, job, lfn.rsplit("/", 2)[0] + "/", lfn)


PAGES = ("failed by class", "files of a job", "files under a directory")  # the per-file pages (issue 29)


def operator_queries(t: Target) -> list[tuple[str, str, Callable[[MongoLedgerView], Any]]]:
    """(name, REST path, the CLI's call on the ledger view) per operator question. REST has no per-LFN history
    endpoint: the LFN's record in the current generation is asked as a `dir` prefix equal to the LFN."""
    files = f"{BASE}/files?rse={t.rse}"
    return [
        ("status", f"{BASE}/status", lambda v: (v.rses(), v.health(STALE_AFTER_S))),
        ("info", f"{BASE}/info?rse={t.rse}&detail=false", lambda v: v.rse(t.rse)),
        ("failed by class", f"{files}&error_class={t.error_class}&limit=100",
         lambda v: list(v.files(t.rse, "failed", t.error_class, None, None, None, 100))),
        ("files of a job", f"{files}&job={quote(t.job)}&limit=100",
         lambda v: list(v.files(t.rse, None, None, None, t.job, None, 100))),
        ("files under a directory", f"{files}&dir={quote(t.dir)}&limit=100",
         lambda v: list(v.files(t.rse, None, None, t.dir, None, None, 100))),
        ("one LFN's history", f"{files}&dir={quote(t.lfn)}&limit=10",
         lambda v: v.ledger.reads.file_history(t.rse, t.lfn)),
    ]


def engine_floor(view: MongoLedgerView, t: Target) -> list[tuple[str, Callable[[], Any]]]:
    """The database alone, no MSUnmerged code: each per-file page's own documents read straight with pymongo, the same
    run's floor for that page. A page's records come from rows (a document each) and bucket entries (a bucket holds
    one job's files of a directory, or of neighbouring ones): its floor reads exactly the rows and the buckets its
    first page's records come from, the buckets in one `_id $in` read, the rows in one index range read when they
    are all of one state and error class (the failed-files page: its (rse, gen, state, error_class, _id) range from
    its first to its last row, which SecantusDB answers faster than point look-ups), else one `_id $in` read."""
    db, out = view.ledger.base.db, []
    for name, _, cli in operator_queries(t):
        if name not in PAGES:
            continue
        records = cli(view)
        if not records:  # nothing to read: no floor
            continue
        gen = records[0]["gen"]
        row_ids = [d["_id"] for d in db.files.find({"_id": {"$in": [r["cursor"] for r in records]}}, {"_id": 1})]
        entries = {(r["lfn"], r["job"]) for r in records if r["cursor"] not in set(row_ids)}
        # A bucket holds files of its `dir` and below it (packed directories): the ones holding these entries.
        dirs = sorted({a for lfn, _ in entries for a in ancestors(lfn)})
        bucket_ids = [d["_id"] for d in db.buckets.find({"rse": t.rse, "gen": gen, "dir": {"$in": dirs}},
                                                        {"_id": 1, "dir": 1, "job": 1, "names": 1})
                      if any((f"{d['dir']}/{name}", d["job"]) in entries for name in buckets.names(d))]
        kinds = {(r["state"], r.get("error_class")) for r in records}
        rows: dict[str, Any] = {"_id": {"$in": row_ids}}
        if not entries and len(kinds) == 1:
            (state, cls), = kinds
            rows = {"rse": t.rse, "gen": gen, "state": state, "error_class": cls,
                    "_id": {"$gte": min(row_ids), "$lte": max(row_ids)}}

        def read(rows: dict[str, Any] = rows, row_ids: list[str] = row_ids,
                 bucket_ids: list[str] = bucket_ids) -> list[Any]:
            return (list(db.files.find(rows)) if row_ids else []) + \
                (list(db.buckets.find({"_id": {"$in": bucket_ids}})) if bucket_ids else [])
        out.append((f"floor: {name} ({len(row_ids)} rows, {len(bucket_ids)} buckets)", read))
    return out


def hammer(make_call: Callable[[], Callable[[], bool]], clients: int, seconds: float,
           max_requests: int) -> dict[str, Any]:
    """Closed loop: each client (its own callable from `make_call`) sends its next request when the previous
    answer is read; a call returning False or raising counts as an error."""
    latencies: list[float] = []
    errors = [0]
    lock = threading.Lock()
    deadline = time.monotonic() + seconds
    budget = [max_requests]

    def client() -> None:
        call = make_call()
        mine: list[float] = []
        bad = 0
        while time.monotonic() < deadline:
            with lock:
                if budget[0] <= 0:
                    break
                budget[0] -= 1
            t0 = time.perf_counter()
            try:
                ok = call()
            except Exception:  # noqa: BLE001 - any failure is an error of this request
                ok = False
            mine.append(time.perf_counter() - t0)
            bad += not ok
        with lock:
            latencies.extend(mine)
            errors[0] += bad

    threads = [threading.Thread(target=client) for _ in range(clients)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.monotonic() - t0
    latencies.sort()
    q = statistics.quantiles(latencies, n=100, method="inclusive") if len(latencies) > 1 else latencies * 99
    return {"requests": len(latencies), "errors": errors[0], "rps": round(len(latencies) / wall, 1),
            "p50_ms": round(q[49] * 1000, 1), "p99_ms": round(q[98] * 1000, 1),
            "max_ms": round(latencies[-1] * 1000, 1)}


def costed(pids: Mapping[str, int], run: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """`run`'s row plus the CPU milliseconds per request each process in `pids` spent meanwhile (`cpu_ms`):
    unlike latencies, these hardly change with what else runs on the machine."""
    before = {name: cpu_s(pid) for name, pid in pids.items()}
    row = run()
    n = max(1, row["requests"])
    row["cpu_ms"] = {name: round((cpu_s(pid) - before[name]) * 1000 / n, 2) for name, pid in pids.items()}
    return row


def http_get(port: int, path: str) -> Callable[[], Callable[[], bool]]:
    """A client factory for `hammer`: each client keeps one keep-alive connection (reopened after an error)."""
    def make() -> Callable[[], bool]:
        conn = [http.client.HTTPConnection("127.0.0.1", port, timeout=30)]

        def call() -> bool:
            try:
                conn[0].request("GET", path)
                resp = conn[0].getresponse()
                resp.read()
                return resp.status == 200
            except (OSError, http.client.HTTPException):
                conn[0].close()
                conn[0] = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
                return False
        return call
    return make


def measure(view: MongoLedgerView, port: Optional[int], target: Target, clients: int, seconds: float,
            max_requests: int = 50_000, pages_only: bool = False, before_port: Optional[int] = None,
            pids: Optional[Mapping[str, int]] = None) -> list[dict[str, Any]]:
    """Every operator query (pages_only: the per-file pages) through REST (when `port`; also through a server
    running older code when `before_port`) and the CLI path, then the engine floor of each page (engine_floor),
    one JSON-ready row each. `pids` ("db", "rest", "rest (before)"): each row also gives the CPU per request of
    the database, of the server it went through and of this process (the generator, and the CLI path's code)."""
    pids = pids or {}

    def procs(via: str) -> dict[str, int]:
        return {"generator": os.getpid(), **{k: v for k, v in pids.items() if k in ("db", via)}}
    rows = []
    for p in (port, before_port):
        if p:
            hammer(http_get(p, f"{BASE}/status"), 5, 1.0, 200)  # warm-up
    for name, path, cli in operator_queries(target):
        if pages_only and name not in PAGES:
            continue
        paths = ([("rest (before)", path, http_get(before_port, path))] if before_port else []) + \
                ([("rest", path, http_get(port, path))] if port else []) + \
                [("cli path", name, lambda cli=cli: lambda: cli(view) is not None)]
        for via, what, make in paths:
            row = {"query": name, "via": via, "request": what.replace(BASE + "/", ""), "clients": clients,
                   **costed(procs(via), lambda make=make: hammer(make, clients, seconds, max_requests))}
            print(json.dumps(row), flush=True)
            rows.append(row)
    for name, read in engine_floor(view, target):
        row = {"query": name, "via": "database", "request": name, "clients": clients,
               **costed(procs("database"), lambda read=read: hammer(lambda: lambda: read() is not None, clients,
                                                                    seconds, max_requests))}
        print(json.dumps(row), flush=True)
        rows.append(row)
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    """One line per row; a page's line also gives its p99 over its engine floor's p99 at the same clients."""
    floors = {(r["query"].split(": ", 1)[1].split(" (")[0], r["clients"]): r["p99_ms"] for r in rows
              if r["via"] == "database"}
    out = ["| query | via | clients | requests | errors | req/s | p50 ms | p99 ms | max ms | p99 / floor p99 | "
           "CPU ms per request: database / server / generator |", "|" + "---|" * 11]
    for r in rows:
        floor = floors.get((r["query"], r["clients"]))
        ratio = f"{r['p99_ms'] / floor:.2f}" if floor else "-"
        cpu = r.get("cpu_ms") or {}
        cost = " / ".join(str(cpu[k]) if k in cpu else "-" for k in ("db", r["via"], "generator"))
        out.append(f"| {r['query']} | {r['via']} | {r['clients']} | {r['requests']:,} | {r['errors']} | "
                   f"{r['rps']:.0f} | {r['p50_ms']} | {r['p99_ms']} | {r['max_ms']} | {ratio} | {cost} |")
    return "\n".join(out)


def load(ledger: Ledger, n_files: int, work: Path, n_cycles: int) -> tuple[float, Target]:
    """About n_files deletable files over N_RSES RSEs (dumps of n_files / 0.7 / N_RSES lines), 3/4 of each RSE's
    jobs collected, then `n_cycles` polling cycles; returns the seconds taken and a Target in the first RSE with
    files."""
    start = time.time()
    ledger.ensure_indexes()
    gen = time.time() - 86400
    target = None
    for r in range(N_RSES):
        rse = f"T2_BE_Bench{r:02d}"
        plan, _ = ledgersim.record_sample(ledger, rse, int(n_files / 0.7 / N_RSES), work, gen, seed=r)
        jobs = [j["_id"] for j in ledger.reads.query_jobs(rse, limit=10_000)["items"]]
        ledgersim.collect(ledger, jobs[:len(jobs) * 3 // 4])
        ledger.counters.refresh_counters(rse)
        if target is None and jobs:
            target = find_target(ledger, rse, jobs[0])
        print(f"  loaded {rse}: {plan.files_to_delete:,} files, {time.time() - start:.0f} s", flush=True)
    ledgersim.cycles(ledger, n_cycles, [f"T2_BE_Bench{r:02d}" for r in range(N_RSES)])
    if target is None:
        raise SystemExit(f"bench_rest: {n_files:,} files give no deletable file in any RSE: use --files 100000 or more")
    return time.time() - start, target


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=1_000_000, help="deletable files recorded over 10 RSEs")
    ap.add_argument("--clients", type=int, default=20)
    ap.add_argument("--seconds", type=float, default=10.0, help="per query")
    ap.add_argument("--requests", type=int, default=50_000, help="per query, at most")
    ap.add_argument("--cache-ttl", type=float, default=2.0, help="rest.cache_ttl_s of the served app")
    ap.add_argument("--cycles", type=int, default=720, help="polling cycles recorded (720: 30 days, hourly)")
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="bench-rest-"))
    db_port = free_port()
    url = f"mongodb://127.0.0.1:{db_port}/?directConnection=true"
    procs = []
    try:
        with open(work / "db.log", "wb") as log:
            procs.append(subprocess.Popen(embedded_mongo.command(db_port, work / "db"), stdout=log,
                                          stderr=subprocess.STDOUT, start_new_session=True))
        wait_port(db_port, procs[0])
        db = MongoClient(url).msunmerged
        print(f"recording ~{args.files:,} files through the Ledger API ...", flush=True)
        load_s, target = load(Ledger(db), args.files, work, args.cycles)
        proc, port = start_serve({"MSUNMERGED_MONGO__URL": url}, work / "serve.log", args.cache_ttl)
        procs.append(proc)
        rows = measure(Ledger(db).view(), port, target, args.clients, args.seconds, args.requests)
        print(f"\n~{args.files:,} files over {N_RSES} RSEs (load {load_s:.0f} s), {args.clients} clients, cache_ttl_s "
              f"{args.cache_ttl}, load average {os.getloadavg()[0]:.1f}, {os.cpu_count()} cores shared by generator, "
              f"server and database\n")
        print(table(rows))
        return 0
    finally:
        for proc in reversed(procs):
            stop(proc)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
