"""Batch-system faults against the REAL HTCondor pool, recorded as docs/jobs.md and docs/condor.md say, none of
them costing a file a try: a schedd the collector does not know (on the preflight path of a new plan), jobs the
schedd gives up on before they start, an expired storage token, and honest `submitted` counts."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pymongo.database import Database

from MSUnmerged.cli import EXIT_AUTH
from MSUnmerged.cli.apply import exit_code
from MSUnmerged.config import Config
from MSUnmerged.ledger import Ledger
from servers.condor import CondorPool
from test_service_condor import RSE, check_outcomes, make_service, run_to_end, site  # noqa: F401 (fixture)

pytestmark = [pytest.mark.integration, pytest.mark.slow]
# WLCG token shapes (header.payload.signature); the service and the worker read their exp claim only.
EXPIRED = "eyJhbGciOiJFUzI1NiJ9.eyJleHAiOjEwMDAwMDAwMDB9.c2ln"  # exp 2001-09-09
RENEWED = "eyJhbGciOiJFUzI1NiJ9.eyJleHAiOjQxMDI0NDQ4MDAsInNjb3BlIjoic3RvcmFnZS5tb2RpZnk6L3N0b3JlL3VubWVyZ2VkIn0.c2ln"


def tries(db: Database) -> set[tuple[str, int]]:
    """(state, attempts) of the RSE's files."""
    return {(f["state"], f.get("attempts", 1)) for f in Ledger(db).reads.file_records(RSE)}


def queued(pool: CondorPool, db: Database) -> list[str]:
    """Job ids of this ledger's RSE jobs in the schedd's queue."""
    ids = [j["_id"] for j in db.jobs.find({"rse": RSE})]
    if not ids:
        return []
    return pool.run("condor_q", "-allusers", "-constraint", f'stringListMember(MSUnmergedJobId, "{",".join(ids)}")',
                    "-af", "MSUnmergedJobId").split()


def test_unknown_schedd_is_unreachable_on_the_preflight_path(condor_pool: CondorPool, site: Path,  # noqa: F811
                                                             tmp_path: Path, mongo_db: Database) -> None:
    """Before: a new plan's preflight recorded backend_bad_answer ('NoneType' object has no attribute 'get')."""
    tokens = str(condor_pool.token_dir("submitter"))

    def gone(config: Config) -> None:
        config.condor.schedd = "stopped-schedd@nowhere"

    svc = make_service(str(tmp_path), mongo_db, str(site), tokens, configure=gone)
    for _ in range(3):
        result = svc.runner.run_once(RSE)
        assert (result.action, result.reason, result.source) == ("failed", "backend_unreachable", "backend"), result
        assert "stopped-schedd@nowhere" in result.detail and result.submitted == 0
    svc.stop()
    assert mongo_db.rses.find_one({"_id": RSE})["reason"] == "backend_unreachable"
    assert {j["state"] for j in mongo_db.jobs.find({"rse": RSE})} == {"planned"}
    assert tries(mongo_db) == {("planned", 1)}
    svc = make_service(str(tmp_path), mongo_db, str(site), tokens)  # the schedd is back
    run_to_end(svc)
    svc.stop()
    check_outcomes(condor_pool, site, mongo_db)
    assert tries(mongo_db) == {("deleted", 1)}


def test_jobs_removed_before_they_ran_are_not_a_try(condor_pool: CondorPool, site: Path,  # noqa: F811
                                                    tmp_path: Path, mongo_db: Database) -> None:
    """Before: three submissions the schedd gave up on (here an operator's condor_rm of idle jobs) made the
    RSE done_with_errors ("files failed on every try") though no job ever ran."""
    tokens = str(condor_pool.token_dir("submitter"))

    def idle(config: Config) -> None:
        config.condor.requirements = "False"  # no slot matches: the jobs stay idle

    svc = make_service(str(tmp_path), mongo_db, str(site), tokens, configure=idle)
    submitted = svc.runner.run_once(RSE).submitted
    assert submitted > 0
    for n in range(1, 4):
        ids = queued(condor_pool, mongo_db)
        assert len(ids) == submitted
        condor_pool.run("condor_rm", "-constraint", f'stringListMember(MSUnmergedJobId, "{",".join(ids)}")')
        result = svc.runner.run_once(RSE)
        assert result.action != "failed", result
        assert result.submitted == submitted  # planned again and sent again, in the same run
        jobs = list(mongo_db.jobs.find({"rse": RSE}))
        assert {j.get("requeued") for j in jobs} == {n} and all("never started" in j["reason"] for j in jobs)
        assert {j["state"] for j in jobs} == {"queued"}
        assert tries(mongo_db) == {("planned", 1)}
        assert mongo_db.rses.find_one({"_id": RSE})["state"] != "done_with_errors"
    svc.stop()
    # Once more, then a service whose jobs match the pool's slot: they run, in the files' first try.
    ids = queued(condor_pool, mongo_db)
    condor_pool.run("condor_rm", "-constraint", f'stringListMember(MSUnmergedJobId, "{",".join(ids)}")')
    svc = make_service(str(tmp_path), mongo_db, str(site), tokens)
    run_to_end(svc)
    svc.stop()
    check_outcomes(condor_pool, site, mongo_db)
    assert tries(mongo_db) == {("deleted", 1)}
    assert {j.get("requeued") for j in mongo_db.jobs.find({"rse": RSE})} == {4}


