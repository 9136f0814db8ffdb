#!/usr/bin/env python3
"""Planning benchmark: lines/s and peak RSS at 1M and 10M lines, plain and gzip, against a
plain per-line Python loop (the baseline) run by the same command; for gzip dumps also the
ratio of planning time to decompressing the same file (standard gzip module and ISA-L), in the same run.
The planner runs with each planlines engine side by side: "compiled" (the C extension, when built)
and "pure" (regular expressions: planner.engine = "pure"); the first listed is the one reported
as lines/s and peak RSS.

The floors, in the same rounds, each in its own process: writing files of the plan's sizes into a new folder beside
the plan (`floor_write`), and the same while the dump is inflated with the planner's inflater (`floor_read_write`),
the least any planner that reads this dump and writes this plan can take; ratios planner / floor.

With `--before SRC` (another tree's src/python, its C extension built in place), that tree's planner
runs with the first engine too, in the same rounds just before this one: figures before and after in one run.

Each measurement runs in its own process so that its peak RSS (VmHWM) is its own.
Usage: python3 bench/bench_plan.py [--sizes 1000000,10000000] [--formats plain,gzip] [--rounds 1]
                                   [--engines compiled,pure] [--before /work/main/src/python]
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

REPO = Path(__file__).resolve().parents[1]
SRC_ENV = "BENCH_PLAN_SRC"  # the package tree a child imports (--before's, else this one's)
sys.path.insert(0, os.environ.get(SRC_ENV, str(REPO / "src" / "python")))

from MSUnmerged import sample  # noqa: E402

RSE = "T2_XX_Bench"


def peak_rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def measure_planner(dump: str, protected: str, stats: str, out: str, engine: str) -> dict:
    from MSUnmerged import planlines, planner, seal
    from MSUnmerged.config import Config
    from MSUnmerged.dumpreader import INFLATER, iter_chunks

    config = Config()
    config.guards.max_delete_fraction = 1.0
    config.planner.engine = engine
    prot = json.loads(Path(protected).read_text())["result"]
    st = json.loads(Path(stats).read_text())[RSE]
    wall, cpu = time.perf_counter(), time.process_time()
    plan = planner.plan(RSE, iter_chunks(dump), prot, config, out, stats=st)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    assert plan.guard is None, plan.guard_detail
    sealed = seal.read_seal(out).files
    sealed.pop(seal.SUMMARY_NAME)  # its timings differ from run to run
    return {"lines": plan.files_total, "to_delete": plan.files_to_delete, "wall_s": wall, "cpu_s": cpu,
            "plan_sha256": seal.sha256(json.dumps(sealed, sort_keys=True).encode()),
            "peak_rss_mib": peak_rss_mib(), "inflater": INFLATER.__name__, "engine": planlines.engine(engine).name}


def measure_baseline(dump: str, protected: str, stats: str, out: str) -> dict:
    """A straightforward planner: decode each line, validate, walk its ancestors, write it out."""
    import gzip

    from MSUnmerged.lfn import PrefixSet, classify_line

    prot = PrefixSet(json.loads(Path(protected).read_text())["result"])
    opener = gzip.open if Path(dump).read_bytes()[:2] == b"\x1f\x8b" else open
    n = kept = 0
    wall, cpu = time.perf_counter(), time.process_time()
    with opener(dump, "rb") as fh, open(out + ".baseline", "wb") as sink:  # type: ignore[operator]
        for raw in fh:
            n += 1
            line, reason = classify_line(raw, 1024)
            if line is not None and not prot.covers(line):
                sink.write(line + b"\n")
                kept += 1
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    os.unlink(out + ".baseline")
    return {"lines": n, "to_delete": kept, "wall_s": wall, "cpu_s": cpu, "peak_rss_mib": peak_rss_mib()}


BLOCK_BYTES = 4 * 1024 * 1024


def read_blocks(dump: str, inflater: str) -> Iterator[bytes]:
    """The dump's bytes, inflated with `inflater` ("gzip": the standard module, "isal": ISA-L), or read as they
    are ("plain"), in blocks."""
    if inflater == "isal":
        from isal.igzip import open as opener
    elif inflater == "gzip":
        from gzip import open as opener  # type: ignore[assignment]
    else:
        opener = open  # type: ignore[assignment]
    with opener(dump, "rb") as fh:  # type: ignore[operator]
        while True:
            block = fh.read(BLOCK_BYTES)
            if not block:
                return
            yield block


def measure_decompress(dump: str, inflater: str) -> dict:
    """Decompress the whole file and drop the bytes: the floor for any planner that reads it."""
    n = 0
    wall, cpu = time.perf_counter(), time.process_time()
    for block in read_blocks(dump, inflater):
        n += len(block)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return {"bytes": n, "wall_s": wall, "cpu_s": cpu, "peak_rss_mib": peak_rss_mib()}


def write_files(out: str, sizes: list[int], blocks: Iterator[bytes]) -> float:
    """Create one new file in `out` per size and write it that many bytes taken in order from `blocks`
    (filler bytes once they run out): what any planner must do with a plan of these files. Returns the
    seconds spent creating the files. The files are placed as the planner places its job files: in a new folder of a
    random name in `out`, marked as the top of unrelated trees (planner.spread_subdirs)."""
    from MSUnmerged.planner import spread_subdirs

    os.mkdir(out)
    spread_subdirs(Path(out))
    out = os.path.join(out, os.urandom(8).hex())
    os.mkdir(out)
    filler = memoryview(b"/store/unmerged/floor/file.root\n" * (BLOCK_BYTES // 32))
    view = memoryview(b"")
    creating = 0.0
    for number, size in enumerate(sizes):
        start = time.perf_counter()
        fd = os.open(os.path.join(out, f"f-{number:06d}"), os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666)
        creating += time.perf_counter() - start
        try:
            while size:
                if not view:
                    view = memoryview(next(blocks, filler))
                done = os.write(fd, view[:size])
                view, size = view[done:], size - done
        finally:
            os.close(fd)
    return creating


def measure_write(sizes: str, out: str) -> dict:
    """Write files of the plan's sizes (`sizes`: a JSON list) into `out`, new, with filler bytes: the floor
    for writing the plan, without reading the dump."""
    sizes_list = json.loads(Path(sizes).read_text())
    wall, cpu = time.perf_counter(), time.process_time()
    create = write_files(out, sizes_list, iter(()))
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return {"files": len(sizes_list), "bytes": sum(sizes_list), "wall_s": wall, "cpu_s": cpu, "create_s": create,
            "peak_rss_mib": peak_rss_mib()}


def measure_read_write(dump: str, inflater: str, sizes: str, out: str) -> dict:
    """Inflate the dump (or read it, "plain") in one thread while this one writes its first bytes into files of
    the plan's sizes, then drops the rest: the least any planner that reads this dump and writes this plan can
    take (no line is looked at)."""
    from MSUnmerged.dumpreader import read_ahead_thread

    sizes_list = json.loads(Path(sizes).read_text())
    wall, cpu = time.perf_counter(), time.process_time()
    blocks = iter(read_ahead_thread(read_blocks(dump, inflater), 2))
    create = write_files(out, sizes_list, blocks)
    for _ in blocks:  # the dump is read to its end
        pass
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return {"files": len(sizes_list), "bytes": sum(sizes_list), "wall_s": wall, "cpu_s": cpu, "create_s": create,
            "peak_rss_mib": peak_rss_mib()}


def floor_inflater(planned: dict, compress: bool) -> str:
    """The floors' inflater: the one the `planned` run used ("plain" for a plain dump)."""
    return ("isal" if "isal" in planned["inflater"] else "gzip") if compress else "plain"


