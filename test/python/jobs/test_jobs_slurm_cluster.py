"""SlurmBackend against a real single-node Slurm cluster: jobs run the worker and delete files in a posix storage."""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Callable, Mapping, Optional

import pytest

from MSUnmerged.config import JobsConfig, SiteConfig
from MSUnmerged.jobs.backend import JobState, JobStatus, wait_for
from MSUnmerged.jobs.slurm import SlurmBackend
from MSUnmerged.jobs.spec import CleanupJob, DeleteFilesStep
from MSUnmerged.jobs.workerpkg import build_worker
from MSUnmerged.samplesite import write_siteconf

pytestmark = [pytest.mark.integration, pytest.mark.slow]  # starts the real Slurm cluster

RSE = "T2_XX_Slurm"
SITE = "T2_XX_Slurm"


@pytest.fixture(scope="module")
def worker(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The real site-side worker zipapp, as production ships it."""
    return build_worker(tmp_path_factory.mktemp("worker"))


@pytest.fixture
def storage(tmp_path: Path) -> tuple[Path, Path]:
    """A posix storage folder and its site configuration (SITECONFIG_PATH with JobConfig/site-local-config.xml)."""
    root = tmp_path / "storage"
    siteconf = write_siteconf(tmp_path / "SITECONF" / SITE, SITE, RSE, f"{SITE}_posix", str(root))
    return root, siteconf


def make_files(root: Path, lfns: list[str]) -> None:
    for lfn in lfns:
        path = root / lfn.lstrip("/")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"x" * 10)


def make_files_of(root: Path, job: CleanupJob) -> None:
    """The job's files, then its scan start: a scan lists files that exist when it starts (the worker refuses a
    file whose ctime is later)."""
    make_files(root, job.step.lfns)
    job.step.scan_started = time.time()


def lfns_for(job: int, n: int) -> list[str]:
    return [f"/store/unmerged/Run2024A/Prim/AOD/Proc-v{job}/000/0001/file{i}.root" for i in range(n)]


def cleanup_job(n: int, lfns: list[str], runtime_s: int = 3600) -> CleanupJob:
    """A job deleting `lfns` and then their (emptied) directory."""
    dirs = sorted({lfn.rsplit("/", 1)[0] for lfn in lfns})
    return CleanupJob(job_id=f"{RSE}:1700000000:{n}", rse=RSE, site=SITE, deadline=time.time() + 3600,
                      step=DeleteFilesStep(lfns=lfns, remove_dirs=dirs, dry_run=False, scan_started=time.time()),  # see make_files_of
                      generation=1700000000.0,
                      request_memory_mb=100, max_runtime_s=runtime_s)


def wait_until(backend: SlurmBackend, batch_ids: Mapping[str, str], until: Callable[[JobStatus], bool],
               timeout_s: float = 120.0) -> dict[str, JobStatus]:
    statuses = wait_for(backend, batch_ids, timeout_s, until, interval=1)
    if not all(until(s) for s in statuses.values()):
        raise TimeoutError(f"jobs not there after {timeout_s} s: {statuses}")
    return statuses


def terminal(s: JobStatus) -> bool:
    return s.state.terminal


@pytest.fixture(params=["cli", "rest"])
def transport(request: pytest.FixtureRequest) -> str:
    return request.param


def backend_for(cluster, transport: str, tmp_path: Path, siteconf: Path, worker: Optional[Path],
                jobs: Optional[JobsConfig] = None, **overrides) -> SlurmBackend:
    settings = cluster.settings(transport, tmp_path / "slurm-work", **overrides)
    jobs = jobs or JobsConfig()
    jobs.sites[RSE] = SiteConfig(siteconfig=str(siteconf))
    return SlurmBackend(settings, jobs, worker)


def test_array_deletes_files_and_reports(slurm_cluster, transport, tmp_path, storage, worker) -> None:
    root, siteconf = storage
    jobs = [cleanup_job(i, lfns_for(i, 4)) for i in range(3)]
    for job in jobs:
        make_files_of(root, job)
    kept = lfns_for(99, 2)  # not in any job
    make_files(root, kept)
    backend = backend_for(slurm_cluster, transport, tmp_path, siteconf, worker)
    backend.preflight()

    batch_ids = backend.submit(jobs)
    assert len({b.split("_")[0] for b in batch_ids.values()}) == 1  # one array
    assert sorted(b.split("_")[1] for b in batch_ids.values()) == ["0", "1", "2"]
    assert backend.find([j.job_id for j in jobs] + [f"{RSE}:other:0"]) == batch_ids

    statuses = wait_until(backend, batch_ids, terminal)
    for job in jobs:
        status = statuses[job.job_id]
        assert (status.state, status.exit_code, status.batch_id) == (JobState.FINISHED, 0, batch_ids[job.job_id])
        report = backend.fetch_report(job.job_id, batch_ids[job.job_id], tmp_path / "reports" / f"{status.batch_id}")
        assert report is not None
        lines = [json.loads(line) for line in report.read_text().splitlines()]
        assert sorted((r["lfn"], r["outcome"]) for r in lines if "lfn" in r) == [(f, "deleted") for f in job.step.lfns]
        assert [r["dir"] for r in lines if r.get("outcome") == "removed"] == job.step.remove_dirs
        assert lines[-1]["exit_code"] == 0
        assert not any((root / lfn.lstrip("/")).exists() for lfn in job.step.lfns)
        assert not (root / job.step.remove_dirs[0].lstrip("/")).exists()
    assert all((root / lfn.lstrip("/")).exists() for lfn in kept)

    # Resubmitting a job id starts clean: the old report is not taken for the new attempt's.
    again = backend.submit([jobs[0]])
    assert backend.fetch_report(jobs[0].job_id, again[jobs[0].job_id], tmp_path / "r2") is None
    status = wait_until(backend, again, terminal)[jobs[0].job_id]
    assert status.state == JobState.FINISHED
    report = backend.fetch_report(jobs[0].job_id, again[jobs[0].job_id], tmp_path / "r2")
    assert {r["outcome"] for r in map(json.loads, report.read_text().splitlines()) if "lfn" in r} == {"missing"}


def test_cancelled_jobs_recorded_with_reason(slurm_cluster, transport, tmp_path, storage, worker) -> None:
    """Our removal of a running or a pending task is REMOVED with our reason; anyone else's scancel of a running
    task is FAILED. Someone else's scancel of a pending task leaves no trace in Slurm 22.05 without slurmdbd: VANISHED."""
    root, siteconf = storage
    jobs = [cleanup_job(i, lfns_for(i, 2)) for i in range(4)]
    for job in jobs:
        make_files_of(root, job)
    # Two tasks at a time (2 cores), each first sleeping: tasks 0 and 1 run, 2 and 3 pend.
    backend = backend_for(slurm_cluster, transport, tmp_path, siteconf, worker, setup="sleep 300",
                          array_parallel=2)
    batch_ids = backend.submit(jobs)
    running, outside, pending, outside_pending = (j.job_id for j in jobs)
    # Running, and their job script started (its `started` marker written: Slurm says RUNNING a moment before).
    wait_until(backend, {j: batch_ids[j] for j in (running, outside)},
               lambda s: s.state == JobState.RUNNING and bool(s.started), 60)
    statuses = backend.poll(batch_ids)
    assert statuses[pending].state == statuses[outside_pending].state == JobState.QUEUED
    assert statuses[pending].started is False

    # Pending tasks first: cancelling a running one frees a slot, and a pending task started in it would no
    # longer be pending when cancelled.
    backend.remove(pending, batch_ids[pending], "revalidation: dump superseded")
    slurm_cluster.run("scancel", batch_ids[outside_pending])
    backend.remove(running, batch_ids[running], "revalidation: files became protected")
    slurm_cluster.run("scancel", batch_ids[outside])

    statuses = wait_until(backend, batch_ids, terminal, 60)
    assert (statuses[running].state, statuses[running].reason) == (JobState.REMOVED,
                                                                   "revalidation: files became protected")
    assert (statuses[pending].state, statuses[pending].reason) == (JobState.REMOVED, "revalidation: dump superseded")
    assert (statuses[outside].state, statuses[outside].reason) == (JobState.FAILED, "cancelled outside MSUnmerged")
    assert statuses[outside_pending].state == JobState.VANISHED
    # The job script's `started` marker: the pending ones never ran (no try of their files), the running ones did.
    assert statuses[pending].never_ran and statuses[outside_pending].never_ran
    assert statuses[running].started is statuses[outside].started is True and not statuses[outside].never_ran
    assert all((root / lfn.lstrip("/")).exists() for job in jobs for lfn in job.step.lfns)
    assert backend.fetch_report(running, batch_ids[running], tmp_path / "r") is None


