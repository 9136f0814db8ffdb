"""CondorBackend against a real HTCondor pool: jobs run the worker in the pool and delete files of the "site".

Different identities are tried in different processes: the bindings cache authenticated sessions and the
security settings are process-wide.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable, Iterator, Mapping

import pytest

from MSUnmerged.config import CondorConfig, JobsConfig, SiteConfig
from MSUnmerged.jobs.backend import BackendError, JobState, JobStatus, wait_for
from MSUnmerged.jobs.condor import CondorBackend, htcondor2
from MSUnmerged.jobs.spec import CleanupJob, DeleteFilesStep
from MSUnmerged.jobs.workerpkg import build_worker
from MSUnmerged.samplesite import write_siteconf
from servers import free_port, run_script
from servers.condor import JOB_UID, SITE, CondorPool
from servers.testca import TestCA
from servers.xrootd import NamespaceForward, TokenXrootd

pytestmark = [pytest.mark.integration, pytest.mark.slow]  # starts the real HTCondor pool

RSE = "T2_XX_Condor_Disk"
# Only the test slot advertises this site: the requirement makes the job go there, as in production.
SITE_MATCH = "stringListMember(TARGET.GLIDEIN_CMSSite, MY.DESIRED_Sites)"
STORAGE = "/srv/storage"  # inside the pool's chroot

SITECONF = "/srv/siteconf"  # SITECONFIG_PATH the pool's slot gives its jobs


@pytest.fixture(scope="module")
def worker(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The real worker zipapp; it runs with the chroot's python3 inside the pool."""
    return build_worker(tmp_path_factory.mktemp("worker"))


@pytest.fixture(scope="module")
def site(condor_pool: CondorPool) -> Path:
    """The site's own configuration inside the pool: posix storage under /srv/storage."""
    write_siteconf(condor_pool.inside(SITECONF), SITE, RSE, f"{SITE}_posix", STORAGE)
    storage = condor_pool.inside(STORAGE)
    storage.mkdir(parents=True, exist_ok=True)
    os.chown(storage, JOB_UID, JOB_UID)
    return storage


@pytest.fixture
def make_files(condor_pool: CondorPool, site: Path) -> Callable[[list[str]], None]:
    def make(lfns: list[str]) -> None:
        for lfn in lfns:
            path = condor_pool.inside(STORAGE + lfn)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("x")
        for dirpath, _, files in os.walk(site):
            os.chown(dirpath, JOB_UID, JOB_UID)
            for f in files:
                os.chown(os.path.join(dirpath, f), JOB_UID, JOB_UID)
    return make


def config(pool: CondorPool, token_dir: Path | str, requirements: str = SITE_MATCH, **kw: object) -> CondorConfig:
    return CondorConfig(pool=pool.pool, token_dir=str(token_dir), requirements=requirements, **kw)


@pytest.fixture
def backend(condor_pool: CondorPool, worker: Path, tmp_path: Path) -> CondorBackend:
    return CondorBackend(config(condor_pool, condor_pool.token_dir("submitter")), JobsConfig(), tmp_path / "work",
                         worker=worker)


def make_jobs(tag: str, lfn_sets: list[list[str]], deadline_s: float = 3600) -> list[CleanupJob]:
    return [CleanupJob(job_id=f"{RSE}:{tag}:{i}", rse=RSE, site=SITE, deadline=time.time() + deadline_s,
                       step=DeleteFilesStep(lfns=lfns, dry_run=False, scan_started=time.time()))
            for i, lfns in enumerate(lfn_sets)]


def wait_until(backend: CondorBackend, ids: Mapping[str, str], done: Callable[[JobStatus], bool],
               timeout: float = 180) -> dict[str, JobStatus]:
    states = wait_for(backend, ids, timeout, done, interval=1)
    assert all(done(s) for s in states.values()), f"jobs not done after {timeout} s: {states}"
    return states


def tag() -> str:
    return f"{time.time():.6f}"


def queue(pool: CondorPool, constraint: str) -> list[str]:
    return pool.run("condor_q", "-allusers", "-constraint", constraint, "-af", "MSUnmergedJobId").split()


