"""Jobs idle at the REAL HTCondor schedd (no slot matches them): re-checked against a fresh protected list while they
wait, removed and sent again when a file became protected or their manifest's list is getting old, their files'
tries unchanged; once they match the pool's slot, the files protected meanwhile stay and the others are deleted.
The scenario runs once (`waited`, what it saw); each test asserts one behaviour of it."""
from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any, Iterator

import pytest
from pymongo import MongoClient

from MSUnmerged.config import Config
from MSUnmerged.ledger import Ledger
from MSUnmerged.service import RunResult
from MSUnmerged.sources.offline import dump_file
from servers.condor import CondorPool
from test_service_condor import RSE, STORAGE, make_service, make_site, run_to_end
from test_service_protection_age import protect

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@dataclass
class Waited:
    """What the scenario observed: the runs while the jobs were idle, the hit job's document then, and at the end
    every job document, file record, which of the jobs' files storage still holds and the RSE's dump."""

    first: RunResult
    second: RunResult
    hit_doc: dict[str, Any]
    all_files: set[str]
    dirs: list[str]
    docs: list[dict[str, Any]]
    records: list[dict[str, Any]]
    on_storage: set[str]
    dumped: set[str]


@pytest.fixture(scope="module")
def waited(condor_pool: CondorPool, tmp_path_factory: pytest.TempPathFactory,
           mongo_client: MongoClient) -> Iterator[Waited]:
    """The scenario, run once: jobs kept idle, one file of one of them protected meanwhile, then a service whose
    jobs match the slot and whose bound the idle manifests have less than half of."""
    tmp_path = tmp_path_factory.mktemp("waiting")
    site = make_site(condor_pool, tmp_path)
    db = mongo_client[f"t_{uuid.uuid4().hex[:12]}"]
    tokens = str(condor_pool.token_dir("submitter"))

    def idle(config: Config) -> None:
        config.condor.requirements = "False"  # no slot matches: the jobs stay idle

    def back(config: Config) -> None:  # jobs that match the slot, and a bound the idle manifests have < half of
        config.jobs.max_protection_age_s = 4 * 3600.0 * 2

    try:
        svc = make_service(str(tmp_path), db, str(site), tokens, configure=idle)
        first = svc.runner.run_once(RSE)
        jobs = sorted(j["_id"] for j in db.jobs.find())
        all_files = {lfn for jid in jobs for lfn in svc.ledger.rounds.job_lfns(jid)}
        hit = jobs[0]
        dirs = protect(site, [svc.ledger.rounds.job_lfns(hit)[0]])
        # A file of an idle job became protected: the job is removed, its file dropped, the rest planned again.
        second = svc.runner.run_once(RSE)
        hit_doc = db.jobs.find_one({"_id": hit})
        svc.stop()

        svc = make_service(str(tmp_path), db, str(site), tokens, configure=back)
        svc.runner.run_once(RSE)  # re-issues the idle jobs now, without first waiting on jobs that cannot start
        run_to_end(svc)
        svc.stop()
        yield Waited(first, second, hit_doc, all_files, dirs, list(db.jobs.find()), Ledger(db).reads.file_records(RSE),
                     {lfn for lfn in all_files if condor_pool.inside(STORAGE + lfn).exists()},
                     set(dump_file(site, RSE).read_text().split()))
    finally:
        mongo_client.drop_database(db.name)


def test_idle_jobs_are_submitted(waited: Waited) -> None:
    assert waited.first.submitted >= 2


def test_a_file_protected_meanwhile_removes_its_idle_job(waited: Waited) -> None:
    assert waited.second.removed_jobs == 1 and waited.second.dropped_protected > 0, waited.second
    assert waited.hit_doc["requeued"] == 1 and waited.hit_doc["reason"].startswith("revalidation: ")


def test_every_idle_job_is_sent_again_before_it_runs(waited: Waited) -> None:
    # The hit one without its protected files, the others because their manifests had less than half of the (new)
    # bound left.
    assert all(d.get("requeued", 0) >= 1 and d["state"] == "finished" for d in waited.docs)


def kept_files(waited: Waited) -> set[str]:
    """The jobs' files under the directories protected while they waited."""
    return {r["lfn"] for r in waited.records
            if r["lfn"] in waited.all_files and any(r["lfn"].startswith(d + "/") for d in waited.dirs)}


def test_files_protected_meanwhile_stay_skipped(waited: Waited) -> None:
    kept = kept_files(waited)
    assert kept and kept <= waited.on_storage
    assert {(r["state"], r.get("error_class")) for r in waited.records if r["lfn"] in kept} == \
        {("skipped_protected", "protected_since_planning")}


def test_the_other_files_are_deleted_in_their_first_try(waited: Waited) -> None:
    rest = waited.all_files - kept_files(waited)
    assert rest and not rest & waited.on_storage
    assert {(r["state"], r.get("attempts", 1)) for r in waited.records if r["lfn"] in rest} == {("deleted", 1)}


def test_the_dump_still_lists_every_file(waited: Waited) -> None:
    assert waited.dumped >= waited.all_files