def test_time_limit_recorded(slurm_cluster, tmp_path, storage, worker) -> None:
    """Slurm's minimum limit is one minute, enforced about every 30 s: one slow test, over REST."""
    root, siteconf = storage
    job = cleanup_job(0, lfns_for(0, 2), runtime_s=60)
    make_files_of(root, job)
    backend = backend_for(slurm_cluster, "rest", tmp_path, siteconf, worker, setup="sleep 600")
    batch_ids = backend.submit([job])
    status = wait_until(backend, batch_ids, terminal, 180)[job.job_id]
    assert (status.state, status.reason) == (JobState.FAILED, "time limit")
    assert all((root / lfn.lstrip("/")).exists() for lfn in job.step.lfns)


def test_node_failure_recorded(slurm_cluster, tmp_path, storage, worker) -> None:
    root, siteconf = storage
    job = cleanup_job(0, lfns_for(0, 2))
    make_files_of(root, job)
    backend = backend_for(slurm_cluster, "cli", tmp_path, siteconf, worker, setup="sleep 600")
    batch_ids = backend.submit([job])
    wait_until(backend, batch_ids, lambda s: s.state == JobState.RUNNING, 60)
    try:
        slurm_cluster.run("scontrol", "update", f"nodename={slurm_cluster.node}", "state=down",
                          "reason=msunmerged test: node down")
        status = wait_until(backend, batch_ids, terminal, 60)[job.job_id]
    finally:
        slurm_cluster.resume_node()
    assert (status.state, status.reason) == (JobState.FAILED, "node failure")
    assert backend.fetch_report(job.job_id, batch_ids[job.job_id], tmp_path / "r") is None