CHILDREN = {"planner": measure_planner, "baseline": measure_baseline, "decompress": measure_decompress,
            "write": measure_write, "read_write": measure_read_write}


def inputs(data: Path, size: int, compress: bool = False) -> Path:
    """The folder holding the generated dump of `size` lines (dump.txt or dump.gz), protected.json and
    stats.json for RSE, generated on first use (bench_scale uses the same inputs)."""
    folder = data / f"{size}-{'gz' if compress else 'txt'}"
    if not (folder / "stats.json").exists():
        t = time.time()
        sample.write_sample_inputs(folder, RSE, sample.SampleSpec(files=size), compress=compress)
        print(f"generated {folder} in {time.time() - t:.0f} s", file=sys.stderr)
    return folder


def in_child(kind: str, *args: str, src: str | None = None) -> dict:
    env = {**os.environ, SRC_ENV: src} if src else None
    res = subprocess.run([sys.executable, __file__, "--child", kind, *args], capture_output=True, text=True, env=env)
    if res.returncode:
        raise SystemExit(f"bench_plan: {kind} {' '.join(args)} failed: {res.stderr.strip().splitlines()[-1]}")
    return json.loads(res.stdout)


def in_fresh_child(kind: str, out: str, *args: str, src: str | None = None) -> dict:
    """A child that writes the folder `out`, removed first with what the last run wrote there (not this run's work)."""
    shutil.rmtree(out, ignore_errors=True)
    return in_child(kind, *args, src=src)


