"""The service against the REAL HTCondor pool: run_once submits through CondorBackend (routed by
wiring.make_router), the worker runs in the pool and deletes the site's files, collection records every
file's outcome; a service killed between submit and record is reconciled without a second job."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Callable, Optional

import pytest
from pymongo import MongoClient
from pymongo.database import Database

from MSUnmerged.cli import EXIT_AUTH
from MSUnmerged.cli.apply import exit_code
from MSUnmerged.config import Config
from MSUnmerged.ledger import Ledger
from MSUnmerged.service import Hook, Service
from MSUnmerged.sources.offline import OfflineSources, dump_file
from MSUnmerged.wiring import make_router
from servers.condor import JOB_UID, SITE, CondorPool
from MSUnmerged.samplesite import fill_storage, rescan, write_siteconf
from service_kit import chown_tree, write_sources

pytestmark = [pytest.mark.integration, pytest.mark.slow]
HERE = Path(__file__).resolve().parent
RSE = "T2_XX_Condor_Disk"  # the pool's slot is site T2_XX_Condor (servers/condor.py)
SITECONF = "/srv/siteconf"  # SITECONFIG_PATH the slot gives its jobs (inside the chroot)
STORAGE = "/srv/storage"
SITE_MATCH = "stringListMember(TARGET.GLIDEIN_CMSSite, MY.DESIRED_Sites)"

# The service process that dies right after the schedd accepted the jobs, before the ledger hears of it.
CHILD = """
import json, os, signal, sys
from pymongo import MongoClient
sys.path[:0] = [{here!r}]
from test_service_condor import make_service
args = json.loads(sys.argv[1])
def die(step, rse):
    if step == "submitted":
        os.kill(os.getpid(), signal.SIGKILL)
svc = make_service(args["tmp"], MongoClient(args["url"])[args["db"]], args["src"], args["tokens"], hook=die)
svc.runner.run_once(args["rse"])
"""


def make_service(tmp: str, db: Database, src: str, tokens: str, hook: Optional[Hook] = None,
                 configure: Optional[Callable[[Config], None]] = None) -> Service:
    """A service whose jobs go to the pool through the production routing (jobs.backend = condor);
    `configure` may change the configuration before the service is built."""
    config = Config()
    config.service.state_dir = str(Path(tmp) / "state")
    config.service.dry_run = False
    config.service.lease_ttl_s = 10
    config.planner.files_per_job = 20
    config.jobs.backend = "condor"
    config.condor.pool = "127.0.0.1:9618"
    config.condor.token_dir = tokens
    config.condor.requirements = SITE_MATCH
    config.condor.ping_timeout_s = 20
    if configure is not None:
        configure(config)
    ledger = Ledger(db)
    ledger.ensure_indexes()
    return Service(config, ledger, OfflineSources(src), make_router(config, ledger.instance_id()),
                   instance="condor-test", hook=hook)


@pytest.fixture
def site(condor_pool: CondorPool, tmp_path: Path) -> Path:
    """make_site for one test."""
    return make_site(condor_pool, tmp_path)


def make_site(condor_pool: CondorPool, tmp_path: Path) -> Path:
    """Sources for the RSE (a fresh dump version) and its files in the pool's storage folder."""
    src = write_sources(tmp_path / "src", [RSE], files=60)
    write_siteconf(condor_pool.inside(SITECONF), SITE, RSE, f"{SITE}_posix", STORAGE)
    storage = condor_pool.inside(STORAGE)
    fill_storage(storage, dump_file(src, RSE))
    chown_tree(storage, JOB_UID)  # jobs run as the pool's submitter account
    rescan(src, RSE, storage)  # the scan starts after the files exist and are chowned (workers check their ctime)
    return src


def run_to_end(svc: Service) -> None:
    for _ in range(6):
        result = svc.runner.run_once(RSE, wait_s=240)
        assert result.action != "failed", result
        if result.action == "finish":
            return
    raise AssertionError("run_once never finished the RSE")


def check_outcomes(pool: CondorPool, src: Path, db: Database) -> None:
    """Every planned file deleted at the site and recorded so, each in exactly one job."""
    files = Ledger(db).reads.file_records(RSE)
    assert files and {f["state"] for f in files} == {"deleted"}
    assert len({f["lfn"] for f in files}) == len(files)
    for f in files:
        assert not pool.inside(STORAGE + f["lfn"]).exists()
    kept = set(dump_file(src, RSE).read_text().split()) - {f["lfn"] for f in files}
    assert kept and all(pool.inside(STORAGE + lfn).exists() for lfn in kept)  # protected ones stay
    jobs = list(db.jobs.find({"rse": RSE}))
    assert {j["state"] for j in jobs} == {"finished"} and sum(j["files"] for j in jobs) == len(files)
    assert db.rses.find_one({"_id": RSE})["state"] == "clean"