def test_purged_jobs_judged_by_accounting_and_markers(slurm_cluster, tmp_path, storage, worker) -> None:
    """After MinJobAge Slurm's queue forgets a job: sacct (cli) or the job's own markers (rest) still tell."""
    root, siteconf = storage
    job = cleanup_job(0, lfns_for(0, 1))
    make_files_of(root, job)
    cli = backend_for(slurm_cluster, "cli", tmp_path, siteconf, worker)
    batch_ids = cli.submit([job])
    wait_until(cli, batch_ids, terminal)
    # A batch id Slurm never had stands for a purged one: same job folder, unknown array id.
    purged = {job.job_id: "999999_0"}
    assert cli.poll(purged)[job.job_id].state == JobState.FINISHED  # sacct -c by the raw id the job recorded
    rest = backend_for(slurm_cluster, "rest", tmp_path, siteconf, worker)
    assert (rest.poll(purged)[job.job_id].state, rest.poll(purged)[job.job_id].exit_code) == (JobState.FINISHED, 0)
    never = {f"{RSE}:1700000000:77": "999998_0"}
    assert rest.poll(never)[f"{RSE}:1700000000:77"].state == JobState.VANISHED


def test_refusals_are_classified(slurm_cluster, tmp_path, storage, worker) -> None:
    from MSUnmerged.jobs.backend import BackendError

    _, siteconf = storage
    bogus = tmp_path / "bogus-token"
    bogus.write_text("not-a-jwt")
    backend = backend_for(slurm_cluster, "rest", tmp_path, siteconf, worker, token_file=str(bogus))
    with pytest.raises(BackendError) as err:
        backend.preflight()
    assert err.value.kind == "auth_refused"
    unreachable = backend_for(slurm_cluster, "rest", tmp_path, siteconf, worker, rest_url="http://127.0.0.1:9")
    with pytest.raises(BackendError) as err:
        unreachable.preflight()
    assert err.value.kind == "unreachable"
    bad_partition = backend_for(slurm_cluster, "cli", tmp_path, siteconf, worker, partition="nosuch")
    with pytest.raises(BackendError) as err:
        bad_partition.submit([cleanup_job(0, lfns_for(0, 1))])
    assert err.value.kind == "submit_failed"