def plan_in_child(engine: str, files: list[str], src: str | None = None) -> dict:
    """One planning run with `engine` ("compiled": build it with python3 setup.py build_ext --inplace), with the
    package of `src` (else this tree's)."""
    return in_fresh_child("planner", files[3], *files, engine, src=src)


def write_plan_sizes(plan_dir: str, to: Path) -> None:
    """The sizes of every file of the plan in `plan_dir` (job files, directories, seal, summary), as a JSON list."""
    to.write_text(json.dumps([p.stat().st_size for p in sorted(Path(plan_dir).rglob("*")) if p.is_file()]))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="1000000,10000000")
    ap.add_argument("--formats", default="plain,gzip")
    ap.add_argument("--rounds", type=int, default=1, help="planning and decompression runs each; medians of wall "
                    "and CPU times, the largest peak RSS reported")
    ap.add_argument("--data", default=str(REPO / "bench" / "data"))
    ap.add_argument("--baseline-lines", type=int, default=1_000_000, help="baseline only at sizes up to this")
    ap.add_argument("--engines", default="compiled,pure", help="planlines engines, side by side; the first is "
                    "reported as lines/s and peak RSS")
    ap.add_argument("--before", help="another tree's src/python: its planner too, first engine, same rounds")
    ap.add_argument("--child", nargs="+")
    args = ap.parse_args()
    if args.child:
        kind, *rest = args.child
        print(json.dumps(CHILDREN[kind](*rest)))
        return
    engines = args.engines.split(",")
    rows = []
    for size in (int(s) for s in args.sizes.split(",")):
        for compress in [fmt == "gzip" for fmt in args.formats.split(",")]:
            folder = inputs(Path(args.data), size, compress)
            dump = str(folder / ("dump.gz" if compress else "dump.txt"))
            files = [dump, str(folder / "protected.json"), str(folder / "stats.json"), str(folder / "plan")]
            runs: dict[str, list[dict]] = {engine: [] for engine in engines}
            inflate: dict[str, list[dict]] = {"gzip": [], "isal": []}
            before: list[dict] = []
            # The floors: writing files of the plan's sizes (sizes: of the first plan) into a new folder beside the
            # plan, alone and while the dump is inflated, in the same rounds.
            floors: dict[str, list[dict]] = {"write": [], "read_write": []}
            sizes, floor_dir = folder / "plan-sizes.json", str(folder / "floor")
            for _ in range(args.rounds):
                for name in inflate if compress else ():
                    inflate[name].append(in_child("decompress", dump, name))
                if args.before:
                    before.append(plan_in_child(engines[0], files, args.before))
                for engine in engines:
                    runs[engine].append(plan_in_child(engine, files))
                if not floors["write"]:
                    write_plan_sizes(files[3], sizes)
                floors["write"].append(in_fresh_child("write", floor_dir, str(sizes), floor_dir))
                reader = floor_inflater(runs[engines[0]][0], compress)
                floors["read_write"].append(in_fresh_child("read_write", floor_dir, dump, reader, str(sizes), floor_dir))
            shutil.rmtree(floor_dir)
            median = {engine: {"wall_s": statistics.median(x["wall_s"] for x in r),
                               "cpu_s": statistics.median(x["cpu_s"] for x in r),
                               "peak_rss_mib": max(x["peak_rss_mib"] for x in r),
                               **{k: r[0][k] for k in ("lines", "to_delete", "inflater")}}
                      for engine, r in runs.items()}
            digests = {x["plan_sha256"] for r in runs.values() for x in r}
            assert len(digests) == 1, f"the engines' plans differ: {digests}"
            # Before and after may order the files differently: the same counts.
            assert all((b["lines"], b["to_delete"]) == (runs[engines[0]][0]["lines"], runs[engines[0]][0]["to_delete"])
                       for b in before), "before and after plan different files"
            res = median[engines[0]]
            base = in_child("baseline", *files) if size <= args.baseline_lines else None
            if base:
                assert base["to_delete"] + 0 >= res["to_delete"] - res["lines"] // 10  # same job, same scale
            row = {"lines": size, "format": "gzip" if compress else "plain", "engine": engines[0],
                   "plans_identical": True,
                   "lines_per_s": round(res["lines"] / res["wall_s"]),
                   "lines_per_cpu_s": round(res["lines"] / res["cpu_s"]),
                   "peak_rss_mib": round(res["peak_rss_mib"], 1),
                   "baseline_lines_per_s": round(base["lines"] / base["wall_s"]) if base else None,
                   "speedup_vs_baseline": round(base["wall_s"] / res["wall_s"] * res["lines"] / base["lines"], 2)
                   if base else None}
            if compress:
                row["planner_inflater"] = res["inflater"]
                for name, times in inflate.items():
                    row[f"decompress_{name}_s"] = round(statistics.median(t["wall_s"] for t in times), 2)
                    row[f"decompress_{name}_cpu_s"] = round(statistics.median(t["cpu_s"] for t in times), 2)
            for engine, r in median.items():
                row[f"{engine}_plan_s"], row[f"{engine}_plan_cpu_s"] = round(r["wall_s"], 2), round(r["cpu_s"], 2)
                row[f"{engine}_plan_walls_s"] = [round(x["wall_s"], 2) for x in runs[engine]]
                row[f"{engine}_peak_rss_mib"] = round(r["peak_rss_mib"], 1)
                for name in inflate if compress else ():
                    row[f"{engine}_ratio_vs_{name}"] = round(r["wall_s"] / row[f"decompress_{name}_s"], 2)
                    row[f"{engine}_cpu_ratio_vs_{name}"] = round(r["cpu_s"] / row[f"decompress_{name}_cpu_s"], 2)
            row["plan_files"], row["plan_bytes"] = floors["write"][0]["files"], floors["write"][0]["bytes"]
            row["floor_reader"] = reader
            for kind, times in floors.items():
                wall, cpu = (statistics.median(t[key] for t in times) for key in ("wall_s", "cpu_s"))
                row[f"floor_{kind}_s"], row[f"floor_{kind}_cpu_s"] = round(wall, 2), round(cpu, 2)
                row[f"floor_{kind}_walls_s"] = [round(t["wall_s"], 2) for t in times]
                row[f"floor_{kind}_create_s"] = round(statistics.median(t["create_s"] for t in times), 2)
                for name in inflate if compress else ():
                    row[f"floor_{kind}_ratio_vs_{name}"] = round(row[f"floor_{kind}_s"] / row[f"decompress_{name}_s"], 2)
                for engine, r in median.items():
                    row[f"{engine}_ratio_vs_floor_{kind}"] = round(r["wall_s"] / wall, 2)
                    row[f"{engine}_cpu_ratio_vs_floor_{kind}"] = round(r["cpu_s"] / cpu, 2)
            if before:
                row["before_plan_s"] = round(statistics.median(x["wall_s"] for x in before), 2)
                row["before_plan_cpu_s"] = round(statistics.median(x["cpu_s"] for x in before), 2)
                row["before_plan_walls_s"] = [round(x["wall_s"], 2) for x in before]
                row["before_peak_rss_mib"] = round(max(x["peak_rss_mib"] for x in before), 1)
                for name in inflate if compress else ():
                    row[f"before_ratio_vs_{name}"] = round(row["before_plan_s"] / row[f"decompress_{name}_s"], 2)
                    row[f"before_cpu_ratio_vs_{name}"] = round(row["before_plan_cpu_s"] / row[f"decompress_{name}_cpu_s"],
                                                               2)
                for kind, times in floors.items():
                    row[f"before_ratio_vs_floor_{kind}"] = round(statistics.median(x["wall_s"] for x in before)
                                                                 / statistics.median(t["wall_s"] for t in times), 2)
            row["loadavg"] = round(os.getloadavg()[0], 2)
            rows.append(row)
            print(json.dumps(row), flush=True)
    Path(args.data, "results-plan.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
