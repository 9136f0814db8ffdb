"""What the ledger tells operators about jobs and progress (issue 39): an older dump's jobs never submitted end
`superseded`, out of the live counts; one final state; the drain's counts and samples; a throttled plan's slices
not yet released; directories given up on; directory counts that add up. On a real SecantusDB."""
from __future__ import annotations

import time
from pathlib import Path

import pytest
from pymongo.database import Database

from MSUnmerged import planner
from MSUnmerged.config import Config
from MSUnmerged.drainstatus import Waiting, drain, rate
from MSUnmerged.ledger import Ledger, job_id, pending_dirs
from MSUnmerged.ledger.states import LIVE_JOB_STATES, JobState
from MSUnmerged.ledger.view import JOB_STATES
from MSUnmerged.seal import PlanReader

pytestmark = pytest.mark.integration
RSE = "T2_FR_JobView"
GEN = 1_700_000_000.0


def make_plan(tmp_path: Path, name: str, files: int = 900, sliced: bool = False) -> planner.Plan:
    lines = [f"/store/unmerged/Era/P{i % 3}/RAW/Proc-v1/000/{i % 4:03d}/f{i}.root" for i in range(files)]
    config = Config()
    config.planner.files_per_job = 200
    config.guards.max_delete_fraction = 1.0
    plan = planner.plan(RSE, [("\n".join(lines) + "\n").encode()], ["/store/unmerged/Era/Other/RAW/X-v1"], config,
                        tmp_path / name, require_scan=False)
    if sliced:  # five jobs of 200, 200, 200, 200, 100 in three slices
        plan.job_slices, plan.slice_sizes = [1, 1, 2, 2, 3], [400, 400, 100]
    return plan


def submit(ledger: Ledger, jobs: list[str]) -> None:
    ledger.base.jobs.update_many({"_id": {"$in": jobs}}, {"$set": {"state": JobState.SUBMITTING}})
    ledger.rounds.mark_all_submitted({j: f"local:{j}" for j in jobs})


def test_an_older_dumps_unsubmitted_jobs_are_superseded_out_of_the_live_counts(tmp_path: Path,
                                                                                mongo_db: Database) -> None:
    ledger = Ledger(mongo_db, generations_kept=2)
    ledger.ensure_indexes()
    ledger.plans.record_plan(PlanReader(tmp_path / "a"), make_plan(tmp_path, "a", sliced=True), GEN)
    submit(ledger, [job_id(RSE, GEN, 1, n) for n in (1, 2)])  # slice 1 went out; slices 2 and 3 never did
    ledger.plans.record_plan(PlanReader(tmp_path / "b"), make_plan(tmp_path, "b", files=300), GEN + 100)
    old = {d["_id"]: d for d in mongo_db.jobs.find({"gen": GEN})}
    assert [old[job_id(RSE, GEN, 1, n)]["state"] for n in range(1, 6)] == \
        ["queued", "queued", "superseded", "superseded", "superseded"]
    assert "superseded by the plan of dump" in old[job_id(RSE, GEN, 1, 3)]["reason"]
    assert all(JobState(d["state"]).terminal for n, d in old.items() if d["state"] == "superseded")
    c = ledger.counters.refresh_counters(RSE)
    assert c["jobs_by_state"] == {"queued": 2, "superseded": 3, "planned": 2}  # planned: the new dump's two
    assert not ledger.base.jobs_in(RSE, [JobState.PLANNED], GEN)  # the top-up (service/drain.py) no longer sees them
    assert {j["_id"] for j in ledger.base.jobs_in(RSE, LIVE_JOB_STATES)} == {job_id(RSE, GEN, 1, n) for n in (1, 2)}
    assert "superseded" in JOB_STATES and "collected" not in JOB_STATES  # one final state: finished


def test_a_job_closed_as_collected_by_older_code_reads_finished(mongo_db: Database) -> None:
    mongo_db.jobs.insert_one({"_id": job_id(RSE, GEN, 1, 1), "rse": RSE, "gen": GEN, "state": "collected"})
    Ledger(mongo_db).ensure_indexes()
    assert mongo_db.jobs.find_one()["state"] == "finished"


