"""REST latency under load: p50/p99 of status, info and a per-file query with N file records in the ledger.

Starts its own SecantusDB (on disk in a temporary folder: the in-memory engine failed with an internal
error at ~650k records with the four file indexes) and `msunmerged serve` on free loopback ports, loads N file
records in the ledger's shape (Ledger.ensure_indexes, counters by Ledger.refresh_counters), then
runs a closed-loop load generator: C client threads with keep-alive connections, each sending the
next request as soon as the previous answer is read, for at most `--seconds` or `--requests` per
endpoint. The generator shares the machine's cores with the server and the database.

    python bench/bench_rest.py --files 1000000 --clients 50 --seconds 15
"""
from __future__ import annotations

import argparse
import http.client
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
from pathlib import Path
from typing import Any

from pymongo import MongoClient

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src" / "python"))

from MSUnmerged import embedded_mongo  # noqa: E402
from MSUnmerged.ledger import Ledger, file_id, job_id  # noqa: E402

N_RSES = 10


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


def load(db: Any, n_files: int) -> float:
    """n_files records over N_RSES RSEs, 2000 per job, a mix of outcomes; returns seconds taken."""
    start = time.time()
    ledger = Ledger(db)
    ledger.ensure_indexes()
    gen = time.time() - 86400
    per_rse = n_files // N_RSES
    states = ["deleted"] * 80 + ["failed"] * 5 + ["missing"] * 5 + ["planned"] * 10
    for r in range(N_RSES):
        rse = f"T2_BE_Bench{r:02d}"
        db.rses.replace_one({"_id": rse}, {"_id": rse, "state": "running", "reason": "", "generation": gen,
                                           "updated": time.time(),
                                           "generations": [{"gen": gen, "files_total": per_rse, "to_delete": per_rse,
                                                            "planned": gen + 60}]}, upsert=True)
        batch = []
        for i in range(per_rse):
            d = f"/store/unmerged/Run2026/Prim{i % 50}/NANOAOD/v{i % 7}/{i // 1000:04d}"
            lfn = f"{d}/f{i:07d}.root"
            state = states[i % 100]
            batch.append({"_id": file_id(rse, gen, lfn), "rse": rse, "gen": gen, "lfn": lfn, "dir": d,
                          "state": state, "job": job_id(rse, gen, 1, i // 2000 + 1), "attempts": 1, "t": gen,
                          "error_class": ("permission_denied", "timeout")[i % 2] if state == "failed" else "",
                          "error": "bench" if state == "failed" else ""})
            if len(batch) == 20000:
                db.files.insert_many(batch, ordered=False)
                batch = []
        if batch:
            db.files.insert_many(batch, ordered=False)
        db.jobs.insert_many([{"_id": job_id(rse, gen, 1, j), "rse": rse, "gen": gen, "round": 1, "n": j,
                              "state": "finished", "files": 2000} for j in range(1, per_rse // 2000 + 2)])
        ledger.refresh_counters(rse)
        print(f"  loaded {rse}: {(r + 1) * per_rse:,} files, {time.time() - start:.0f} s", flush=True)
    return time.time() - start


def hammer(port: int, path: str, clients: int, seconds: float, max_requests: int) -> dict[str, Any]:
    """Closed loop: each client sends its next request when the previous answer is read."""
    latencies: list[float] = []
    errors = [0]
    lock = threading.Lock()
    deadline = time.monotonic() + seconds
    budget = [max_requests]

    def client() -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        mine: list[float] = []
        while time.monotonic() < deadline:
            with lock:
                if budget[0] <= 0:
                    break
                budget[0] -= 1
            t0 = time.perf_counter()
            try:
                conn.request("GET", path)
                resp = conn.getresponse()
                resp.read()
                ok = resp.status == 200
            except (OSError, http.client.HTTPException):
                ok = False
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            mine.append(time.perf_counter() - t0)
            if not ok:
                with lock:
                    errors[0] += 1
        conn.close()
        with lock:
            latencies.extend(mine)

    threads = [threading.Thread(target=client) for _ in range(clients)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.monotonic() - t0
    latencies.sort()
    q = statistics.quantiles(latencies, n=100, method="inclusive") if len(latencies) > 1 else latencies * 99
    return {"path": path, "requests": len(latencies), "errors": errors[0], "rps": len(latencies) / wall,
            "p50_ms": q[49] * 1000, "p99_ms": q[98] * 1000, "max_ms": latencies[-1] * 1000}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=1_000_000)
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument("--seconds", type=float, default=15.0, help="per endpoint")
    ap.add_argument("--requests", type=int, default=50_000, help="per endpoint, at most")
    ap.add_argument("--cache-ttl", type=float, default=2.0, help="rest.cache_ttl_s of the served app")
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="bench-rest-"))
    db_port, rest_port = free_port(), free_port()
    url = f"mongodb://127.0.0.1:{db_port}/?directConnection=true"
    procs = []
    try:
        with open(work / "db.log", "wb") as log:
            procs.append(subprocess.Popen(embedded_mongo.command(db_port, work / "db"), stdout=log,
                                          stderr=subprocess.STDOUT, start_new_session=True))
        wait_port(db_port, procs[0])
        db = MongoClient(url).msunmerged
        print(f"loading {args.files:,} file records ...", flush=True)
        load_s = load(db, args.files)
        env = {**os.environ, "MSUNMERGED_MONGO__URL": url, "MSUNMERGED_REST__CACHE_TTL_S": str(args.cache_ttl),
               "MSUNMERGED_SERVICE__LOG_LEVEL": "WARNING", "PYTHONPATH": str(REPO / "src" / "python")}
        with open(work / "serve.log", "wb") as log:
            procs.append(subprocess.Popen([sys.executable, "-m", "MSUnmerged.cli", "serve", "--port", str(rest_port)],
                                          env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
        wait_port(rest_port, procs[1])
        base = "/ms-unmerged/data"
        paths = [f"{base}/status", f"{base}/info?rse=ALL_DOCS", f"{base}/info?rse=T2_BE_Bench03&detail=false",
                 f"{base}/files?rse=T2_BE_Bench03&state=failed&limit=100",
                 f"{base}/files?rse=T2_BE_Bench03&dir=/store/unmerged/Run2026/Prim7/&limit=100"]
        hammer(rest_port, paths[0], 5, 2.0, 500)  # warm-up
        results = [hammer(rest_port, p, args.clients, args.seconds, args.requests) for p in paths]
        print(f"\n{args.files:,} file records (load {load_s:.0f} s), {args.clients} clients, cache_ttl_s "
              f"{args.cache_ttl}, {os.cpu_count()} cores shared by generator, server and database\n")
        print("| request | requests | errors | req/s | p50 ms | p99 ms | max ms |\n|---|---|---|---|---|---|---|")
        for r in results:
            print(f"| `{r['path'].replace(base + '/', '')}` | {r['requests']:,} | {r['errors']} | {r['rps']:.0f} | "
                  f"{r['p50_ms']:.1f} | {r['p99_ms']:.1f} | {r['max_ms']:.1f} |")
        return 0
    finally:
        for proc in reversed(procs):
            stop(proc)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
