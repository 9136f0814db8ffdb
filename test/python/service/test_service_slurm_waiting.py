"""Jobs pending at the REAL Slurm cluster (its node drained): re-checked against a fresh protected list while they
wait, removed and sent again when a file became protected or their manifest's list is getting old, their files'
tries unchanged; once the node takes jobs, the files protected meanwhile stay and the others are deleted."""
from __future__ import annotations

import time
from pathlib import Path

import pytest
from pymongo.database import Database

from MSUnmerged.config import Config
from MSUnmerged.jobs.backend import JobState
from MSUnmerged.jobs.slurm import SlurmBackend
from MSUnmerged.ledger import Ledger
from MSUnmerged.service import Service
from MSUnmerged.sources.offline import OfflineSources
from service_kit import make_site, write_sources
from test_service_protection_age import check_kept, protect, run_to_clean
from test_service_run import RSE

pytestmark = [pytest.mark.integration, pytest.mark.slow]  # the machine's Slurm cluster


def make_service(tmp_path: Path, db: Database, src: Path, cluster) -> Service:
    config = Config()
    config.service.state_dir = str(tmp_path / "state")
    config.service.dry_run = False
    config.service.lease_ttl_s = 10
    config.planner.files_per_job = 150
    config.jobs.backend = "slurm"
    make_site(tmp_path, src, RSE, config)
    config.slurm = cluster.settings("cli", tmp_path / "slurm-work")
    ledger = Ledger(db)
    ledger.ensure_indexes()
    return Service(config, ledger, OfflineSources(src), SlurmBackend(config.slurm, config.jobs), instance="slurm-test")


def pending(svc: Service) -> dict[str, JobState]:
    """The RSE's live jobs as Slurm sees them, once every one is in Slurm's queue."""
    live = {j["_id"]: j["batch_id"] for j in svc.ledger.base.jobs_in(RSE, [JobState.QUEUED, JobState.HELD])}
    deadline = time.monotonic() + 60
    while True:
        states = {j: s.state for j, s in svc.runner.jobs.backend.poll(live).items()}
        if set(states.values()) <= {JobState.QUEUED, JobState.HELD} or time.monotonic() > deadline:
            return states
        time.sleep(1)


def test_pending_slurm_jobs_are_re_checked_and_re_issued(slurm_cluster, tmp_path: Path, mongo_db: Database) -> None:
    src = write_sources(tmp_path / "src", [RSE], files=600)
    svc = make_service(tmp_path, mongo_db, src, slurm_cluster)
    slurm_cluster.run("scontrol", "update", f"nodename={slurm_cluster.node}", "state=drain",
                      "reason=msunmerged test: jobs pend")
    try:
        assert svc.runner.run_once(RSE).submitted >= 3
        jobs = sorted(j["_id"] for j in mongo_db.jobs.find())
        states = pending(svc)
        assert states and set(states.values()) <= {JobState.QUEUED, JobState.HELD}, states
        all_files = {lfn for jid in jobs for lfn in svc.ledger.rounds.job_lfns(jid)}
        hit = jobs[0]
        dirs = protect(src, [svc.ledger.rounds.job_lfns(hit)[0]])
        # A file of a pending job became protected: the job is removed, its file dropped, the rest sent again.
        second = svc.runner.run_once(RSE)
        assert (second.action, second.removed_jobs) == ("poll", 1) and second.dropped_protected > 0, second
        doc = mongo_db.jobs.find_one({"_id": hit})
        assert (doc["state"], doc["requeued"]) == ("planned", 1) and doc["reason"].startswith("revalidation: ")
        assert {d["error_class"] for d in Ledger(mongo_db).reads.file_records(RSE, state="skipped_protected")} == \
            {"protected_since_planning"}
        # A longer bound: every manifest still pending now has less than half of it left, and is sent again.
        svc.config.jobs.max_protection_age_s = 4 * 3600.0 * 2
        third = svc.runner.run_once(RSE)
        assert third.submitted == len(jobs), third
        docs = {d["_id"]: d for d in mongo_db.jobs.find()}
        assert all(d["requeued"] >= 1 and d["state"] == "queued" for d in docs.values())
        assert all(d["reason"].startswith("re-issued: ") for jid, d in docs.items() if jid != hit)
        assert {(r["state"], r.get("attempts", 1)) for r in Ledger(mongo_db).reads.file_records(RSE)
                if r["lfn"] in all_files and r["state"] != "skipped_protected"} == {("planned", 1)}
    finally:
        slurm_cluster.resume_node()
    run_to_clean(svc)
    check_kept(tmp_path, mongo_db, dirs, {lfn for lfn in all_files})


def test_a_pending_job_cancelled_by_someone_else_costs_no_try(slurm_cluster, tmp_path: Path,
                                                              mongo_db: Database) -> None:
    """Before: its files were charged a try (with jobs.retries = 0 the RSE ended done_with_errors, nothing deleted)
    though no worker ever ran; the job script's `started` marker says it never started."""
    src = write_sources(tmp_path / "src", [RSE], files=300)
    svc = make_service(tmp_path, mongo_db, src, slurm_cluster)
    svc.config.jobs.retries = 0
    slurm_cluster.run("scontrol", "update", f"nodename={slurm_cluster.node}", "state=drain",
                      "reason=msunmerged test: jobs pend")
    try:
        assert svc.runner.run_once(RSE).submitted >= 2
        pending(svc)
        cancelled = sorted(j["_id"] for j in mongo_db.jobs.find())[0]
        slurm_cluster.run("scancel", mongo_db.jobs.find_one({"_id": cancelled})["batch_id"])
        svc.runner.run_once(RSE)
        doc = mongo_db.jobs.find_one({"_id": cancelled})
        assert doc["requeued"] == 1 and doc["reason"].startswith("never started"), doc
        assert {(r["state"], r.get("attempts", 1)) for r in Ledger(mongo_db).reads.file_records(job=cancelled)} == \
            {("planned", 1)}
    finally:
        slurm_cluster.resume_node()
    run_to_clean(svc)
    assert {(r["state"], r.get("attempts", 1)) for r in Ledger(mongo_db).reads.file_records(RSE)} == {("deleted", 1)}
