#!/usr/bin/env python3
"""The biggest RSE end to end on the embedded default database: a generated dump of N lines planned,
recorded and its first round of jobs submitted by one Runner.run_once (the code path of `msunmerged
clean --apply` and the polling loop), then some jobs collected, then every operator query under load.

Per size: wall time of each run_once step (hooks), the database server's peak RSS (VmHWM of its
secantusd process, at each step, after run_once and after the queries), outcome writes per second, and with
`--queries` the operator-query latencies (bench_rest.measure: REST and the CLI's code path). Sizes
run in the same command are each other's baseline (e.g. 1M against 10M), and planning alone (the
`plan` phase) is the baseline of the whole.

Setup as `msunmerged` with no mongo.url: SecantusDB started by EmbeddedMongo in the run's state
folder, file-based sources (OfflineSources: the dump, protected list and a fresh stats.json), the
local batch backend in dry run (1 worker at a time; jobs left queued are removed at the end). Inputs
are bench_plan.py's generated dumps in bench/data/<lines>-txt.

With `--apply`: per size, `msunmerged run` against `msunmerged apply` of the same dump instead, each in its
own process (the commands' code path with OfflineSources) on a fresh ledger: the process's wall time and peak
RSS and its database's peak RSS; run's planning, recording and submission, and their ratio; the plan applied
is written by `msunmerged plan` with the same scan, protected list and configuration.

Usage: python3 bench/bench_scale.py [--sizes 1000000,10000000] [--queries 10000000] [--quick] [--apply]
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Optional

REPO = Path(__file__).resolve().parents[1]
SRC = sys.argv[sys.argv.index("--src") + 1] if "--src" in sys.argv else str(REPO / "src" / "python")
sys.path.insert(0, SRC)

import MSUnmerged  # noqa: E402  (first: the bench modules below put this checkout's code on the path)
import bench_plan  # noqa: E402
import bench_rest  # noqa: E402
import ledgersim  # noqa: E402

from MSUnmerged import sample  # noqa: E402
from MSUnmerged.config import Config  # noqa: E402
from MSUnmerged.jobs.backend import JobState  # noqa: E402
from MSUnmerged.ledger import LIVE_JOB_STATES, Ledger  # noqa: E402
from MSUnmerged.service import STEPS  # noqa: E402
from MSUnmerged.sources.offline import OfflineSources  # noqa: E402
from MSUnmerged.wiring import build_service  # noqa: E402
from seam import backend_of, runner_of  # noqa: E402

RSE = bench_plan.RSE
KEPT = "kept.json"
MIB = 1024 * 1024
TARGET_S, TARGET_RSS_MIB, TARGET_P99_MS = 180.0, 1024.0, 100.0
APPLY_TIME_RATIO, APPLY_RSS_MIB, RECORD_RATIO = 1.2, 512.0, 5.0  # issue 29: apply against run; recording


def vm_hwm_mib(pid: int) -> float:
    """Peak resident memory of a process so far (VmHWM)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmHWM for pid {pid}")


def sources_dir(inputs: Path, work: Path) -> Path:
    """OfflineSources' layout over the generated inputs, with a scan that just finished."""
    src = work / "sources"
    (src / "dumps").mkdir(parents=True)
    (src / "dumps" / f"{RSE}.txt").symlink_to((inputs / "dump.txt").resolve())
    (src / "protected.json").symlink_to((inputs / "protected.json").resolve())
    lines = json.loads((inputs / "stats.json").read_text())[RSE]["files"]
    (src / "stats.json").write_text(json.dumps(sample.stats_for(RSE, lines)))
    return src


def bench_config(state: Path) -> Config:
    config = Config()
    config.service.state_dir = str(state)
    config.service.dry_run = True
    config.mongo.url = ""  # the embedded default
    config.jobs.backend = "local"
    config.jobs.local_parallel = 1
    config.jobs.max_in_flight = 0  # every round-1 job goes out in the first run_once, as measured before the cap
    config.guards.max_delete_fraction = 1.0  # the generated RSE is 70 % deletable
    return config


