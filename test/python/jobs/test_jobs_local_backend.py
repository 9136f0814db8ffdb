"""LocalBackend: the real worker zipapp as local processes, bounded parallelism, reports, removal, restart."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from MSUnmerged.collector import Collector, MemorySink, parse_report
from MSUnmerged.config import Config
from MSUnmerged.jobs.backend import BackendError, JobState, wait_for
from MSUnmerged.jobs.local import CLAIM_GRACE_S, PUMP_INTERVAL_S, UNVETTED_REASON, LocalBackend
from MSUnmerged.jobs.router import RoutingBackend
from MSUnmerged.jobs.spec import CleanupJob, DeleteFilesStep
from MSUnmerged.samplesite import write_siteconf
from MSUnmerged.worker.ids import CLAIM_NAME, LOG_NAME, PID_NAME

from gate_kit import Gate

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


def jobs_with_files(storage: Path, count: int, files: int) -> list[CleanupJob]:
    """`count` jobs of `files` empty files each, made in `storage` before the jobs (their scan start)."""
    jobs = []
    for n in range(count):
        lfns = [f"{B}/{n:05d}/f{i}.root" for i in range(files)]
        for lfn in lfns:
            (storage / lfn.lstrip("/")).parent.mkdir(parents=True, exist_ok=True)
            (storage / lfn.lstrip("/")).write_bytes(b"")
        jobs.append(job(n, lfns))
    return jobs


def test_preflight_starts_each_built_worker_once_and_a_replaced_one_again(tmp_path: Path) -> None:
    calls = tmp_path / "calls"
    python = tmp_path / "python"  # the real interpreter, counting its starts
    python.write_text(f"#!/bin/sh\necho \"$@\" >> {calls}\nexec {sys.executable} \"$@\"\n")
    python.chmod(0o755)
    backend = LocalBackend(Config(), tmp_path / "work", python=str(python))
    for rse in ("T2_A", "T2_B", "T2_C"):
        backend.preflight(rse)
    # Another site's backend on the same folder (the router makes one per site): the same worker, not run again.
    other = LocalBackend(Config(), tmp_path / "work", python=str(python))
    other.preflight("T2_D")
    assert other.worker() == backend.worker()
    assert len(calls.read_text().splitlines()) == 1
    worker = backend.worker()
    worker.write_bytes(b"not a zipapp")  # replaced under the service: checked again, and refused
    with pytest.raises(BackendError, match="local worker cannot run"):
        backend.preflight("T2_A")
    with pytest.raises(BackendError):  # a refusal is never remembered as a success
        backend.preflight("T2_A")
    assert len(calls.read_text().splitlines()) == 3
    fresh = LocalBackend(Config(), tmp_path / "work", python=str(python))  # a new backend rebuilds the replaced file
    fresh.preflight("T2_B")
    assert len(calls.read_text().splitlines()) == 4 and fresh.worker().read_bytes() != b"not a zipapp"


def test_rses_preflighting_at_once_start_the_worker_once(tmp_path: Path) -> None:
    """A cycle's first RSEs (service.parallel_rses, each its site's backend) preflight at the same moment: one
    `--help` answers them all, not one each."""
    calls = tmp_path / "calls"
    python = tmp_path / "python"  # the real interpreter, counting its starts
    python.write_text(f"#!/bin/sh\necho \"$@\" >> {calls}\nexec {sys.executable} \"$@\"\n")
    python.chmod(0o755)
    backends = [LocalBackend(Config(), tmp_path / "work", python=str(python)) for _ in range(4)]
    backends[0].worker()  # built before: the race is on the start's check, not the build
    together = threading.Barrier(len(backends))
    errors: list[BaseException] = []

    def preflight(backend: LocalBackend) -> None:
        together.wait()
        try:
            backend.preflight()
        except BaseException as exc:  # reported below
            errors.append(exc)
    threads = [threading.Thread(target=preflight, args=(b,)) for b in backends]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)  # bounds a hang
    assert not errors and len(calls.read_text().splitlines()) == 1


def test_workers_start_niced_isolated_and_in_the_service_session(tmp_path: Path) -> None:
    """The preflight's `--help` and each job's worker start `jobs.local_nice` below the service, with `-I -S` (the
    service's PYTHONPATH, here a poisoned `argparse`, never reaches the worker), in a process group of their own but
    the service's session (a session of its own is an autogroup of its own: nice would not yield the CPU); `nice`
    execs the worker, so the pid file names it; and the job deletes its files."""
    storage, sc = make_site(tmp_path)
    cfg = Config()
    cfg.jobs.local_nice = 7
    seen = tmp_path / "seen"
    python = tmp_path / "python"  # the real interpreter, noting its own /proc stat line (pid, group, session, nice)
    python.write_text(f'#!/bin/sh\necho "$(cat /proc/$$/stat) ARGS $*" >> {seen}\nexec {sys.executable} "$@"\n')
    python.chmod(0o755)
    poison = tmp_path / "poison"
    poison.mkdir()
    (poison / "argparse.py").write_text("raise ImportError('the service PYTHONPATH reached the worker')\n")
    (poison / "sitecustomize.py").write_text(f"open({str(tmp_path / 'site-ran')!r}, 'w').close()\n")
    backend = LocalBackend(cfg, tmp_path / "work", siteconfig=str(sc), python=str(python),
                           env={**os.environ, "PYTHONPATH": str(poison)})
    backend.preflight()
    jobs = jobs_with_files(storage, 1, 20)
    ids = backend.submit(jobs)
    states = wait_for(backend, ids, timeout=120)
    assert states[jobs[0].job_id].state == JobState.FINISHED and states[jobs[0].job_id].exit_code == 0, states
    assert not any((storage / "store").rglob("*.root"))
    assert not (tmp_path / "site-ran").exists()
    expected_nice = min(19, os.getpriority(os.PRIO_PROCESS, 0) + 7)
    starts = [line.split(" ARGS ") for line in seen.read_text().splitlines()]
    assert len(starts) == 2  # the preflight, then the job
    for stat, args in starts:
        fields = stat.rsplit(")", 1)[1].split()  # from field 3 (state) on
        assert int(fields[16]) == expected_nice, stat  # field 19: nice
        assert args.split()[:2] == ["-I", "-S"], args
    stat, args = starts[1]
    fields = stat.rsplit(")", 1)[1].split()
    pid = int(stat.split()[0])
    assert "--report" in args and pid == int((backend.job_dir(jobs[0].job_id) / PID_NAME).read_text())
    assert int(fields[2]) == pid and int(fields[3]) == os.getsid(0)  # fields 5, 6: its own group, our session


def test_runs_jobs_with_bounded_parallelism_and_collects(tmp_path: Path) -> None:
    storage, sc = make_site(tmp_path)
    cfg = Config()
    cfg.jobs.local_parallel = 2
    jobs = jobs_with_files(storage, 5, 50)
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


def test_queued_jobs_start_as_slots_free_up_without_being_polled(tmp_path: Path) -> None:
    """More jobs than slots: the supervisor starts every one of them as earlier ones end, while nobody polls
    (between two cycles of the service), never more than `local_parallel` at once."""
    storage, sc = make_site(tmp_path)
    cfg = Config()
    cfg.jobs.local_parallel = 2
    jobs = jobs_with_files(storage, 7, 30)
    backend = LocalBackend(cfg, tmp_path / "work", siteconfig=str(sc))
    ids = backend.submit(jobs)
    reports = [backend.job_dir(j.job_id) / "report.jsonl" for j in jobs]
    deadline = time.monotonic() + 120
    while not all(r.exists() and parse_report(r).complete for r in reports):
        assert time.monotonic() < deadline, "queued jobs were never started without a poll"
        time.sleep(0.05)
    # Each worker's own start time and duration: never more than two at once.
    spans = [(rep.start["time"], rep.start["time"] + rep.summary["seconds"]) for rep in map(parse_report, reports)]
    assert max(sum(1 for a, b in spans if a <= t < b) for t, _ in spans) <= 2
    assert not any((storage / "store").rglob("*.root"))  # every job ran, none was polled
    states = wait_for(backend, ids, timeout=60)  # a worker that wrote its summary may still be exiting
    assert {s.state for s in states.values()} == {JobState.FINISHED}



def test_close_ends_the_supervisor_and_leaves_the_queue_on_disk(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: the supervisor had no stop: after the service closed it went on starting queued workers, and with
    the state folder gone it died on FileNotFoundError. Closed (through the router, as build_service does), it
    ends and starts nothing more; a restarted service's backend finds the queued jobs on disk and runs each once."""
    crashed: list[threading.ExceptHookArgs] = []
    monkeypatch.setattr(threading, "excepthook", crashed.append)
    storage, sc = make_site(tmp_path)
    gate = Gate(tmp_path)  # the first worker waits for the gate: the other jobs stay queued meanwhile
    cfg = Config()
    cfg.jobs.local_parallel = 1
    jobs = jobs_with_files(storage, 4, 20)
    router = RoutingBackend(cfg, lambda rse: SITE, factory=lambda kind, site: LocalBackend(
        cfg, tmp_path / "work", siteconfig=str(sc), python=gate.python))
    before = set(threading.enumerate())
    ids = router.submit(jobs)
    (supervisor,) = [t for t in threading.enumerate() if t not in before and t.name == "local-jobs"]
    closer = threading.Thread(target=router.close)
    closer.start()
    closer.join(60)  # bounds a hang
    assert not closer.is_alive() and not supervisor.is_alive()
    queued = [j.job_id for j in jobs[1:]]
    states = router.poll(ids)  # a closed backend still answers, and starts nothing
    assert [states[j].state for j in queued] == [JobState.QUEUED] * 3
    assert not any((router.for_rse(RSE).job_dir(j) / CLAIM_NAME).exists() for j in queued)
    gate.open()
    again = LocalBackend(cfg, tmp_path / "work", siteconfig=str(sc))  # the restarted service's
    found = again.find([j.job_id for j in jobs])
    again.poll(found)
    again.revalidated(found)  # as a revalidation does: the jobs adopted from disk may start
    finished = wait_for(again, found, timeout=120)
    assert {s.state for s in finished.values()} == {JobState.FINISHED} and len(finished) == 4
    for j in jobs:  # each ran once: a second run would have found its files gone
        assert parse_report(again.job_dir(j.job_id) / "report.jsonl").counters() == {"deleted": 20}
    assert crashed == []


def test_backends_of_several_sites_share_the_host_limit(tmp_path: Path) -> None:
    """The router makes one backend per site: `local_parallel` bounds the workers of all of them together (on one
    work folder in one process), not each site's; every job still runs, each backend's supervisor starting its own."""
    storage, sc = make_site(tmp_path)
    cfg = Config()
    cfg.jobs.local_parallel = 1
    jobs = jobs_with_files(storage, 6, 30)
    sites = [LocalBackend(cfg, tmp_path / "work", siteconfig=str(sc)) for _ in range(2)]
    ids = {**sites[0].submit(jobs[:3]), **sites[1].submit(jobs[3:])}
    reports = [sites[0].job_dir(j.job_id) / "report.jsonl" for j in jobs]
    deadline = time.monotonic() + 120
    while not all(r.exists() and parse_report(r).complete for r in reports):
        assert time.monotonic() < deadline, "queued jobs were never started"
        time.sleep(0.05)
    spans = [(rep.start["time"], rep.start["time"] + rep.summary["seconds"]) for rep in map(parse_report, reports)]
    assert max(sum(1 for a, b in spans if a <= t < b) for t, _ in spans) == 1
    for backend, mine in ((sites[0], jobs[:3]), (sites[1], jobs[3:])):
        states = wait_for(backend, {j.job_id: ids[j.job_id] for j in mine}, timeout=60)
        assert {s.state for s in states.values()} == {JobState.FINISHED}
    assert not any((storage / "store").rglob("*.root"))


def test_two_backends_on_one_work_folder_start_a_job_once(tmp_path: Path) -> None:
    """A job queued by one backend (a crashed service's, still in memory) and found queued on disk by another
    (its restart) runs once: whoever starts it first claims it; the other leaves it alone."""
    storage, sc = make_site(tmp_path)
    cfg = Config()
    cfg.jobs.local_parallel = 1
    slow = [f"{B}/00000/f{i}.root" for i in range(5000)]
    quick = [f"{B}/00001/g{i}.root" for i in range(50)]
    for lfn in slow + quick:
        (storage / lfn.lstrip("/")).parent.mkdir(parents=True, exist_ok=True)
        open(storage / lfn.lstrip("/"), "wb").close()
    first = LocalBackend(cfg, tmp_path / "work", siteconfig=str(sc))
    ids = first.submit([job(0, slow), job(1, quick)])  # the second waits in first's queue
    second = LocalBackend(cfg, tmp_path / "work", siteconfig=str(sc))
    second.parallel = 2
    second.poll(ids)  # second finds the queued one on disk
    second.revalidated(ids)  # and starts it once revalidated
    states = wait_for(second, ids, timeout=120)
    wait_for(first, ids, timeout=120)  # first's supervisor meets the claim and leaves it
    assert {s.state for s in states.values()} == {JobState.FINISHED}
    report = parse_report(first.job_dir(job(1, quick).job_id) / "report.jsonl")
    assert report.complete and report.counters() == {"deleted": 50}  # a second run would find them missing
    assert (first.job_dir(job(1, quick).job_id) / LOG_NAME).read_text().count("Traceback") == 0


# In a child process: submit one job and die by SIGKILL as soon as its worker's process exists (before the
# starter can note anything of it), like a service killed mid-submission.
STARTER_KILLED_AFTER_FORK = """
import os, signal, subprocess, sys
from pathlib import Path
sys.path.insert(0, sys.argv[3])
from test_jobs_local_backend import jobs_with_files, make_site
from MSUnmerged.config import Config
from MSUnmerged.jobs.local import CLAIM_GRACE_S, PUMP_INTERVAL_S, UNVETTED_REASON, LocalBackend
real = subprocess.Popen
def popen_then_die(args, *rest, **kwargs):
    proc = real(args, *rest, **kwargs)
    if "--report" in args:  # the worker's start (not the preflight's --help)
        os.kill(os.getpid(), signal.SIGKILL)
    return proc
subprocess.Popen = popen_then_die
root = Path(sys.argv[1])
storage, sc = make_site(root)
LocalBackend(Config(), root / "work", siteconfig=str(sc)).submit(jobs_with_files(storage, 1, int(sys.argv[2])))
"""


def test_a_starter_killed_right_after_the_fork_leaves_the_worker_known(tmp_path: Path) -> None:
    """Before: the pid file was the starter's to write after the fork; killed in between, the job was a claim
    without a pid, read after CLAIM_GRACE_S as never started (FAILED, re-planned) while its worker deleted."""
    here = Path(__file__).resolve()  # the child imports as pytest.ini's pythonpath does: src/python, test/python
    path = [str(here.parents[3] / "src" / "python"), str(here.parents[1]), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path)}
    child = subprocess.run([sys.executable, "-c", STARTER_KILLED_AFTER_FORK, str(tmp_path), "300",
                            str(Path(__file__).parent)], env=env, timeout=120, capture_output=True, text=True)
    assert child.returncode == -signal.SIGKILL, child.stderr[-2000:]
    storage, sc = tmp_path / "storage", tmp_path / "SITECONF" / SITE
    again = LocalBackend(Config(), tmp_path / "work", siteconfig=str(sc))  # the restarted service
    job_id = job(0, []).job_id
    ids = again.find([job_id])
    pid_file = again.job_dir(job_id) / PID_NAME
    deadline = time.monotonic() + 60  # bounds a hang: the worker writes it before it starts
    while not pid_file.exists():
        assert time.monotonic() < deadline, "the started worker left no pid file"
        time.sleep(0.01)
    states = wait_for(again, ids, timeout=120)
    assert states[job_id].state == JobState.FINISHED and states[job_id].exit_code == 0, states
    assert not any((storage / "store").rglob("*.root"))