def test_pending_on_a_drained_node_is_held_with_slurms_reason(slurm_cluster, transport, tmp_path, storage,
                                                              worker) -> None:
    root, siteconf = storage
    job = cleanup_job(0, lfns_for(0, 1))
    make_files_of(root, job)
    backend = backend_for(slurm_cluster, transport, tmp_path, siteconf, worker)
    slurm_cluster.run("scontrol", "update", f"nodename={slurm_cluster.node}", "state=drain",
                      "reason=msunmerged test: drained")
    try:
        batch_ids = backend.submit([job])
        status = wait_until(backend, batch_ids, lambda s: s.state == JobState.HELD, 60)[job.job_id]
        backend.remove(job.job_id, batch_ids[job.job_id], "test over")
    finally:
        slurm_cluster.resume_node()
    # Slurm's own words stay: the node is named unavailable (ReqNodeNotAvail, ...) or drained/down.
    assert "ReqNodeNotAvail" in status.reason or "DRAINED" in status.reason, status.reason
    assert (root / job.step.lfns[0].lstrip("/")).exists()


def test_unreachable_controller_over_the_cli_says_so(slurm_cluster, tmp_path, storage, worker) -> None:
    """A controller nobody answers for (a port nothing listens on): backend_unreachable with scontrol's words."""
    from MSUnmerged.jobs.backend import BackendError

    _, siteconf = storage
    conf = tmp_path / "slurm.conf"
    conf.write_text(slurm_cluster.conf.read_text() + "\nSlurmctldPort=9\n")
    backend = backend_for(slurm_cluster, "cli", tmp_path, siteconf, worker, command_prefix=f"env SLURM_CONF={conf} sh -c",
                          timeout_s=30.0)
    with pytest.raises(BackendError) as err:
        backend.preflight()
    assert err.value.kind == "unreachable" and "DOWN" in err.value.message, err.value.message


def test_arrays_split_by_size_and_resources(slurm_cluster, tmp_path, storage) -> None:
    root, siteconf = storage
    jobs = [cleanup_job(i, lfns_for(i, 1)) for i in range(3)]
    jobs.append(cleanup_job(3, lfns_for(3, 1), runtime_s=7200))  # other time limit: its own array
    for job in jobs:
        make_files_of(root, job)
    # No zipapp given: the backend builds the worker of this installation itself.
    backend = backend_for(slurm_cluster, "cli", tmp_path, siteconf, None, array_max_size=2)
    batch_ids = backend.submit(jobs)
    arrays = [batch_ids[j.job_id].split("_")[0] for j in jobs]
    assert arrays[0] == arrays[1] != arrays[2] != arrays[3] != arrays[0]
    assert [batch_ids[j.job_id].split("_")[1] for j in jobs] == ["0", "1", "0", "0"]
    limits = slurm_cluster.run("squeue", "-h", "-r", "-t", "all", "-j", ",".join(sorted(set(arrays))), "-o", "%i %l")
    assert f"{batch_ids[jobs[3].job_id]} 2:00:00" in limits and f"{batch_ids[jobs[0].job_id]} 1:00:00" in limits
    statuses = wait_until(backend, batch_ids, terminal)
    assert {s.state for s in statuses.values()} == {JobState.FINISHED}
    assert not any((root / job.step.lfns[0].lstrip("/")).exists() for job in jobs)


def test_proxy_travels_as_a_private_copy(slurm_cluster, tmp_path, storage, worker) -> None:
    """The storage credential goes into each job's folder readable by the job's user only, named by the
    environment (X509_USER_PROXY here); the worker finds it there."""
    root, siteconf = storage
    proxy = tmp_path / "x509up"
    proxy.write_text("-----BEGIN CERTIFICATE-----\nnot a real proxy\n-----END CERTIFICATE-----\n")
    jobs_cfg = JobsConfig(credential="proxy", proxy_file=str(proxy))
    job = cleanup_job(7, lfns_for(7, 2))
    make_files_of(root, job)
    backend = backend_for(slurm_cluster, "cli", tmp_path, siteconf, worker, jobs_cfg)
    ids = backend.submit([job])
    (status,) = wait_until(backend, ids, terminal).values()
    assert status.state is JobState.FINISHED and status.exit_code == 0
    jdir = Path(backend._job_dir(job.job_id))
    copy = jdir / "storage.proxy"
    assert copy.read_bytes() == proxy.read_bytes()
    assert copy.stat().st_mode & 0o777 == 0o600 and jdir.stat().st_mode & 0o077 == 0
    lines = [json.loads(x) for x in (jdir / "report.jsonl").read_text().splitlines()]
    assert lines[0]["start"]["credential"] == {"kind": "proxy", "file": str(copy), "mode": "0600"}
    assert "not a real proxy" not in (jdir / "manifest.json").read_text()