def run_cli(state: Path, *argv: str, src: str = SRC) -> float:
    """Wall seconds of one `msunmerged` command on the run's ledger (process start included)."""
    env = {**os.environ, "MSUNMERGED_SERVICE__STATE_DIR": str(state), "MSUNMERGED_MONGO__URL": "",
           "MSUNMERGED_GUARDS__MAX_DELETE_FRACTION": "1.0",  # as bench_config
           "PYTHONPATH": src}
    t = time.perf_counter()
    subprocess.run([sys.executable, "-m", "MSUnmerged.cli", *argv], env=env, check=True, capture_output=True)
    return time.perf_counter() - t


def command(kind: str, work: Path) -> None:
    """In a child process: `msunmerged run --rse RSE` or `msunmerged apply work/plan` on a fresh ledger under
    `work`; prints its figures as JSON, with its own peak RSS and its database's."""
    sources = OfflineSources(work / "sources")
    state = work / f"state-{kind}"
    marks: dict[str, float] = {}
    rss: dict[str, float] = {}  # this process's peak RSS when each step is first reached
    db_rss_by_step: dict[str, float] = {}  # its database's
    with build_service(bench_config(state), sources=sources) as service:
        db_pid = json.loads((state / "db.json").read_text())["pid"]

        def hook(step: str, rse: str) -> None:
            marks.setdefault(step, time.perf_counter())
            rss.setdefault(step, round(vm_hwm_mib(os.getpid()), 1))
            db_rss_by_step.setdefault(step, round(vm_hwm_mib(db_pid), 1))
        runner_of(service).hook = hook
        start = time.perf_counter()
        if kind == "run":
            result = runner_of(service).run_once(RSE)
        else:
            result = runner_of(service).apply_plan(work / "plan", sources.protected())
        took = time.perf_counter() - start
        assert result.submitted, result
        gen = service.ledger.base.rse(RSE)["generation"]
        for job in service.ledger.base.jobs_in(RSE, LIVE_JOB_STATES, gen):  # nothing keeps running after it
            backend_of(service).remove(job["_id"], job["batch_id"], "benchmark over")
        db_rss = vm_hwm_mib(db_pid)
    print(json.dumps({"code": str(Path(MSUnmerged.__file__).parents[1]), "seconds": round(took, 2), "jobs": result.submitted, "peak_rss_mib": vm_hwm_mib(os.getpid()),
                      "db_peak_rss_mib": db_rss, "marks_s": {step: round(t - start, 2) for step, t in marks.items()},
                      "peak_rss_by_step_mib": rss, "db_peak_rss_by_step_mib": db_rss_by_step}))


def in_child(kind: str, work: Path, src: str) -> dict[str, Any]:
    """`command` in its own process with the code of `src`: its figures and wall time (process start included)."""
    t = time.perf_counter()
    res = subprocess.run([sys.executable, __file__, "--child", kind, str(work), "--src", src], capture_output=True,
                         text=True)
    if res.returncode:
        raise SystemExit(f"bench_scale: {kind} failed: {res.stderr.strip()[-2000:]}")
    row = json.loads(res.stdout.strip().splitlines()[-1])
    row["process_s"] = round(time.perf_counter() - t, 2)
    return row


def run_vs_apply(lines: int, data: Path, code: str) -> dict[str, Any]:
    """`msunmerged run` and `msunmerged apply` of the same dump with the code of `code` (a src/python), each in
    its own process on its own ledger."""
    inputs = bench_plan.inputs(data, lines)
    work = data / f"apply-{lines}"
    shutil.rmtree(work, ignore_errors=True)
    row: dict[str, Any] = {"lines": lines, "code": code, "load_before": round(os.getloadavg()[0], 2)}
    try:
        src = sources_dir(inputs, work)
        row["run"] = in_child("run", work, code)
        row["plan_cli_s"] = round(run_cli(work / "state-plan", "plan", "--rse", RSE, "--dump",
                                          str(src / "dumps" / f"{RSE}.txt"), "--protected", str(src / "protected.json"),
                                          "--stats", str(src / "stats.json"), "--out", str(work / "plan"), src=code), 2)
        row["apply"] = in_child("apply", work, code)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    run = row["run"]
    plan = run["marks_s"]["planned"] - run["marks_s"]["polled"]
    row["record_over_plan"] = round((run["marks_s"]["recorded"] - plan) / plan, 2)
    row["record_submit_over_plan"] = round((run["marks_s"]["counted"] - plan) / plan, 2)
    row["apply_over_run"] = round(row["apply"]["seconds"] / run["seconds"], 2)
    row["load_after"] = round(os.getloadavg()[0], 2)
    print(json.dumps(row), flush=True)
    return row