def test_jobs_delete_files_and_reports_come_back(condor_pool: CondorPool, backend: CondorBackend,
                                                  make_files: Callable[[list[str]], None], tmp_path: Path) -> None:
    t = tag()
    sets = [[f"/store/unmerged/E/P/T/p-v1/{t}/{j}/f{i}.root" for i in range(3)] for j in range(3)]
    make_files([lfn for s in sets for lfn in s])
    sets[2].append(f"/store/unmerged/E/P/T/p-v1/{t}/2/never-there.root")
    jobs = make_jobs(t, sets)
    emptied = f"/store/unmerged/E/P/T/p-v1/{t}/0"
    jobs[0].step.remove_dirs = [emptied]
    backend.preflight(RSE)
    ids = backend.submit(jobs)
    clusters = {b.split(".")[0] for b in ids.values()}
    assert len(ids) == 3 and len(clusters) == 1  # one cluster through itemdata
    assert backend.find([j.job_id for j in jobs]) == ids

    states = wait_until(backend, ids, lambda s: s.state.terminal)
    assert {s.state for s in states.values()} == {JobState.FINISHED}
    assert all(s.exit_code == 0 for s in states.values())
    for job in jobs:
        report = backend.fetch_report(job.job_id, ids[job.job_id], tmp_path / "reports" / f"{job.step.lfns[0][-8:]}")
        assert report is not None
        lines = [json.loads(line) for line in report.read_text().splitlines()]
        outcomes = {r["lfn"]: r["outcome"] for r in lines if "lfn" in r}
        expected = {lfn: "missing" if "never-there" in lfn else "deleted" for lfn in job.step.lfns}
        assert outcomes == expected
        assert lines[-1]["exit_code"] == 0
        assert (backend.job_dir(job.job_id) / "job.err").read_text() == ""  # retrieved with the report
        backend.remove(job.job_id, ids[job.job_id], "collected")
    for lfn in (lfn for s in sets for lfn in s):
        assert not condor_pool.inside(STORAGE + lfn).exists()
    assert not condor_pool.inside(STORAGE + emptied).exists()  # the worker removed the emptied directory
    assert condor_pool.inside(STORAGE + f"/store/unmerged/E/P/T/p-v1/{t}/1").is_dir()
    assert queue(condor_pool, f"ClusterId == {clusters.pop()}") == []
    # Gone from the queue, still known from the history (crash reconciliation).
    assert backend.find([j.job_id for j in jobs]) == ids


def test_held_job_is_recorded_with_reason(condor_pool: CondorPool, backend: CondorBackend) -> None:
    (job,) = make_jobs(tag(), [["/store/unmerged/E/P/T/p-v1/held.root"]])
    backend.condor.requirements = "False"  # never matches: the job stays idle until we hold it
    ids = backend.submit([job])
    cluster_proc = ids[job.job_id].split("@")[0]
    wait_until(backend, ids, lambda s: s.state is JobState.QUEUED and s.reason == "", timeout=30)
    condor_pool.run("condor_hold", "-reason", "operator says wait", cluster_proc)
    (status,) = wait_until(backend, ids, lambda s: s.state is JobState.HELD, timeout=30).values()
    assert "operator says wait" in status.reason
    backend.remove(job.job_id, ids[job.job_id], "held too long")
    (status,) = backend.poll(ids).values()
    assert status.state is JobState.REMOVED and status.reason.startswith("MSUnmerged: held too long")


def test_revalidation_removes_only_jobs_not_started(condor_pool: CondorPool, backend: CondorBackend,
                                                     make_files: Callable[[list[str]], None]) -> None:
    t = tag()
    blocker = f"/store/unmerged/E/P/T/p-v1/{t}/blocker.root"
    make_files([blocker])
    backend.condor.requirements = "False"
    waiting = backend.submit(make_jobs(t, [[f"/store/unmerged/E/P/T/p-v1/{t}/q{i}.root"] for i in range(2)]))
    wait_until(backend, waiting, lambda s: s.state is JobState.QUEUED and s.reason == "", timeout=30)
    assert {s.state for s in backend.poll(waiting).values()} == {JobState.QUEUED}
    removed = backend.remove_pending(waiting, "revalidation: file became protected")
    assert sorted(removed) == sorted(waiting)
    states = backend.poll(waiting)
    assert all(s.state is JobState.REMOVED for s in states.values())