def test_slots_go_in_submission_order_across_sites_and_a_waiting_job_says_why(tmp_path: Path) -> None:
    """docs/jobs.md: a free slot goes to the job that has waited longest, whichever site's backend holds it. A big
    RSE's jobs submitted after a small RSE's job (its top-up) wait behind it, and a queued job's status says what
    it waits for (issue 39: the small RSE's job waited 35 s while the big one's later jobs ran)."""
    storage, sc = make_site(tmp_path)
    cfg = Config()
    cfg.jobs.local_parallel = 1
    jobs = jobs_with_files(storage, 7, 20)
    big, small = (LocalBackend(cfg, tmp_path / "work", siteconfig=str(sc)) for _ in range(2))
    ids = big.submit(jobs[:2])  # the first runs, the second waits
    ids.update(small.submit(jobs[2:3]))
    waiting = small.poll({jobs[2].job_id: ids[jobs[2].job_id]})[jobs[2].job_id]
    assert waiting.state is JobState.QUEUED and "waiting for a free local slot" in waiting.reason
    ids.update(big.submit(jobs[3:]))  # the big RSE's top-up: later than the small RSE's job
    reports = [big.job_dir(j.job_id) / "report.jsonl" for j in jobs]
    deadline = time.monotonic() + 180
    while not all(r.exists() and parse_report(r).complete for r in reports):
        assert time.monotonic() < deadline, "queued jobs were never started"
        time.sleep(0.05)
    started = [parse_report(r).start["time"] for r in reports]
    assert started == sorted(started), "jobs started out of submission order"
    for backend, mine in ((big, jobs[:2] + jobs[3:]), (small, jobs[2:3])):
        states = wait_for(backend, {j.job_id: ids[j.job_id] for j in mine}, timeout=60)
        assert {s.state for s in states.values()} == {JobState.FINISHED}
        backend.close()


