#!/usr/bin/env python3
"""A partition in one `serve` cycle: RSEs of a stated spread of dump sizes (default 1 x 1M, 5 x 100k, 30 x 10k,
114 x 1k lines: issue 29's partition scaled down ten times, so it runs in minutes here) planned, recorded and
submitted by one Service.cycle (the `serve` loop's code path: `service.parallel_rses` RSEs at a time) on the
embedded default database, dry run, local backend, with a protected list of ~4,500 bases (issue 29's size).

Measured: the cycle's wall time; each RSE's run and its time to first submitted job (from the start of its run);
peak RSS of this process (`serve`'s part) and of SecantusDB (not of the workers, short dry-run processes); the
database folder's size; `/metrics` render time after the cycle; CPU seconds in the cycle of this process, of its
workers (children reaped) and of SecantusDB; how many child processes ran at once (sampled every 0.2 s); how many
workers started in the cycle (their pid files) and at which niceness (`jobs.local_nice`); the database commands
sent in the cycle per RSE (pymongo's command monitoring: round trips, `commands_per_rse`); the cycle's log lines about
its RSE threads (`cycle_threads_log`: the hold for the largest RSE's first batch, its start and end). With `--before SRC` the same cycle first runs
with another checkout's code (e.g. /work/main/src/python) in a child process: before/after in one command.

    python3 bench/bench_partition.py [--spread 1000000x1,100000x5,10000x30,1000x114] [--before SRC] [--parallel-rses N]

`--parallel-rses 1` runs one RSE at a time: a small RSE's own cost, without the others' competition for the cores.
The cycle's wall time and CPU are also given per RSE (`cycle_s_per_rse`, `cpu_ms_per_rse`).
"""
from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
_SRC = sys.argv[sys.argv.index("--src") + 1] if "--src" in sys.argv else str(REPO / "src" / "python")
sys.path.insert(0, _SRC)
sys.path.insert(1, str(REPO / "bench"))

import argparse  # noqa: E402
import json  # noqa: E402
import logging  # noqa: E402
import os  # noqa: E402
import shutil  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
from collections import Counter  # noqa: E402
from typing import Any  # noqa: E402

from pymongo import monitoring  # noqa: E402

from MSUnmerged import sample  # noqa: E402
from MSUnmerged.config import Config  # noqa: E402
from MSUnmerged.ledger import LIVE_JOB_STATES  # noqa: E402
from MSUnmerged.rest import metrics  # noqa: E402
from MSUnmerged.sources.offline import OfflineSources  # noqa: E402
from MSUnmerged.wiring import build_service  # noqa: E402
from MSUnmerged.worker.ids import PID_NAME  # noqa: E402

import bench_scale  # noqa: E402  (after MSUnmerged: the code of --src is the one imported)
from procstat import cpu_s  # noqa: E402
from seam import backend_of, runner_of  # noqa: E402

PROTECTED_BASES_OF = 30_000_000  # a sample of this many files has ~4,500 protected bases, issue 29's list


def vm_hwm_mib(pid: int | str) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return round(int(line.split()[1]) / 1024, 1)
    raise RuntimeError(f"no VmHWM for {pid}")


def _running(pid: str) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:  # ended meanwhile
        return False


class Children:
    """Samples how many child processes this process has running (the local backend's workers and the database;
    not the zombies of workers that ended and were not reaped yet), every 0.2 s."""

    def __init__(self) -> None:
        self.counts: list[int] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        tasks = Path(f"/proc/{os.getpid()}/task")
        while not self._stop.wait(0.2):
            try:
                pids = [pid for t in tasks.iterdir() for pid in (t / "children").read_text().split()]
            except OSError:  # a thread ended while read
                continue
            self.counts.append(sum(1 for pid in pids if _running(pid)))

    def __enter__(self) -> "Children":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


class Commands(monitoring.CommandListener):
    """Counts the database commands this process sends while `on` (every thread: the runs, the leases' heartbeat),
    by (command, collection): a small RSE's round trips."""

    def __init__(self) -> None:
        self.counts: Counter[tuple[str, str]] = Counter()
        self.on = False

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        if self.on:
            target = event.command.get(event.command_name)
            self.counts[(event.command_name, target if isinstance(target, str) else "")] += 1

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass


COMMANDS = Commands()
monitoring.register(COMMANDS)  # before any client is made: every client of this process reports to it