def one_size(lines: int, data: Path, collect_jobs: int, queries: bool, clients: list[int], seconds: float,
             cycles: int, keep: bool = False, pages_only: bool = False, before: Optional[str] = None) -> dict[str, Any]:
    """Run, collect and measure one size. `keep`: the ledger stays in data/scale-<lines> (with kept.json naming
    the queries' target), and a later run with `keep` measures the queries on it without recording again."""
    inputs = bench_plan.inputs(data, lines)
    work = data / f"scale-{lines}"
    kept = work / KEPT
    if keep and kept.exists():
        return queries_on_kept(work, json.loads(kept.read_text()), clients, seconds, pages_only, before)
    shutil.rmtree(work, ignore_errors=True)
    state = work / "state"
    config = bench_config(state)
    marks: dict[str, float] = {}
    row: dict[str, Any] = {"lines": lines, "load_before": round(os.getloadavg()[0], 2)}
    try:
        with build_service(config, sources=OfflineSources(sources_dir(inputs, work))) as service:
            db_pid = json.loads((state / "db.json").read_text())["pid"]
            rss: dict[str, float] = {}
            serve_rss: dict[str, float] = {}  # this process's peak RSS when each step is first reached

            def hook(step: str, rse: str) -> None:
                marks.setdefault(step, time.perf_counter())
                rss.setdefault(step, round(vm_hwm_mib(db_pid), 1))
                serve_rss.setdefault(step, round(vm_hwm_mib(os.getpid()), 1))
            runner_of(service).hook = hook
            start = time.perf_counter()
            result = runner_of(service).run_once(RSE)
            total = time.perf_counter() - start
            assert result.action == "new_generation" and result.submitted, result
            phases, last = {}, start
            for step in STEPS:
                if step in marks:
                    phases[step] = round(marks[step] - last, 2)
                    last = marks[step]
            ledger = service.ledger
            gen = ledger.base.rse(RSE)["generation"]
            row.update(files_to_delete=ledger.base.generation_entry(RSE, gen)["to_delete"], jobs=result.submitted,
                       run_once_s=round(total, 1), phases_s=phases, plan_share=round(phases["planned"] / total, 3),
                       db_peak_rss_mib=round(vm_hwm_mib(db_pid), 1), db_peak_rss_by_step_mib=rss,
                       peak_rss_by_step_mib=serve_rss)
            print(json.dumps(row), flush=True)

            jobs = [j["_id"] for j in ledger.base.jobs_in(RSE, [JobState.QUEUED], gen)][:collect_jobs]
            t = time.perf_counter()
            n = ledgersim.collect(ledger, jobs)
            row["collect"] = {"jobs": len(jobs), "files": n, "s": round(time.perf_counter() - t, 2),
                              "files_per_s": round(n / (time.perf_counter() - t))}
            t = time.perf_counter()
            ledger.counters.refresh_counters(RSE)
            row["refresh_counters_s"] = round(time.perf_counter() - t, 2)
            print(json.dumps({"lines": lines, "collect": row["collect"],
                              "refresh_counters_s": row["refresh_counters_s"]}), flush=True)
            target = bench_rest.find_target(ledger, RSE, jobs[0])
            if queries or keep:
                ledgersim.cycles(ledger, cycles, [RSE])
            if queries:
                row["cli_process_s"] = {"status --rse": round(run_cli(state, "status", "--rse", RSE), 2),
                                        "files --error-class": round(run_cli(state, "files", "--rse", RSE,
                                                                             "--error-class", target.error_class), 2)}
                row["queries"] = measure_queries(ledger.base.db, state, work, target, clients, seconds, pages_only,
                                                 before)
                row["db_peak_rss_after_queries_mib"] = round(vm_hwm_mib(db_pid), 1)
            for job in ledger.base.jobs_in(RSE, LIVE_JOB_STATES, gen):  # nothing keeps running after the benchmark
                backend_of(service).remove(job["_id"], job["batch_id"], "benchmark over")
        if keep:
            kept.write_text(json.dumps({"row": row, "target": dataclasses.asdict(target)}))
    finally:
        if not keep:
            shutil.rmtree(work, ignore_errors=True)
    row["load_after"] = round(os.getloadavg()[0], 2)
    return row