def schedd_records(pool: CondorPool, job_ids: list[str]) -> dict[str, list[str]]:
    """job id -> the cluster.proc of every schedd record (queue and history) carrying it."""
    constraint = f'stringListMember(MSUnmergedJobId, "{",".join(job_ids)}")'
    out: dict[str, list[str]] = {j: [] for j in job_ids}
    for cmd in (["condor_q", "-allusers"], ["condor_history"]):
        for line in pool.run(*cmd, "-constraint", constraint, "-af", "MSUnmergedJobId", "ClusterId",
                             "ProcId").splitlines():
            jid, cluster, proc = line.split()
            out[jid].append(f"{cluster}.{proc}")
    return out


def test_run_once_submits_to_the_pool_and_records_every_file(condor_pool: CondorPool, site: Path, tmp_path: Path,
                                                             mongo_db: Database) -> None:
    svc = make_service(str(tmp_path), mongo_db, str(site), str(condor_pool.token_dir("submitter")))
    run_to_end(svc)
    svc.stop()
    check_outcomes(condor_pool, site, mongo_db)
    jobs = [j["_id"] for j in mongo_db.jobs.find()]
    assert all(len(v) == 1 for v in schedd_records(condor_pool, jobs).values())
    assert all(j["batch_id"].count("@") == 1 for j in mongo_db.jobs.find())


def test_killed_between_submit_and_record_is_reconciled(condor_pool: CondorPool, site: Path, tmp_path: Path,
                                                        mongo_url: str, mongo_client: MongoClient,
                                                        mongo_db: Database) -> None:
    tokens = str(condor_pool.token_dir("submitter"))
    args = {"tmp": str(tmp_path), "url": mongo_url, "db": mongo_db.name, "src": str(site), "tokens": tokens,
            "rse": RSE}
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), str(HERE.parent), str(HERE.parents[2] / "src" /
                                                                                          "python")])}
    done = subprocess.run([sys.executable, "-c", CHILD.format(here=str(HERE)), json.dumps(args)], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == -signal.SIGKILL, done.stderr[-3000:]
    pending = list(mongo_db.jobs.find({"state": "submitting"}))
    assert pending and not any(j.get("batch_id") for j in pending)  # the ledger never heard of the submit
    job_ids = [j["_id"] for j in pending]
    assert all(len(v) == 1 for v in schedd_records(condor_pool, job_ids).values())  # but the schedd has them

    svc = make_service(str(tmp_path), mongo_db, str(site), tokens)  # restart: reconciles via backend.find
    run_to_end(svc)
    svc.stop()
    records = schedd_records(condor_pool, [j["_id"] for j in mongo_db.jobs.find()])
    assert all(len(v) == 1 for v in records.values()), "a job was submitted twice"
    for jid in job_ids:  # adopted, not resubmitted
        assert mongo_db.jobs.find_one({"_id": jid})["batch_id"].split("@")[0] == records[jid][0]
    check_outcomes(condor_pool, site, mongo_db)


def test_refused_token_is_recorded_and_nothing_submitted(condor_pool: CondorPool, site: Path, tmp_path: Path,
                                                         mongo_db: Database) -> None:
    empty = tmp_path / "no-tokens"
    empty.mkdir(mode=0o700)
    svc = make_service(str(tmp_path), mongo_db, str(site), str(empty))
    result = svc.runner.run_once(RSE)
    svc.stop()
    assert (result.action, result.reason) == ("failed", "backend_auth_refused"), result
    assert exit_code(result) == EXIT_AUTH  # `msunmerged apply`/`clean`: renew the token, not "internal error"
    assert mongo_db.rses.find_one({"_id": RSE})["reason"] == "backend_auth_refused"
    assert mongo_db.jobs.count_documents({"state": {"$ne": "planned"}}) == 0


def test_the_service_keeps_max_in_flight_with_the_pool(condor_pool: CondorPool, site: Path, tmp_path: Path,
                                                       mongo_db: Database) -> None:
    """max_in_flight 1: the service submits one job at a time (topping up while it waits), each carrying the
    concurrency limit the pool enforces too; every file ends deleted as without the cap."""
    def capped(config: Config) -> None:
        config.jobs.max_in_flight = 1
    svc = make_service(str(tmp_path), mongo_db, str(site), str(condor_pool.token_dir("submitter")), configure=capped)
    run_to_end(svc)
    svc.stop()
    check_outcomes(condor_pool, site, mongo_db)
    jobs = list(mongo_db.jobs.find({"rse": RSE}))
    assert len(jobs) >= 2
    spans = [(j["intent_at"], j["finished_at"]) for j in jobs]
    assert max(sum(1 for a, b in spans if a <= t < b) for t, _ in spans) == 1
    limits = {line.split()[1] for line in condor_pool.run(
        "condor_history", "-constraint", f'stringListMember(MSUnmergedJobId, "{",".join(j["_id"] for j in jobs)}")',
        "-af", "MSUnmergedJobId", "ConcurrencyLimits").splitlines()}
    assert limits == {"msunmerged.t2_xx_condor_disk:0.666666667"}