class CycleThreadsLog(logging.Handler):
    """Keeps the cycle's log lines about its RSE threads (a hold's start and end)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if "RSE thread" in (msg := record.getMessage()):
            self.lines.append(msg)


def spread_of(text: str) -> list[tuple[int, int]]:
    """"1000000x1,1000x114" -> [(lines, RSEs), ...]."""
    return [(int(lines), int(n)) for lines, n in (part.split("x") for part in text.split(","))]


def deletable_sample(lines: int) -> tuple[sample.SampleSpec, sample.Sample]:
    """A sample with a dataset not protected at all (small dumps: smaller datasets, so they hold several)."""
    for seed in range(lines, lines + 1000):
        spec = sample.SampleSpec(files=lines, seed=seed, files_per_block=250 if lines >= 100_000 else 25)
        smp = sample.make_sample(spec)
        if any(not any(p.rstrip("/").startswith(b) for p in smp.protected) for b in smp.dataset_bases):
            return spec, smp
    raise SystemExit(f"bench_partition: no seed gives a deletable {lines}-line dump")


def inputs(data: Path, spread: list[tuple[int, int]]) -> tuple[Path, list[str], dict[str, int]]:
    """OfflineSources' folder: one generated dump per size (RSEs of a size share it), the protected list, a scan
    of each RSE that just finished. Returns it, the RSE names (largest first) and each RSE's lines."""
    src = data / "partition-sources"
    shutil.rmtree(src, ignore_errors=True)
    (src / "dumps").mkdir(parents=True)
    protected = set(sample.make_sample(sample.SampleSpec(files=PROTECTED_BASES_OF)).protected)
    stats, lines_of, names = {}, {}, []
    for lines, count in spread:
        dump = data / f"partition-{lines}.txt"
        spec, smp = deletable_sample(lines)
        if not dump.exists():
            sample.write_dump(spec, smp, dump)
        protected.update(smp.protected)
        for k in range(count):
            rse = f"T2_XX_P{lines}_{k:03d}"
            (src / "dumps" / f"{rse}.txt").symlink_to(dump.resolve())
            stats.update(sample.stats_for(rse, lines))
            lines_of[rse] = lines
            names.append(rse)
    (src / "protected.json").write_text(json.dumps({"result": sorted(protected)}))
    (src / "stats.json").write_text(json.dumps(stats))
    return src, names, lines_of


def bench_config(state: Path) -> Config:
    """bench_scale's setup (embedded database, dry run, local backend) with the shipped parallelism."""
    config = bench_scale.bench_config(state)
    config.jobs.local_parallel = Config().jobs.local_parallel
    return config


def du_mib(path: Path) -> float:
    return round(sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) / 2**20, 1)


