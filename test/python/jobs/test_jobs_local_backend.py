"""LocalBackend: the real worker zipapp as local processes, bounded parallelism, reports, removal, restart."""
from __future__ import annotations

import time
from pathlib import Path

from MSUnmerged.collector import Collector, MemorySink, parse_report
from MSUnmerged.config import Config
from MSUnmerged.jobs.backend import JobState, wait_for
from MSUnmerged.jobs.local import LocalBackend
from MSUnmerged.jobs.spec import CleanupJob, DeleteFilesStep
from MSUnmerged.samplesite import write_siteconf

SITE = RSE = "T2_XX_Local"
B = "/store/unmerged/Run2024F/JetMET1/AOD/PromptReco-v3"


def make_site(root: Path) -> tuple[Path, Path]:
    storage = root / "storage"
    sc = write_siteconf(root / "SITECONF" / SITE, SITE, RSE, "V", str(storage))
    return storage, sc


def job(n: int, lfns: list[str], dry_run: bool = False) -> CleanupJob:
    return CleanupJob(job_id=f"{RSE}:1:{n}", rse=RSE, site=SITE, deadline=time.time() + 600,
                      step=DeleteFilesStep(lfns=lfns, remove_dirs=[f"{B}/{n:05d}"], dry_run=dry_run, retries=0,
                                           scan_started=time.time()))  # after the site's files were made


def test_runs_jobs_with_bounded_parallelism_and_collects(tmp_path: Path) -> None:
    storage, sc = make_site(tmp_path)
    cfg = Config()
    cfg.jobs.local_parallel = 2
    jobs = []
    for n in range(5):
        lfns = [f"{B}/{n:05d}/f{i}.root" for i in range(50)]
        for lfn in lfns:
            (storage / lfn.lstrip("/")).parent.mkdir(parents=True, exist_ok=True)
            (storage / lfn.lstrip("/")).write_bytes(b"")
        jobs.append(job(n, lfns))
    backend = LocalBackend(cfg, tmp_path / "work", siteconfig=str(sc))
    backend.preflight()
    ids = backend.submit(jobs)
    first = backend.poll(ids)
    assert sum(s.state == JobState.RUNNING for s in first.values()) <= 2
    assert sum(s.state == JobState.QUEUED for s in first.values()) >= 3
    states = wait_for(backend, ids, timeout=120)
    assert {s.state for s in states.values()} == {JobState.FINISHED} and {s.exit_code for s in states.values()} == {0}
    assert not any((storage / "store").rglob("*.root"))
    # The same job submitted again is never run twice.
    assert backend.submit(jobs[:1]) == {jobs[0].job_id: ids[jobs[0].job_id]}
    sink = MemorySink()
    for j in jobs:
        report = backend.fetch_report(j.job_id, ids[j.job_id], tmp_path / "reports" / f"{j.job_id}.jsonl")
        got = Collector(sink).collect(j.job_id, j.lfns, parse_report(report), states[j.job_id])
        assert got.counters == {"deleted": 50} and got.dirs == {"removed": 1} and not got.problems
        backend.remove(j.job_id, ids[j.job_id], "collected")
        assert not backend.job_dir(j.job_id).exists()
    assert {o["state"] for job_out in sink.outcomes.values() for o in job_out.values()} == {"deleted"}
    assert set(sink.closed) == {j.job_id for j in jobs}


def test_restart_finds_jobs_and_removal_stops_a_running_one(tmp_path: Path) -> None:
    storage, sc = make_site(tmp_path)
    cfg = Config()
    cfg.jobs.local_parallel = 1
    lfns = [f"{B}/00000/f{i}.root" for i in range(20_000)]
    (storage / lfns[0].lstrip("/")).parent.mkdir(parents=True)
    for lfn in lfns:
        open(storage / lfn.lstrip("/"), "wb").close()
    big, queued = job(0, lfns), job(1, [f"{B}/00001/x.root"])
    backend = LocalBackend(cfg, tmp_path / "work", siteconfig=str(sc))
    ids = backend.submit([big, queued])
    # A new backend instance (service restart) finds both from the work folder.
    again = LocalBackend(cfg, tmp_path / "work", siteconfig=str(sc))
    assert again.find([big.job_id, queued.job_id, "T2_XX_Local:1:99"]) == ids
    backend.remove(queued.job_id, ids[queued.job_id], "test")
    assert backend.poll({queued.job_id: ids[queued.job_id]})[queued.job_id].state == JobState.REMOVED
    report = backend.job_dir(big.job_id) / "report.jsonl"
    deadline = time.monotonic() + 60
    while not report.exists() or report.read_bytes().count(b"\n") < 100:
        assert time.monotonic() < deadline
        time.sleep(0.005)
    backend.remove(big.job_id, ids[big.job_id], "test")  # SIGTERM: the worker stops and says so
    parsed = parse_report(report)
    if parsed.complete:  # stopped in time (the usual case); else it had finished already
        assert parsed.exit_code in (0, 1)
        assert sum(parsed.counters().values()) == len(lfns)
    assert backend.poll({big.job_id: ids[big.job_id]})[big.job_id].state == JobState.REMOVED
    assert again.poll({"x": "local:nothing-here"})["x"].state == JobState.VANISHED