def test_expired_storage_token_submits_nothing_until_renewed(condor_pool: CondorPool, site: Path,  # noqa: F811
                                                             tmp_path: Path, mongo_db: Database) -> None:
    """Before: the expired token went out three times (every file auth_failed on every try) and after the renewal
    the RSE waited for a new dump."""
    token = tmp_path / "storage.token"
    token.write_text(EXPIRED)
    token.chmod(0o600)

    def with_token(config: Config) -> None:
        config.jobs.credential = "token"
        config.jobs.token_file = str(token)

    tokens = str(condor_pool.token_dir("submitter"))
    svc = make_service(str(tmp_path), mongo_db, str(site), tokens, configure=with_token)
    for _ in range(3):
        result = svc.runner.run_once(RSE)
        assert (result.action, result.reason) == ("failed", "backend_credential_expired"), result
        assert "2001-09-09" in result.detail and EXPIRED not in result.detail and result.submitted == 0
        assert exit_code(result) == EXIT_AUTH  # `msunmerged apply`/`clean`: renew the credential
    assert queued(condor_pool, mongo_db) == [] and {j["state"] for j in mongo_db.jobs.find()} == {"planned"}
    assert tries(mongo_db) == {("planned", 1)}
    generation = mongo_db.rses.find_one({"_id": RSE})["generation"]
    token.write_text(RENEWED)
    result = svc.runner.run_once(RSE, wait_s=240)
    assert result.action == "resume" and result.submitted > 0, result  # the same dump, no new plan
    run_to_end(svc)
    svc.stop()
    assert mongo_db.rses.find_one({"_id": RSE})["generation"] == generation
    check_outcomes(condor_pool, site, mongo_db)
    assert tries(mongo_db) == {("deleted", 1)}


def test_submitted_counts_the_jobs_a_reconciliation_sends(condor_pool: CondorPool, site: Path,  # noqa: F811
                                                         tmp_path: Path, mongo_db: Database) -> None:
    """Before: a run that submitted the jobs a crash had left `submitting` reported submitted: 0."""
    tokens = str(condor_pool.token_dir("submitter"))

    def idle(config: Config) -> None:
        config.condor.requirements = "False"
        config.planner.files_per_job = 5
        config.jobs.submit_batch = 3

    def crash(step: str, rse: str) -> None:
        if step == "intent":
            raise RuntimeError("killed after recording intent")

    svc = make_service(str(tmp_path), mongo_db, str(site), tokens, configure=idle, hook=crash)
    assert svc.runner.run_once(RSE).reason == "internal_error"
    svc.stop()
    pending = mongo_db.jobs.count_documents({"rse": RSE, "state": "submitting"})
    assert pending == 3 and queued(condor_pool, mongo_db) == []
    svc = make_service(str(tmp_path), mongo_db, str(site), tokens, configure=idle)
    result = svc.runner.run_once(RSE)
    assert result.submitted == pending == len(queued(condor_pool, mongo_db)), result
    later = svc.runner.run_once(RSE)  # the live jobs are polled; the planned ones wait for them
    assert later.submitted == 0 and later.reason == "jobs_running"
    svc.stop()
    live: dict[str, Any] = {j["_id"]: j["batch_id"] for j in mongo_db.jobs.find({"rse": RSE, "batch_id": {"$exists": 1}})}
    assert sorted(svc.runner.jobs.backend.remove_pending(live, "test cleanup")) == sorted(live)  # nothing of it stays queued