def one_cycle(data: Path, spread: list[tuple[int, int]], parallel_rses: int | None = None) -> dict[str, Any]:
    src, names, lines_of = inputs(data, spread)
    work = data / "partition-run"
    shutil.rmtree(work, ignore_errors=True)
    state = work / "state"
    config = bench_config(state)
    if parallel_rses is not None:
        config.service.parallel_rses = parallel_rses
    row: dict[str, Any] = {"code": _SRC, "spread": spread, "rses": len(names), "lines": sum(lines_of.values()),
                           "protected_bases": len(json.loads((src / "protected.json").read_text())["result"]),
                           "parallel_rses": config.service.parallel_rses, "load_before": round(os.getloadavg()[0], 2)}
    marks: dict[tuple[str, str], float] = {}
    lock = threading.Lock()

    def hook(step: str, rse: str) -> None:
        with lock:
            marks.setdefault((step, rse), time.perf_counter())
    # The cycle's own lines about its threads (the hold for the largest RSE's first batch, where the code has one).
    threads_log = CycleThreadsLog()
    loop_log = logging.getLogger("MSUnmerged.service.loop")
    loop_log.addHandler(threads_log)
    loop_log.setLevel(logging.INFO)
    try:
        with build_service(config, sources=OfflineSources(src)) as service:
            db_pid = json.loads((state / "db.json").read_text())["pid"]
            runner_of(service).hook = hook
            t, cpu0, db0 = time.perf_counter(), os.times(), cpu_s(db_pid)
            COMMANDS.counts.clear()
            COMMANDS.on = True
            with Children() as children:
                results = service.cycle(names)
            COMMANDS.on = False
            row["cycle_s"] = round(time.perf_counter() - t, 1)
            row["cycle_s_per_rse"] = round(row["cycle_s"] / len(names), 3)
            cpu1 = os.times()
            # CPU in the cycle: this process (serve's part), its reaped children (the workers that ended; the
            # database is a child that has not ended, so it is not among them) and SecantusDB.
            row["cpu_s"] = {"serve": round(cpu1.user + cpu1.system - cpu0.user - cpu0.system, 1),
                            "workers": round(cpu1.children_user + cpu1.children_system
                                             - cpu0.children_user - cpu0.children_system, 1),
                            "secantusdb": round(cpu_s(db_pid) - db0, 1)}
            row["cpu_ms_per_rse"] = {who: round(1000 * sec / len(names)) for who, sec in row["cpu_s"].items()}
            # Database round trips in the cycle, per RSE, and the kinds that make most of them.
            row["commands_per_rse"] = round(sum(COMMANDS.counts.values()) / len(names), 1)
            row["commands_per_rse_by_kind"] = {f"{cmd} {coll}": round(n / len(names), 1)
                                               for (cmd, coll), n in COMMANDS.counts.most_common(12)}
            row["children"] = {"max": max(children.counts, default=0),
                               "mean": round(statistics.fmean(children.counts), 1) if children.counts else 0}
            # Workers started in the cycle (each wrote its pid file) and how nice they ran (the code of --before may
            # have no such setting).
            row["workers_started"] = sum(1 for _ in (config.state_dir / "local-jobs").glob(f"*/{PID_NAME}"))
            row["local_nice"] = getattr(config.jobs, "local_nice", None)
            bad = {r: (res.action, res.reason) for r, res in results.items() if not res.submitted}
            if bad or len(results) != len(names):
                raise SystemExit(f"bench_partition: RSEs without jobs or unfinished: {bad or len(results)}")
            row["jobs"] = sum(res.submitted for res in results.values())
            per_size: dict[int, dict[str, list[float]]] = {}
            for rse in names:
                begin = marks[("reconciled", rse)]
                got = per_size.setdefault(lines_of[rse], {"run_s": [], "first_job_s": []})
                got["run_s"].append(results[rse].seconds)
                got["first_job_s"].append(marks[("submitted", rse)] - begin)
            # The cycle's start order: when the largest started (s after the cycle began), and the run times summed
            # (the cycle's floor is that sum / parallel_rses or the largest run, if longer).
            largest = max(names, key=lambda r: (lines_of[r], r))
            row["largest_start_s"] = round(marks[("reconciled", largest)] - t, 1)
            row["run_s_sum"] = round(sum(results[r].seconds for r in names), 1)
            row["by_size"] = {lines: {"rses": len(v["run_s"]), "run_s_median": round(statistics.median(v["run_s"]), 2),
                                      "run_s_max": round(max(v["run_s"]), 2),
                                      "first_job_s_median": round(statistics.median(v["first_job_s"]), 2),
                                      "run_s_sum": round(sum(v["run_s"]), 1)}
                              for lines, v in sorted(per_size.items(), reverse=True)}
            # Workers are not counted: a forked child's ru_maxrss starts at its parent's, so it says nothing of them.
            row["peak_rss_mib"] = {"serve": vm_hwm_mib("self"), "secantusdb": vm_hwm_mib(db_pid)}
            view = service.ledger.view()
            walls = []
            for _ in range(10):
                m = time.perf_counter()
                metrics.render(view, config)
                walls.append((time.perf_counter() - m) * 1000)
            row["metrics_ms_median"] = round(statistics.median(walls), 1)
            for rse in names:  # nothing keeps running after the benchmark
                for job in service.ledger.base.jobs_in(rse, LIVE_JOB_STATES):
                    if job.get("batch_id"):
                        backend_of(service).remove(job["_id"], job["batch_id"], "benchmark over")
        row["db_mib"] = du_mib(state / "db") if (state / "db").exists() else du_mib(state)
        row["cycle_threads_log"] = threads_log.lines
    finally:
        loop_log.removeHandler(threads_log)
        shutil.rmtree(work, ignore_errors=True)
    row["load_after"] = round(os.getloadavg()[0], 2)
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spread", default="1000000x1,100000x5,10000x30,1000x114", help="LINESxRSES,...")
    ap.add_argument("--data", default=str(REPO / "bench" / "data"))
    ap.add_argument("--src", help="the src/python whose code runs (default: this checkout's)")
    ap.add_argument("--before", help="run the same cycle first with this src/python, in a child process")
    ap.add_argument("--parallel-rses", type=int, help="RSEs at a time (default: the shipped service.parallel_rses)")
    args = ap.parse_args()
    data = Path(args.data)
    data.mkdir(parents=True, exist_ok=True)
    if args.before:
        same = ["--parallel-rses", str(args.parallel_rses)] if args.parallel_rses is not None else []
        subprocess.run([sys.executable, __file__, "--spread", args.spread, "--data", args.data, "--src", args.before,
                        *same], check=True)
    print(json.dumps(one_cycle(data, spread_of(args.spread), args.parallel_rses)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