def measure_queries(db: Any, state: Path, work: Path, target: Any, clients: list[int], seconds: float,
                    pages_only: bool, before: Optional[str]) -> list[dict[str, Any]]:
    """bench_rest.measure at each client count against `msunmerged serve` on this ledger; with `before`, the
    REST rows of a second server running that src/python's code, in the same minutes."""
    env = {"MSUNMERGED_SERVICE__STATE_DIR": str(state), "MSUNMERGED_MONGO__URL": ""}
    proc, port = bench_rest.start_serve(env, work / "serve.log")
    old = bench_rest.start_serve(env, work / "serve-before.log", src=before) if before else None
    pids = {"db": json.loads((state / "db.json").read_text())["pid"], "rest": proc.pid,
            **({"rest (before)": old[0].pid} if old else {})}
    try:
        return [row for n in clients for row in bench_rest.measure(
            Ledger(db).view(), port, target, n, seconds, pages_only=pages_only, before_port=old and old[1],
            pids=pids)]
    finally:
        bench_rest.stop(proc)
        if old:
            bench_rest.stop(old[0])


def queries_on_kept(work: Path, kept: dict[str, Any], clients: list[int], seconds: float, pages_only: bool,
                    before: Optional[str]) -> dict[str, Any]:
    """The operator queries on a ledger kept by an earlier `--keep` run (its row, plus the queries)."""
    row = {**kept["row"], "load_before": round(os.getloadavg()[0], 2), "reused": str(work)}
    state = work / "state"
    with build_service(bench_config(state), sources=OfflineSources(work / "sources")) as service:
        row["queries"] = measure_queries(service.ledger.base.db, state, work, bench_rest.Target(**kept["target"]),
                                         clients, seconds, pages_only, before)
    row["load_after"] = round(os.getloadavg()[0], 2)
    return row


def summary(rows: list[dict[str, Any]]) -> str:
    out = ["| lines | files to delete | jobs | run_once s | plan | record | jobs+intent | submit | counters | "
           "DB peak RSS MiB | collect files/s | load |", "|" + "---|" * 12]
    for r in rows:
        p = r["phases_s"]
        steps = " | ".join(str(p.get(step)) for step in ("planned", "recorded", "intent", "submitted", "counted"))
        out.append(f"| {r['lines']:,} | {r['files_to_delete']:,} | {r['jobs']:,} | {r['run_once_s']} | {steps} | "
                   f"{r['db_peak_rss_mib']} | {r['collect']['files_per_s']:,} | {r['load_before']}-{r['load_after']} |")
    if len(rows) > 1:
        a, b = rows[0], rows[-1]
        out.append(f"\n{b['lines']:,} vs {a['lines']:,} lines: run_once {b['run_once_s'] / a['run_once_s']:.1f}x for "
                   f"{b['lines'] / a['lines']:.0f}x the lines; "
                   f"DB RSS {b['db_peak_rss_mib'] / a['db_peak_rss_mib']:.1f}x")
    for r in rows:
        if "queries" in r:
            where = f"on the kept ledger {r['reused']}" if "reused" in r else \
                f"DB peak RSS after them {r['db_peak_rss_after_queries_mib']} MiB; one CLI process: {r['cli_process_s']}"
            out += [f"\nOperator queries at {r['lines']:,} lines ({where}; load {r['load_before']}-{r['load_after']}):\n",
                    bench_rest.table(r["queries"])]
    return "\n".join(out)