def test_a_queued_job_removed_before_it_starts_leaves_nothing_to_find(tmp_path: Path) -> None:
    """A job removed while queued (revalidation: a file became protected, or its list grows old) leaves no folder:
    a restarted service's `find` must not take its old manifest for a submitted job and start it (before, the
    folder stayed whole: a crash between the job's re-issue being recorded and its new folder being written left
    the old manifest to be adopted and run)."""
    storage, sc = make_site(tmp_path)
    gate = Gate(tmp_path)  # the first worker waits for the gate: the second job stays queued
    cfg = Config()
    cfg.jobs.local_parallel = 1
    first, second = jobs_with_files(storage, 2, 3)
    backend = LocalBackend(cfg, tmp_path / "work", siteconfig=str(sc), python=gate.python)
    ids = backend.submit([first, second])
    assert backend.remove_pending({second.job_id: ids[second.job_id]}, "revalidated") == [second.job_id]
    assert backend.poll({second.job_id: ids[second.job_id]})[second.job_id].state is JobState.REMOVED
    assert not backend.job_dir(second.job_id).exists()
    gate.open()
    assert wait_for(backend, {first.job_id: ids[first.job_id]}, timeout=120)[first.job_id].state is JobState.FINISHED
    backend.close()
    again = LocalBackend(cfg, tmp_path / "work", siteconfig=str(sc))  # a restarted service's
    assert second.job_id not in again.find([first.job_id, second.job_id])
    assert all((storage / lfn.lstrip("/")).exists() for lfn in second.step.lfns)  # never ran


