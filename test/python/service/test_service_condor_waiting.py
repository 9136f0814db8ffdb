"""Jobs idle at the REAL HTCondor schedd (no slot matches them): re-checked against a fresh protected list while they
wait, removed and sent again when a file became protected or their manifest's list is getting old, their files'
tries unchanged; once they match the pool's slot, the files protected meanwhile stay and the others are deleted."""
from __future__ import annotations

from pathlib import Path

import pytest
from pymongo.database import Database

from MSUnmerged.config import Config
from MSUnmerged.ledger import Ledger
from MSUnmerged.sources.offline import dump_file
from servers.condor import CondorPool
from test_service_condor import RSE, STORAGE, make_service, run_to_end, site  # noqa: F401 (fixture)
from test_service_protection_age import protect

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_idle_condor_jobs_are_re_checked_and_re_issued(condor_pool: CondorPool, site: Path,  # noqa: F811
                                                       tmp_path: Path, mongo_db: Database) -> None:
    tokens = str(condor_pool.token_dir("submitter"))

    def idle(config: Config) -> None:
        config.condor.requirements = "False"  # no slot matches: the jobs stay idle

    svc = make_service(str(tmp_path), mongo_db, str(site), tokens, configure=idle)
    assert svc.runner.run_once(RSE).submitted >= 2
    jobs = sorted(j["_id"] for j in mongo_db.jobs.find())
    all_files = {lfn for jid in jobs for lfn in svc.ledger.rounds.job_lfns(jid)}
    hit = jobs[0]
    dirs = protect(site, [svc.ledger.rounds.job_lfns(hit)[0]])
    # A file of an idle job became protected: the job is removed, its file dropped, the rest planned again.
    second = svc.runner.run_once(RSE)
    assert second.removed_jobs == 1 and second.dropped_protected > 0, second
    doc = mongo_db.jobs.find_one({"_id": hit})
    assert doc["requeued"] == 1 and doc["reason"].startswith("revalidation: ")
    svc.stop()

    def back(config: Config) -> None:  # jobs that match the slot, and a bound the idle manifests have < half of
        config.jobs.max_protection_age_s = 4 * 3600.0 * 2

    svc = make_service(str(tmp_path), mongo_db, str(site), tokens, configure=back)
    run_to_end(svc)
    svc.stop()
    docs = list(mongo_db.jobs.find())
    # Every idle one was sent again before it ran: the hit one without its protected files, the others because
    # their manifests had less than half of the (new) bound left.
    assert all(d.get("requeued", 0) >= 1 and d["state"] == "finished" for d in docs)
    records = Ledger(mongo_db).reads.file_records(RSE)
    kept = {r["lfn"] for r in records if r["lfn"] in all_files and any(r["lfn"].startswith(d + "/") for d in dirs)}
    assert kept and all(condor_pool.inside(STORAGE + lfn).exists() for lfn in kept)
    assert {(r["state"], r.get("error_class")) for r in records if r["lfn"] in kept} == \
        {("skipped_protected", "protected_since_planning")}
    rest = all_files - kept
    assert rest and not any(condor_pool.inside(STORAGE + lfn).exists() for lfn in rest)
    assert {(r["state"], r.get("attempts", 1)) for r in records if r["lfn"] in rest} == {("deleted", 1)}
    assert set(dump_file(site, RSE).read_text().split()) >= all_files