def test_vanished_job(backend: CondorBackend, condor_pool: CondorPool) -> None:
    states = backend.poll({f"{RSE}:never:0": "999999.0@" + condor_pool.run("condor_status", "-schedd", "-af",
                                                                           "Name").strip()})
    assert [s.state for s in states.values()] == [JobState.VANISHED]


# ----- refusals and crashes: each identity in its own process ------------------------------------------------

CHILD = """
import json, sys, time
from pathlib import Path
from MSUnmerged.config import CondorConfig, JobsConfig
from MSUnmerged.jobs.backend import BackendError
from MSUnmerged.jobs.condor import CondorBackend, htcondor2
from MSUnmerged.jobs.spec import CleanupJob, DeleteFilesStep
from MSUnmerged.jobs.workerpkg import build_worker
args = json.loads(sys.argv[1])
backend = CondorBackend(CondorConfig(**args["condor"]), JobsConfig(), Path(args["workdir"]), worker=Path(args["worker"]))
jobs = [CleanupJob(job_id=j, rse=args["rse"], site=args["site"], deadline=time.time() + 3600,
                   step=DeleteFilesStep(lfns=["/store/unmerged/E/P/T/p-v1/x.root"], scan_started=time.time()))
            for j in args["job_ids"]]
out = {}
for step in args["steps"]:
    try:
        if step == "preflight":
            backend.preflight(args["rse"])
            out[step] = "ok"
        elif step == "submit":
            out[step] = backend.submit(jobs)
            print(json.dumps(out), flush=True)
            time.sleep(3600)  # where the service would record the batch ids: killed before it does
    except BackendError as exc:
        out[step] = {"kind": exc.kind, "message": exc.message}
print(json.dumps(out), flush=True)
"""


def child(args: dict, timeout: float = 120) -> dict:
    done = subprocess.run([sys.executable, "-c", CHILD, json.dumps(args)], capture_output=True, text=True,
                          timeout=timeout)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def refusal_args(pool: CondorPool, worker: Path, tmp_path: Path, token_dir: str, job_id: str,
                 pool_address: str | None = None) -> dict:
    return {"condor": {"pool": pool_address or pool.pool, "token_dir": token_dir, "ping_timeout_s": 8,
                       "requirements": "False"},
            "workdir": str(tmp_path / "child"), "worker": str(worker), "rse": RSE, "site": pool.site,
            "job_ids": [job_id], "steps": ["preflight", "submit"]}


@pytest.mark.parametrize("who,kind", [("nobody", "auth_refused"), ("intruder", "auth_denied"),
                                      ("unreachable", "unreachable")])
def test_refusals_are_classified_and_nothing_is_submitted(condor_pool: CondorPool, backend: CondorBackend,
                                                          worker: Path, tmp_path: Path, who: str, kind: str) -> None:
    job_id = f"{RSE}:refused-{who}:{tag()}"
    if who == "nobody":
        token_dir, address = tmp_path / "empty-tokens", None
        token_dir.mkdir()
    elif who == "intruder":
        token_dir, address = condor_pool.token_dir("intruder"), None
    else:
        token_dir, address = condor_pool.token_dir("submitter"), f"127.0.0.1:{free_port()}"
    out = child(refusal_args(condor_pool, worker, tmp_path, str(token_dir), job_id, address))
    assert out["preflight"]["kind"] == kind, out
    assert out["submit"]["kind"] == kind, out  # the submit itself is refused the same way
    assert "eyJ" not in json.dumps(out)  # no token text in any message
    assert backend.find([job_id]) == {}