def test_a_claim_without_a_pid_file_is_a_job_that_never_ran(tmp_path: Path) -> None:
    """Its starter writes the pid file before it execs the worker: a claim that stays without one (a starter that
    died, or found the disk full, issue 36's CI) is a job that ran nothing, planned again (never_ran); before, it
    was failed with its files' fate unknown. Younger than the grace, another backend may still be starting it."""
    storage, sc = make_site(tmp_path)
    cfg = Config()
    closed = LocalBackend(cfg, tmp_path / "work", siteconfig=str(sc))
    closed.close()  # it queues, never starts
    (first,) = jobs_with_files(storage, 1, 3)
    ids = closed.submit([first])
    claim = closed.job_dir(first.job_id) / CLAIM_NAME
    claim.touch()
    again = LocalBackend(cfg, tmp_path / "work", siteconfig=str(sc))
    try:
        assert again.poll(ids)[first.job_id].state is JobState.RUNNING
        old = time.time() - CLAIM_GRACE_S - 1
        os.utime(claim, (old, old))
        status = again.poll(ids)[first.job_id]
        assert status.state is JobState.FAILED and status.never_ran, status
        assert len(list((storage / "store").rglob("*.root"))) == 3
    finally:
        again.close()


def test_a_job_left_queued_by_an_earlier_service_starts_only_once_revalidated(tmp_path: Path) -> None:
    """Before: a job an earlier service left queued on disk was adopted by the first poll that asked about it and
    started by the next pump of the site's backend (another RSE's poll or submission, the supervisor, the second
    poll of `run --wait`), before its own RSE's revalidation had re-checked its old manifest. Now it waits, says
    why, and starts only once revalidated; removal stays exact."""
    storage, sc = make_site(tmp_path)
    cfg = Config()
    closed = LocalBackend(cfg, tmp_path / "work", siteconfig=str(sc))
    closed.close()  # it queues, never starts
    kept, dropped, other = jobs_with_files(storage, 3, 3)
    ids = closed.submit([kept, dropped])
    closed.close()  # the service stops: its jobs stay queued on disk, no longer in this process's waiting list
    again = LocalBackend(cfg, tmp_path / "work", siteconfig=str(sc))  # the restarted service's
    try:
        assert again.find([kept.job_id, dropped.job_id]) == ids
        states = again.poll(ids)  # adopted
        assert {s.state for s in states.values()} == {JobState.QUEUED}
        assert {s.reason for s in states.values()} == {UNVETTED_REASON}
        assert all(s.awaits_revalidation for s in states.values())
        # Other work of the site's backend pumps its queue: the adopted jobs must not start.
        other_ids = again.submit([other])
        assert wait_for(again, other_ids, timeout=120)[other.job_id].state is JobState.FINISHED
        time.sleep(PUMP_INTERVAL_S * 5)  # a supervisor would have started them by now
        assert {s.state for s in again.poll(ids).values()} == {JobState.QUEUED}
        assert not any((again.job_dir(j.job_id) / CLAIM_NAME).exists() for j in (kept, dropped))
        assert again.remove_pending({dropped.job_id: ids[dropped.job_id]}, "revalidation") == [dropped.job_id]
        again.revalidated({kept.job_id: ids[kept.job_id]})  # kept by the revalidation
        assert wait_for(again, ids, timeout=120)[kept.job_id].state is JobState.FINISHED
        assert again.poll(ids)[dropped.job_id].state is JobState.REMOVED
        assert all((storage / lfn.lstrip("/")).exists() for lfn in dropped.step.lfns)  # never ran
        assert not any((storage / lfn.lstrip("/")).exists() for lfn in kept.step.lfns + other.step.lfns)
    finally:
        again.close()
