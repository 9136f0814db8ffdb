"""Files deleted per second by the worker zipapp vs one `rm` / `xrdfs rm` process per file, same run.

POSIX: N files (default 100k) in a local folder, one worker job. xrootd: M files (default 10k) on a
real xrootd server in a private network namespace (test/python/servers/xrootd.py), one worker job
with `xrdfs rm` batches. The per-file-process baselines run on a sample of files (default 2000 and
300) and are extrapolated as a rate; both rates are measured on this machine in the same run.
Usage: python3 bench/bench_delete.py [--posix-files N] [--xrootd-files M] [--json]
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

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "src" / "python"), str(REPO / "test" / "python"), str(REPO / "test" / "python" / "worker")]

from servers import server_dir  # noqa: E402
from servers.xrootd import start_xrootd  # noqa: E402
from worker_kit import make_site, manifest, posix_site, worker_pyz  # noqa: E402

BASE = "/store/unmerged/Run3Summer23DRPremix/TTtoLNu2Q/AODSIM/130X_mcRun3-v1"


def lfns(n: int, tag: str) -> list[str]:
    return [f"{BASE}-{tag}/{i // 1000:05d}/{i:08d}-F1D2E3.root" for i in range(n)]


def create(root: Path, names: list[str], owner: str = "") -> None:
    for i in range(0, len(names), 1000):
        (root / names[i].lstrip("/")).parent.mkdir(parents=True, exist_ok=True)
    for name in names:
        open(root / name.lstrip("/"), "wb").close()
    if owner:
        subprocess.run(["chown", "-R", owner, str(root / "store")], check=True)


def run_job(work: Path, names: list[str], sc: Path, prefix: list[str]) -> tuple[float, dict]:
    work.mkdir(parents=True, exist_ok=True)
    (work / "manifest.json").write_text(json.dumps(manifest(names, file_timeout_s=120, retries=1)))
    env = {"PATH": os.environ["PATH"], "SITECONFIG_PATH": str(sc)}
    started = time.perf_counter()
    proc = subprocess.run([*prefix, sys.executable, str(worker_pyz()), "manifest.json"], cwd=work, env=env,
                          capture_output=True, text=True)
    seconds = time.perf_counter() - started
    last = json.loads((work / "report.jsonl").read_text().splitlines()[-1])
    if proc.returncode != 0 or last["summary"]["files"] != {"deleted": len(names)}:
        raise RuntimeError(f"worker run failed ({proc.returncode}): {last} {proc.stderr[-2000:]}")
    return seconds, last["summary"]


def baseline(argv_for: "callable", names: list[str]) -> float:
    started = time.perf_counter()
    for name in names:
        subprocess.run(argv_for(name), check=True, capture_output=True)
    return time.perf_counter() - started


def bench_posix(n: int, sample: int) -> dict:
    root = Path(tempfile.mkdtemp(prefix="msunmerged-bench-", dir=REPO / "bench"))
    try:
        storage = root / "storage"
        sc = posix_site(root, storage)
        names = lfns(n, "posix")
        t0 = time.perf_counter()
        create(storage, names)
        created = time.perf_counter() - t0
        seconds, _ = run_job(root / "job", names, sc, [])
        base_names = lfns(sample, "posix-rm")
        create(storage, base_names)
        base_s = baseline(lambda name: ["rm", str(storage) + name], base_names)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return {"files": n, "worker_s": round(seconds, 2), "worker_files_per_s": round(n / seconds),
            "baseline_sample": sample, "baseline_s": round(base_s, 2),
            "baseline_files_per_s": round(sample / base_s), "speedup": round((n / seconds) / (sample / base_s), 1),
            "create_s": round(created, 2)}


def bench_xrootd(n: int, sample: int) -> dict:
    proc, server = start_xrootd(server_dir("xrootd-bench"))
    try:
        root = Path(tempfile.mkdtemp(prefix="msunmerged-bench-xrd-"))
        sc = make_site(root, [{"protocol": "XRootD", "rules": [{"lfn": "/+(.*)", "pfn": server.url + "//$1"}]}],
                       [{"volume": "Test_Disk", "protocol": "XRootD", "command": "xrdcp"}])
        names = lfns(n, "xrootd")
        create(server.data, names, owner="nobody:nogroup")
        ns = ["nsenter", "-t", str(server.pid), "-n"]
        seconds, _ = run_job(root / "job", names, sc, ns)
        base_names = lfns(sample, "xrootd-rm")
        create(server.data, base_names, owner="nobody:nogroup")
        base_s = baseline(lambda name: [*ns, "xrdfs", server.url, "rm", name], base_names)
        shutil.rmtree(root, ignore_errors=True)
    finally:
        proc.stop()
    return {"files": n, "worker_s": round(seconds, 2), "worker_files_per_s": round(n / seconds),
            "baseline_sample": sample, "baseline_s": round(base_s, 2),
            "baseline_files_per_s": round(sample / base_s), "speedup": round((n / seconds) / (sample / base_s), 1)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--posix-files", type=int, default=100_000)
    p.add_argument("--posix-sample", type=int, default=2000)
    p.add_argument("--xrootd-files", type=int, default=10_000)
    p.add_argument("--xrootd-sample", type=int, default=300)
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    result = {"posix": bench_posix(args.posix_files, args.posix_sample),
              "xrootd": bench_xrootd(args.xrootd_files, args.xrootd_sample)}
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        for kind, r in result.items():
            print(f"{kind:6}  worker {r['files']:>7,} files in {r['worker_s']:6.2f} s = {r['worker_files_per_s']:>7,}/s   "
                  f"baseline (one process per file, {r['baseline_sample']} files) {r['baseline_files_per_s']:>5,}/s   "
                  f"speedup {r['speedup']}x")
    return 0 if all(r["speedup"] >= 50 for r in result.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