@pytest.fixture
def silent_port() -> Iterator[tuple[int, threading.Event]]:
    """A port that accepts connections and never answers, like a hung schedd or collector (and an event set
    at its first connection)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    held: list[socket.socket] = []
    stop = threading.Event()
    connected = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
                connected.set()
            except OSError:
                pass

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield server.getsockname()[1], connected
    stop.set()
    thread.join()
    for s in held:
        s.close()
    server.close()


def test_silent_schedd_times_out_without_stalling_others(condor_pool: CondorPool, backend: CondorBackend,
                                                         worker: Path, silent_port: tuple[int, threading.Event],
                                                         tmp_path: Path) -> None:
    # A ping timeout long enough that the healthy site's check (however loaded the machine) ends while the
    # silent one still waits, and shorter than the bindings' own ~20 s: only order and outcomes are asserted.
    port, connected = silent_port
    jobs = JobsConfig(sites={"T2_XX_Hung": SiteConfig(site="T2_XX_Hung", pool=f"127.0.0.1:{port}")})
    cfg = config(condor_pool, condor_pool.token_dir("submitter"), ping_timeout_s=15)
    two = CondorBackend(cfg, jobs, tmp_path / "work2", worker=worker)
    results: dict[str, object] = {}

    def check(rse: str) -> None:
        try:
            two.preflight(rse)
            results[rse] = "ok"
        except BackendError as exc:
            results[rse] = exc.kind

    hung = threading.Thread(target=check, args=("T2_XX_Hung",))
    hung.start()
    assert connected.wait(60), "the silent site's check never connected"
    check(RSE)
    assert results[RSE] == "ok" and hung.is_alive(), "the healthy site waited for the silent one"
    hung.join(120)  # bounds a hang: the silent site's check must end, by its own timeout
    assert not hung.is_alive() and results["T2_XX_Hung"] == "timeout"


def test_crash_between_submit_and_record_is_reconciled(condor_pool: CondorPool, backend: CondorBackend,
                                                       worker: Path, tmp_path: Path) -> None:
    t = tag()
    job_ids = [f"{RSE}:crash-{t}:{i}" for i in range(3)]
    args = refusal_args(condor_pool, worker, tmp_path, str(condor_pool.token_dir("submitter")), "")
    args.update(job_ids=job_ids, steps=["submit"])
    proc = subprocess.Popen([sys.executable, "-c", CHILD, json.dumps(args)], stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()  # type: ignore[union-attr]
        submitted = json.loads(line)["submit"]
    finally:
        proc.send_signal(signal.SIGKILL)  # dies before recording anything
        proc.wait(10)
    # The restarted service asks before resubmitting: every job is there, each exactly once.
    found = backend.find(job_ids + [f"{RSE}:crash-{t}:never"])
    assert found == submitted
    assert sorted(queue(condor_pool, f'stringListMember(MSUnmergedJobId, "{",".join(job_ids)}")')) == sorted(job_ids)
    assert {s.state for s in backend.poll(found).values()} == {JobState.QUEUED}
    assert sorted(backend.remove_pending(found, "test cleanup")) == sorted(job_ids)


# ----- what a job carries to its site; schedds that are gone; two ledgers on one schedd -----------------------

SERVICE_SITECONF = "/srv/siteconf-service"  # the service's per-site setting, not the slot's SITECONFIG_PATH
SERVICE_STORAGE = "/srv/storage-service"


@pytest.mark.parametrize("kind", ["token", "proxy"])
def test_site_config_and_credential_reach_the_job(condor_pool: CondorPool, worker: Path, tmp_path: Path,
                                                  kind: str, request: pytest.FixtureRequest) -> None:
    """The service's site config becomes the job's SITECONFIG_PATH (its storage is the one emptied); the token
    arrives as an input file, the proxy delegated by HTCondor (x509userproxy), each 0600 in the sandbox."""
    write_siteconf(condor_pool.inside(SERVICE_SITECONF), SITE, RSE, f"{SITE}_posix", SERVICE_STORAGE)
    t = tag()
    lfns = [f"/store/unmerged/E/P/T/p-v1/{t}/f{i}.root" for i in range(3)]
    for lfn in lfns:
        path = condor_pool.inside(SERVICE_STORAGE + lfn)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("x")
    for dirpath, _, names in os.walk(condor_pool.inside(SERVICE_STORAGE)):
        os.chown(dirpath, JOB_UID, JOB_UID)
        for name in names:
            os.chown(os.path.join(dirpath, name), JOB_UID, JOB_UID)
    if kind == "token":
        source = tmp_path / "service-token"
        source.write_text("eyJhbGciOiJFUzI1NiJ9.eyJzY29wZSI6InN0b3JhZ2UubW9kaWZ5Oi9zdG9yZS91bm1lcmdlZCJ9.c2ln")
    else:
        ca = TestCA(tmp_path / "pki", rsa_keys=True)
        source = ca.proxy(ca.issue("msunmerged robot"))
        request.addfinalizer(lambda: htcondor2.param.__setitem__("DELEGATE_JOB_GSI_CREDENTIALS", "True"))
    secret = max(source.read_text().splitlines(), key=len)  # the token, or a line of the proxy
    jobs = JobsConfig(credential=kind, token_file=str(source), proxy_file=str(source),
                      sites={RSE: SiteConfig(siteconfig=SERVICE_SITECONF)})
    # The test pool's schedd (minicondor 23.9 in a chroot) fails to accept a delegated proxy
    # ("X509Credential::Request() failed"): condor.delegate_proxy = false copies it over the authenticated channel.
    backend = CondorBackend(config(condor_pool, condor_pool.token_dir("submitter"), delegate_proxy=False), jobs,
                            tmp_path / "work", worker=worker)
    (job,) = make_jobs(t, [lfns])
    ids = backend.submit([job])
    jdir = backend.job_dir(job.job_id)
    assert jdir.stat().st_mode & 0o777 == 0o700 and not list(jdir.glob("storage.*"))  # spooled, then gone
    (status,) = wait_until(backend, ids, lambda s: s.state.terminal).values()
    assert status.state is JobState.FINISHED and status.exit_code == 0
    report = backend.fetch_report(job.job_id, ids[job.job_id], tmp_path / "report.jsonl")
    lines = [json.loads(line) for line in report.read_text().splitlines()]  # type: ignore[union-attr]
    cred = lines[0]["start"]["credential"]
    # On the execute side: BEARER_TOKEN_FILE / X509_USER_PROXY name the sandbox's copy, the job's user's only.
    assert cred["kind"] == kind and cred["mode"] == "0600", cred
    assert cred["file"].endswith("/storage.token") if kind == "token" else "/" in cred["file"]
    assert not cred["file"].startswith(str(tmp_path))
    assert {r["outcome"] for r in lines if "lfn" in r} == {"deleted"}
    assert not any(condor_pool.inside(SERVICE_STORAGE + lfn).exists() for lfn in lfns)
    assert secret not in report.read_text() and secret not in (jdir / "manifest.json").read_text()  # type: ignore
    backend.remove(job.job_id, ids[job.job_id], "collected")


def test_a_schedd_the_collector_does_not_know_is_unreachable(condor_pool: CondorPool, worker: Path,
                                                             tmp_path: Path) -> None:
    cfg = config(condor_pool, condor_pool.token_dir("submitter"))
    cfg.schedd = "stopped-schedd@nowhere"
    backend = CondorBackend(cfg, JobsConfig(), tmp_path / "work", worker=worker)
    with pytest.raises(BackendError) as err:
        backend.submit(make_jobs(tag(), [["/store/unmerged/E/P/T/p-v1/x.root"]]))
    assert err.value.kind == "unreachable" and "stopped-schedd@nowhere" in err.value.message
    with pytest.raises(BackendError) as err:
        backend.find([f"{RSE}:x:0"])
    assert err.value.kind == "unreachable"
    # Every other path says the same; before, the preflight of a new plan said bad_answer ('NoneType' ...).
    batch = {f"{RSE}:x:0": "1.0@stopped-schedd@nowhere"}
    for call in (lambda: backend.preflight(RSE), lambda: backend.poll(batch),
                 lambda: backend.remove(f"{RSE}:x:0", batch[f"{RSE}:x:0"], "test"),
                 lambda: backend.remove_pending(batch, "test"),
                 lambda: backend.fetch_report(f"{RSE}:x:0", batch[f"{RSE}:x:0"], tmp_path / "r.jsonl")):
        with pytest.raises(BackendError) as err:
            call()
        assert err.value.kind == "unreachable" and "stopped-schedd@nowhere" in err.value.message, err.value


def test_two_ledgers_on_one_schedd_never_see_each_others_jobs(condor_pool: CondorPool, worker: Path,
                                                              tmp_path: Path) -> None:
    cfg = config(condor_pool, condor_pool.token_dir("submitter"), requirements="False")  # stays idle
    one = CondorBackend(cfg, JobsConfig(), tmp_path / "one", worker=worker, ledger_id="ledgerone")
    two = CondorBackend(cfg, JobsConfig(), tmp_path / "two", worker=worker, ledger_id="ledgertwo")
    jobs = make_jobs(tag(), [["/store/unmerged/E/P/T/p-v1/a.root"]])  # the same job id in both ledgers
    ids = one.submit(jobs)
    assert one.find([jobs[0].job_id]) == ids
    assert two.find([jobs[0].job_id]) == {}  # ledger two would submit its own job: right
    assert [s.state for s in two.poll(ids).values()] == [JobState.VANISHED]
    assert two.remove_pending(ids, "not mine") == []
    assert [s.state for s in one.poll(ids).values()] == [JobState.QUEUED]
    assert one.remove_pending(ids, "test cleanup") == [jobs[0].job_id]


def test_a_proxy_the_schedd_cannot_take_by_delegation_is_a_classified_failure(condor_pool: CondorPool, worker: Path,
                                                                              tmp_path: Path) -> None:
    """condor.delegate_proxy = true (the default) on a schedd that cannot accept a delegated proxy: the submission
    fails with a named kind and nothing stays queued (delegate_proxy = false is the remedy, tested above)."""
    ca = TestCA(tmp_path / "pki", rsa_keys=True)
    jobs = JobsConfig(credential="proxy", proxy_file=str(ca.proxy(ca.issue("msunmerged robot"))))
    backend = CondorBackend(config(condor_pool, condor_pool.token_dir("submitter"), requirements="False"), jobs,
                            tmp_path / "work", worker=worker)
    assert htcondor2.param["DELEGATE_JOB_GSI_CREDENTIALS"] in (True, "True")
    job = make_jobs(tag(), [["/store/unmerged/E/P/T/p-v1/x.root"]])
    with pytest.raises(BackendError) as err:
        backend.submit(job)
    assert err.value.kind == "submit_failed", err.value
    assert queue(condor_pool, f'MSUnmergedJobId == "{job[0].job_id}"') == []


TOKEN_SITECONF = "/srv/siteconf-token"  # inside the pool's chroot


def test_a_condor_job_deletes_on_the_token_xrootd(condor_pool: CondorPool, token_xrootd: TokenXrootd, worker: Path,
                                                  tmp_path: Path) -> None:
    """A cleanup job in the pool deletes its files on the token-protected xrootd (ztn over TLS, SciTokens) with
    the service's storage token, scoped storage.modify:/store/unmerged, which travels with it; what it was not
    given and what lies outside /store/unmerged stays. The site's XRootD stage-out reaches the server through a
    loopback port of the host (NamespaceForward); the site's trust store (XrdCl's default) holds the test CA."""
    run_script("condor-pool.sh", "tools")  # xrdfs and its ztn plugin in the pool's chroot
    server = token_xrootd.server
    forward = NamespaceForward(server.pid)
    trust = condor_pool.inside("/etc/grid-security/certificates")
    trust.mkdir(parents=True, exist_ok=True)
    trusted = []
    for entry in token_xrootd.ca.ca_dir.iterdir():
        if entry.is_symlink():  # <hash>.0 -> ca.pem: this session's CA under its own hash
            trusted.append(trust / entry.name)
            shutil.copyfile(entry.resolve(), trusted[-1])
    try:
        endpoint = f"root://127.0.0.1:{forward.port}"
        conf = condor_pool.inside(TOKEN_SITECONF)
        (conf / "JobConfig").mkdir(parents=True, exist_ok=True)
        (conf / "JobConfig" / "site-local-config.xml").write_text(
            f'<site-local-config><site name="{SITE}"><stage-out><method volume="Token_Disk" protocol="XRootD" '
            f'command="xrdcp"/></stage-out></site></site-local-config>')
        (conf / "storage.json").write_text(json.dumps([{"site": SITE, "volume": "Token_Disk", "rse": RSE, "type": "DISK",
                                                         "protocols": [{"protocol": "XRootD", "access": "global-rw",
                                                                        "prefix": endpoint + "/"}]}]))
        t = tag()
        lfns = [f"/store/unmerged/E/Token/AODSIM/p-v1/{t}/f{i}.root" for i in range(20)]
        planned = [server.put(lfn) for lfn in lfns]
        others = [server.put(f"/store/unmerged/E/Token/AODSIM/p-v1/{t}/not-planned.root"),
                  server.put(f"/store/data/E/Token/AODSIM/v1/{t}/precious.root")]
        time.sleep(1.2)  # the scan the plan comes from starts after they were written (xrootd: whole seconds)
        scanned = time.time()
        token = tmp_path / "storage-token"
        token.write_text(token_xrootd.issuer.mint(lifetime=3600))
        token.chmod(0o600)
        jobs = JobsConfig(credential="token", token_file=str(token), sites={RSE: SiteConfig(siteconfig=TOKEN_SITECONF)})
        backend = CondorBackend(config(condor_pool, condor_pool.token_dir("submitter")), jobs, tmp_path / "work",
                                worker=worker)
        job = CleanupJob(job_id=f"{RSE}:token-{t}:0", rse=RSE, site=SITE, deadline=time.time() + 3600,
                         step=DeleteFilesStep(lfns=lfns, dry_run=False, unmerged_pfn=f"{endpoint}//store/unmerged/",
                                              mapping_check="rucio", scan_started=scanned))
        ids = backend.submit([job])
        (status,) = wait_until(backend, ids, lambda s: s.state.terminal, timeout=240).values()
        report = backend.fetch_report(job.job_id, ids[job.job_id], tmp_path / "report.jsonl")
        lines = [json.loads(line) for line in report.read_text().splitlines()]  # type: ignore[union-attr]
        assert (status.state, status.exit_code) == (JobState.FINISHED, 0), lines[-1]
        start = lines[0]["start"]
        assert start["credential"]["kind"] == "token" and start["credential"]["mode"] == "0600"
        assert (start["method"]["deleter"], start["method"]["choice"]["rule"]) == ("xrootd", "same_pfn")
        assert {r["outcome"] for r in lines if "lfn" in r} == {"deleted"}
        assert not any(p.exists() for p in planned) and all(p.exists() for p in others)
        assert token.read_text() not in report.read_text()  # type: ignore[union-attr]
        backend.remove(job.job_id, ids[job.job_id], "collected")
    finally:
        forward.close()
        for path in trusted:
            path.unlink(missing_ok=True)


def test_the_pool_runs_at_most_max_in_flight_jobs_of_an_rse(condor_pool: CondorPool, worker: Path, tmp_path: Path,
                                                             make_files: Callable[[list[str]], None]) -> None:
    """jobs.sites.<RSE>.max_in_flight becomes a concurrency limit the pool's negotiator enforces (the service's own
    cap is bypassed here: three jobs go to the schedd at once), with two free cores for them."""
    assert condor_pool.run("condor_config_val", "-negotiator", "CONCURRENCY_LIMIT_DEFAULT_MSUNMERGED").strip() == "1"
    jobs_cfg = JobsConfig(sites={RSE: SiteConfig(max_in_flight=1)})
    backend = CondorBackend(config(condor_pool, condor_pool.token_dir("submitter")), jobs_cfg, tmp_path / "work",
                            worker=worker)
    t = tag()
    sets = [[f"/store/unmerged/E/P/T/cap-v1/{t}/{j}/f{i}.root" for i in range(8)] for j in range(3)]
    make_files([lfn for s in sets for lfn in s])
    jobs = make_jobs(t, sets)
    for job in jobs:
        job.step.max_ops_per_s = 4.0  # paced: each job lasts about four seconds
    ids = backend.submit(jobs)
    limits = {line.strip() for line in condor_pool.run(
        "condor_q", "-allusers", "-constraint", f"ClusterId == {next(iter(ids.values())).split('.')[0]}",
        "-af", "ConcurrencyLimits").splitlines()}
    assert limits == {"msunmerged.t2_xx_condor_disk:0.666666667"}  # lower-cased by the schedd
    states = wait_until(backend, ids, lambda s: s.state.terminal, timeout=300)
    assert {s.state for s in states.values()} == {JobState.FINISHED}
    spans = []
    for job in jobs:
        report = backend.fetch_report(job.job_id, ids[job.job_id], tmp_path / "reports" / job.job_id.replace(":", "_"))
        lines = [json.loads(line) for line in report.read_text().splitlines()]
        start, end = lines[0]["start"]["time"], lines[-1]["summary"]["seconds"]
        spans.append((start, start + end))
        assert {x["outcome"] for x in lines if "lfn" in x} == {"deleted"}
        backend.remove(job.job_id, ids[job.job_id], "collected")
    assert max(sum(1 for a, b in spans if a <= t0 < b) for t0, _ in spans) == 1
