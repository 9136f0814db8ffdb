"""Submission of N cleanup jobs to the real test HTCondor pool: one cluster through itemdata vs one submit per job.

Both go through CondorBackend.submit (manifests written, submit with spool=True, inputs spooled), in the same
run against the same schedd. The jobs require `False`, so they never run; each round removes its jobs.
Also times poll() and find() over the N jobs of the itemdata round. Uses the pool as a test session does
(servers.condor.using_pool): starts it if no one uses it, stops it at the end if no one else does.

    python3 bench/bench_condor_submit.py --jobs 1000 --rounds 2
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "src" / "python"), str(REPO / "test" / "python")]

from MSUnmerged.config import CondorConfig, JobsConfig  # noqa: E402
from MSUnmerged.jobs.condor import CondorBackend  # noqa: E402
from MSUnmerged.jobs.spec import CleanupJob, DeleteFilesStep  # noqa: E402
from MSUnmerged.jobs.workerpkg import build_worker  # noqa: E402
from servers.condor import SITE, using_pool  # noqa: E402

RSE = "T2_XX_Condor_Disk"
FILES_PER_JOB = 20


def make_jobs(tag: str, n: int) -> list[CleanupJob]:
    deadline = time.time() + 3600
    return [CleanupJob(job_id=f"{RSE}:{tag}:{i}", rse=RSE, site=SITE, deadline=deadline,
                       step=DeleteFilesStep(lfns=[f"/store/unmerged/E/P/T/p-v1/000{i}/{k}.root"
                                                  for k in range(FILES_PER_JOB)]))
            for i in range(n)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=1)
    args = ap.parse_args()

    with using_pool() as pool:
        token = pool.token_dir("submitter")
        with tempfile.TemporaryDirectory(prefix="bench-condor-") as tmp:
            work = Path(tmp)
            backend = CondorBackend(CondorConfig(pool=pool.pool, token_dir=str(token), requirements="False"),
                                    JobsConfig(), work / "work", worker=build_worker(work))
            backend.preflight(RSE)
            for rnd in range(args.rounds):
                tag = f"bench{time.time():.0f}r{rnd}"
                jobs = make_jobs(tag + "c", args.jobs)
                t0 = time.perf_counter()
                ids = backend.submit(jobs)
                t_cluster = time.perf_counter() - t0
                t0 = time.perf_counter()
                states = backend.poll(ids)
                t_poll = time.perf_counter() - t0
                t0 = time.perf_counter()
                found = backend.find([j.job_id for j in jobs])
                t_find = time.perf_counter() - t0
                assert len(states) == len(found) == args.jobs
                backend.remove_pending(ids, "bench cleanup")  # they never run

                jobs = make_jobs(tag + "s", args.jobs)
                t0 = time.perf_counter()
                single: dict[str, str] = {}
                for job in jobs:
                    single.update(backend.submit([job]))
                t_single = time.perf_counter() - t0
                assert len(single) == args.jobs
                backend.remove_pending(single, "bench cleanup")
                for mode, secs in (("one cluster, itemdata", t_cluster), ("one submit per job", t_single)):
                    print(json.dumps({"bench": "condor_submit", "round": rnd, "mode": mode, "jobs": args.jobs,
                                      "seconds": round(secs, 3), "jobs_per_s": round(args.jobs / secs, 1)}))
                print(json.dumps({"bench": "condor_submit", "round": rnd, "speedup": round(t_single / t_cluster, 1),
                                  "poll_s": round(t_poll, 3), "find_s": round(t_find, 3)}))


if __name__ == "__main__":
    main()