def apply_summary(rows: list[dict[str, Any]]) -> str:
    out = ["| lines | jobs | run s | run RSS MiB | run DB RSS MiB | apply s | apply RSS MiB | apply DB RSS MiB | "
           "apply / run | plan s | record s | record / plan | record+submit / plan | load |", "|" + "---|" * 14]
    for r in rows:
        run, apply, m = r["run"], r["apply"], r["run"]["marks_s"]
        out.append(f"| {r['lines']:,}{' (before)' if r['code'] != SRC else ''} | {run['jobs']:,} | {run['seconds']} | {run['peak_rss_mib']:.0f} | "
                   f"{run['db_peak_rss_mib']:.0f} | {apply['seconds']} | {apply['peak_rss_mib']:.0f} | "
                   f"{apply['db_peak_rss_mib']:.0f} | {r['apply_over_run']} | {round(m['planned'] - m['polled'], 2)} | "
                   f"{round(m['recorded'] - m['planned'], 2)} | {r['record_over_plan']} | {r['record_submit_over_plan']} | "
                   f"{r['load_before']}-{r['load_after']} |")
    marks = ("planned", "recorded", "intent", "counted")
    out += ["\nSeconds from each command's start to each step (apply's `planned`: its plan checked, the dump planned "
            "again and compared; `intent`: the first submission batch):\n",
            "| lines | command | " + " | ".join(marks) + " |", "|" + "---|" * (2 + len(marks))]
    for r in rows:
        for kind in ("run", "apply"):
            out.append(f"| {r['lines']:,}{' (before)' if r['code'] != SRC else ''} | {kind} | "
                       + " | ".join(str(r[kind]["marks_s"].get(m, "")) for m in marks) + " |")
    big = rows[-1]
    out.append(f"\ntargets at {big['lines']:,} lines: apply / run {big['apply_over_run']} (<= {APPLY_TIME_RATIO}), apply "
               f"RSS {big['apply']['peak_rss_mib']:.0f} MiB (< {APPLY_RSS_MIB:.0f}); recording / planning "
               f"{big['record_over_plan']} (<= {RECORD_RATIO})")
    return "\n".join(out)


def main(argv: Optional[list[str]] = None) -> int:
    if argv is None and sys.argv[1:2] == ["--child"]:  # --child KIND WORK --src SRC
        command(sys.argv[2], Path(sys.argv[3]))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1000000,10000000", help="dump lines, comma-separated")
    ap.add_argument("--queries", default="", help="sizes at which to measure the operator queries "
                                                  "(default: the largest)")
    ap.add_argument("--collect-jobs", type=int, default=50, help="jobs collected (outcomes recorded) per size")
    ap.add_argument("--clients", default="20", help="concurrent clients, comma-separated: each count in turn")
    ap.add_argument("--keep", action="store_true", help="keep each size's ledger in DATA/scale-<lines>; with one "
                                                         "kept already, measure the queries on it (no recording)")
    ap.add_argument("--pages", action="store_true", help="only the per-file pages and their engine floors")
    ap.add_argument("--seconds", type=float, default=10.0, help="per query and path")
    ap.add_argument("--cycles", type=int, default=720, help="polling cycles recorded before the queries "
                                                            "(720: 30 days, hourly)")
    ap.add_argument("--data", default=str(REPO / "bench" / "data"))
    ap.add_argument("--quick", action="store_true", help="sizes 100,000 and 1,000,000, 5 s per query")
    ap.add_argument("--apply", action="store_true", help="`msunmerged run` against `msunmerged apply` instead")
    ap.add_argument("--src", default=SRC, help="the src/python whose code runs (default: this checkout's)")
    ap.add_argument("--before", help="with --apply: each size first with this src/python (before/after in one run); "
                                     "with the queries: a second REST server runs its code beside this checkout's")
    args = ap.parse_args(argv)
    if args.quick:
        args.sizes, args.seconds, args.collect_jobs, args.cycles = "100000,1000000", 5.0, 10, 100
    sizes = [int(s) for s in args.sizes.split(",")]
    if args.apply:
        rows = [run_vs_apply(n, Path(args.data), code) for n in sizes
                for code in ([args.before] if args.before else []) + [SRC]]
        Path(args.data, "results-apply.json").write_text(json.dumps(rows, indent=1))
        print(apply_summary(rows))
        return 0
    with_queries = {int(s) for s in args.queries.split(",") if s} or {max(sizes)}
    clients = [int(c) for c in args.clients.split(",")]
    rows = [one_size(n, Path(args.data), args.collect_jobs, n in with_queries, clients, args.seconds,
                     args.cycles, args.keep, args.pages, args.before)
            for n in sizes]
    Path(args.data, "results-scale.json").write_text(json.dumps(rows, indent=1))
    print(summary(rows))
    big = rows[-1]
    p99 = max((q["p99_ms"] for q in big.get("queries", [])), default=0.0)
    print(f"\ntargets at {big['lines']:,} lines: run_once {big['run_once_s']} s (< {TARGET_S:.0f}), DB RSS "
          f"{big['db_peak_rss_mib']} MiB (< {TARGET_RSS_MIB:.0f}), worst p99 {p99} ms (< {TARGET_P99_MS:.0f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