def test_counts_keep_the_drain_samples_and_the_slices_not_released(tmp_path: Path, mongo_db: Database) -> None:
    ledger = Ledger(mongo_db)
    ledger.ensure_indexes()
    ledger.plans.record_plan(PlanReader(tmp_path / "a"), make_plan(tmp_path, "a", sliced=True), GEN)
    entry = ledger.slices.release_next(RSE, GEN)  # slice 1 of 3
    c = ledger.counters.refresh_counters(RSE)
    assert (c["slice"], c["slices"], c["unreleased_files"], c["unreleased_jobs"], c["pending"]) == (1, 3, 500, 3, 900)
    doc = ledger.base.rse(RSE)
    assert [x["n"] for x in doc["drained"]] == [0]  # the first count of the generation
    ledger.counters.refresh_counters(RSE)
    assert len(ledger.base.rse(RSE)["drained"]) == 1  # counted again with nothing done: no sample
    first = job_id(RSE, GEN, 1, 1)
    submit(ledger, [first])
    time.sleep(0.05)
    ledger.outcomes.record_outcomes(first, [{"lfn": lfn, "state": "deleted"} for lfn in ledger.rounds.job_lfns(first)])
    ledger.outcomes.close_job(first, JobState.FINISHED)
    ledger.counters.refresh_counters(RSE)
    doc = ledger.base.rse(RSE)
    assert [x["n"] for x in doc["drained"]] == [0, 200] and rate(doc["drained"]) > 0
    view = Ledger(mongo_db).view().rse(RSE)
    d = drain(view, time.time(), 3600)
    assert d["waiting"] == Waiting.FOR_TOP_UP and d["backlog_files"] == 700 and d["next_slice_files"] == 400
    assert entry["released"] == 1
    # A new generation starts the samples again.
    ledger.plans.record_plan(PlanReader(tmp_path / "b"), make_plan(tmp_path, "b", files=300), GEN + 100)
    ledger.counters.refresh_counters(RSE)
    assert [x["n"] for x in ledger.base.rse(RSE)["drained"]] == [0]


def test_directories_given_up_and_removed_by_directory_jobs_are_told_apart(tmp_path: Path,
                                                                           mongo_db: Database) -> None:
    ledger = Ledger(mongo_db)
    ledger.ensure_indexes()
    ledger.plans.record_plan(PlanReader(tmp_path / "a"), make_plan(tmp_path, "a", files=200), GEN)
    coll = mongo_db[pending_dirs.COLLECTION]
    coll.insert_many([
        {"_id": f"{RSE}|/store/unmerged/Old/A", "rse": RSE, "dir": "/store/unmerged/Old/A", "since": GEN - 100,
         "tries": 4, "state": "permission_denied", "error": "EACCES on rmdir"},
        {"_id": f"{RSE}|/store/unmerged/Old/B", "rse": RSE, "dir": "/store/unmerged/Old/B", "since": GEN - 100,
         "tries": 1, "state": "not_empty", "error": ""}])
    given = Ledger(mongo_db).view().given_up_dirs(RSE, 4)
    assert [(g["dir"], g["state"], g["error"], g["tries"]) for g in given] == \
        [("/store/unmerged/Old/A", "permission_denied", "EACCES on rmdir", 4)]
    made = ledger.pending_dirs.plan_jobs(RSE, GEN, 4, 100, lambda d: True)  # B still has tries left
    assert len(made) == 1
    ledger.outcomes.record_dirs(made[0], [{"dir": "/store/unmerged/Old/B", "state": "removed"}])
    plan_job = job_id(RSE, GEN, 1, 1)
    ledger.outcomes.record_dirs(plan_job, [{"dir": "/store/unmerged/Era/P0/RAW/Proc-v1/000/000", "state": "removed"}])
    c = ledger.counters.refresh_counters(RSE)
    assert (c["dirs_removed"], c["dirs_removed_by_dir_jobs"]) == (2, 1)
