"""Protection no older than jobs.max_protection_age_s when a file is deleted, on the local backend (real worker,
real SecantusDB, a POSIX site): a queued job re-checked by the between-cycle top-up, a restart whose first cycle
finds its RSE done for the slot, and a service stopped past the bound (the worker itself refuses). Files protected
while their job waited are never deleted; the controls delete."""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest
from pymongo.database import Database

from MSUnmerged.jobs.backend import wait_for
from MSUnmerged.config import SiteConfig
from MSUnmerged.ledger import Ledger
from MSUnmerged.service import Service
from MSUnmerged.service.drain import Drainer
from MSUnmerged.sources.offline import PROTECTED_FILE, OfflineSources
from MSUnmerged.worker.ids import MANIFEST_NAME
from gate_kit import Gate
from service_kit import LoggedLocalBackend, files_left, write_sources
from test_service_run import RSE, make_service

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def slow_python(tmp_path: Path, seconds: float) -> str:
    """An interpreter whose workers start `seconds` late: the jobs behind the first wait in the local queue."""
    slow = tmp_path / f"slow-python-{seconds}"
    slow.write_text(f'#!/bin/sh\nsleep {seconds}\nexec {sys.executable} "$@"\n')
    slow.chmod(0o755)
    return str(slow)


def protect(src: Path, lfns: list[str]) -> list[str]:
    """The directories of these files become protected (WMStats' list grows); returns them."""
    dirs = sorted({lfn[:lfn.rfind("/")] for lfn in lfns})
    prot = json.loads((src / PROTECTED_FILE).read_text())
    (src / PROTECTED_FILE).write_text(json.dumps({"result": prot["result"] + dirs}))
    return dirs


def run_to_clean(svc: Service) -> None:
    for _ in range(8):
        if svc.runner.run_once(RSE, wait_s=60).action == "finish":
            break
    assert svc.ledger.base.rse(RSE)["state"] == "clean", svc.ledger.base.rse(RSE)


def check_kept(tmp_path: Path, db: Database, dirs: list[str], waited: set[str]) -> None:
    """Every file of the jobs that waited (`waited`) under `dirs` is still at the site and recorded
    skipped_protected; their other files were deleted, in their first try. (A job that started before the change
    may delete files of those directories: its list was within the bound.)"""
    left = files_left(tmp_path / "storage" / RSE)
    records = Ledger(db).reads.file_records(RSE)
    kept = {r["lfn"] for r in records if r["lfn"] in waited and any(r["lfn"].startswith(d + "/") for d in dirs)}
    assert kept and kept <= left
    assert {r["state"] for r in records if r["lfn"] in kept} == {"skipped_protected"}
    rest = waited - kept
    assert rest and not rest & left
    assert {(r["state"], r.get("attempts", 1)) for r in records if r["lfn"] in rest} == {("deleted", 1)}, \
        [r for r in records if r["lfn"] in rest and r["state"] != "deleted"][:3]


def test_the_top_up_drops_files_protected_while_their_job_waits(tmp_path: Path, mongo_db: Database) -> None:
    """Before: the between-cycle top-up checked nothing; a job queued behind another deleted files protected
    meanwhile."""
    src = write_sources(tmp_path / "src", [RSE], files=1200)
    gate = Gate(tmp_path)  # the workers wait for it: the first job stays running, the others queued
    svc = make_service(tmp_path, mongo_db, src, python=gate.python)
    svc.config.jobs.local_parallel = svc.runner.jobs.backend.parallel = 1
    assert svc.runner.run_once(RSE).submitted >= 3
    waiting = sorted(j["_id"] for j in mongo_db.jobs.find())[1:]
    waited = {lfn for jid in waiting for lfn in svc.ledger.rounds.job_lfns(jid)}
    dirs = protect(src, [svc.ledger.rounds.job_lfns(jid)[0] for jid in waiting])
    drainer = Drainer(svc.config, svc.ledger, svc.sources, svc.runner.jobs.backend, "test-1", lambda: [RSE])
    drainer.once()
    # The jobs holding a newly protected file were removed before they started and sent again without it.
    renewed = [j for j in mongo_db.jobs.find({"_id": {"$in": waiting}}) if j.get("requeued") == 1]
    assert renewed and all(j["reason"].startswith("revalidation: ") and j["state"] == "queued" for j in renewed)
    dropped = Ledger(mongo_db).reads.file_records(RSE, state="skipped_protected")
    assert dropped and {d["error_class"] for d in dropped} == {"protected_since_planning"}
    shown = list(Ledger(mongo_db).view().files(RSE, "skipped_protected", "protected_since_planning", None, None,
                                                 None, 0))  # what REST's data/files answers
    assert {f["lfn"] for f in shown} == {d["lfn"] for d in dropped}
    gate.open()
    run_to_clean(svc)
    check_kept(tmp_path, mongo_db, dirs, waited)


def test_waiting_jobs_are_re_issued_before_their_list_is_too_old(tmp_path: Path, mongo_db: Database) -> None:
    """A job waiting with less than half of the bound left is removed and sent again with a fresh manifest, its
    files' tries unchanged."""
    src = write_sources(tmp_path / "src", [RSE], files=1200)
    gate = Gate(tmp_path)  # the workers wait for it: the first job stays running, the others queued
    svc = make_service(tmp_path, mongo_db, src, python=gate.python)
    svc.config.jobs.local_parallel = svc.runner.jobs.backend.parallel = 1
    bound = svc.config.jobs.max_protection_age_s = 20.0
    before = time.time()
    assert svc.runner.run_once(RSE).submitted >= 3
    waiting = sorted(j["_id"] for j in mongo_db.jobs.find())[1:]
    until = {j["protected_until"] for j in mongo_db.jobs.find({"_id": {"$in": waiting}})}
    assert len(until) == 1
    first = until.pop()
    assert before <= first - bound <= time.time()  # the list was fetched during the run
    drainer = Drainer(svc.config, svc.ledger, svc.sources, svc.runner.jobs.backend, "test-1", lambda: [RSE])
    if first - time.time() > bound / 2 + 0.5:
        drainer.once()  # more than half left: nothing to do
        assert {j.get("requeued") for j in mongo_db.jobs.find({"_id": {"$in": waiting}})} == {None}
    time.sleep(max(0.0, first - bound / 2 - time.time() + 0.5))
    drainer.once()  # less than half left: re-issued, and submitted again by the same pass
    jobs = {j["_id"]: j for j in mongo_db.jobs.find({"_id": {"$in": waiting}})}
    renewed = [j for j in jobs.values() if j.get("requeued") == 1]
    assert renewed and all(j["state"] == "queued" and j["protected_until"] > first for j in renewed)
    assert all(j["reason"].startswith("re-issued: ") for j in renewed)
    assert {(r["state"], r.get("attempts", 1))
            for j in renewed for r in Ledger(mongo_db).reads.file_records(job=j["_id"])} == {("planned", 1)}
    svc.config.jobs.max_protection_age_s = 3600.0
    svc.runner.jobs.backend.python = sys.executable
    gate.open()
    run_to_clean(svc)
    records = Ledger(mongo_db).reads.file_records(RSE)
    assert {(r["state"], r.get("attempts", 1)) for r in records if r["job"] in jobs} == {("deleted", 1)}


def test_a_service_stopped_past_the_bound_deletes_nothing_protected(tmp_path: Path, mongo_db: Database) -> None:
    """The service submits, then is gone while its jobs wait past the bound: each worker refuses by its manifest's
    time (protection_expired), no try is charged, and the jobs are sent again with a fresh list once the service is
    back; the files protected meanwhile stay."""
    src = write_sources(tmp_path / "src", [RSE], files=900)
    svc = make_service(tmp_path, mongo_db, src, python=slow_python(tmp_path, 3))
    svc.config.jobs.max_protection_age_s = 2.0
    assert svc.runner.run_once(RSE).submitted >= 3
    jobs = {j["_id"]: j["batch_id"] for j in mongo_db.jobs.find()}
    all_files = {lfn for jid in jobs for lfn in svc.ledger.rounds.job_lfns(jid)}
    dirs = protect(src, [svc.ledger.rounds.job_lfns(jid)[0] for jid in sorted(jobs)])
    backend = svc.runner.jobs.backend
    states = wait_for(backend, jobs, 120)  # nobody re-checks them: the service is away
    assert {s.state.value for s in states.values()} == {"finished"} and {s.exit_code for s in states.values()} == {2}
    assert all_files <= files_left(tmp_path / "storage" / RSE)  # nothing deleted at all
    svc.runner.jobs.poll(RSE)  # the service is back: the reports are collected
    docs = list(mongo_db.jobs.find())
    assert {d["state"] for d in docs} == {"planned"} and {d["requeued"] for d in docs} == {1}
    assert all(d["reason"].startswith("protection_expired: ") for d in docs)
    shown = Ledger(mongo_db).view().jobs(RSE, "planned", 100)  # what REST's data/jobs answers
    assert len(shown) == len(docs) and all("protection_expired" in j["reason"] and j["requeued"] == 1 for j in shown)
    assert {(r["state"], r.get("attempts", 1))
            for r in Ledger(mongo_db).reads.file_records(RSE) if r["lfn"] in all_files} == {("planned", 1)}
    # Back with a bound its jobs meet (and workers that start at once): the files protected meanwhile stay.
    svc.config.jobs.max_protection_age_s = 3600.0
    backend.python = sys.executable
    run_to_clean(svc)
    check_kept(tmp_path, mongo_db, dirs, all_files)


def test_a_restart_re_checks_the_jobs_its_predecessor_left_queued(tmp_path: Path, mongo_db: Database) -> None:
    """Before: after a restart the first cycle found the RSE done for its slot and checked nothing; the jobs the
    stopped service left queued started with files protected since."""
    src = write_sources(tmp_path / "src", [RSE], files=1200)
    gate = Gate(tmp_path)  # the first service's workers wait for it: its first job runs, the others stay queued
    first = make_service(tmp_path, mongo_db, src, python=gate.python)
    first.config.jobs.local_parallel = first.runner.jobs.backend.parallel = 1
    slot = int(time.time() // first.config.service.interval_s)
    assert first.cycle([RSE], slot=slot)[RSE].submitted >= 3
    first.runner.jobs.backend.close()  # the service stops: its queued jobs wait on disk
    first.stop()
    waiting = sorted(j["_id"] for j in mongo_db.jobs.find())[1:]
    waited = {lfn for jid in waiting for lfn in first.ledger.rounds.job_lfns(jid)}
    dirs = protect(src, [first.ledger.rounds.job_lfns(jid)[0] for jid in waiting])
    # The same configuration and site, a new process's backend on the same work folder, workers that start at once.
    again = Service(first.config, Ledger(mongo_db), OfflineSources(src),
                    LoggedLocalBackend(first.config, tmp_path / "batch"), instance="test-1")
    assert again.cycle([RSE], slot=slot)[RSE].action == "done_this_cycle"
    drainer = Drainer(again.config, again.ledger, again.sources, again.runner.jobs.backend, "test-1",
                      lambda: again.last_rses)
    drainer.once()
    assert Ledger(mongo_db).reads.file_records(RSE, state="skipped_protected")
    gate.open()
    run_to_clean(again)
    check_kept(tmp_path, mongo_db, dirs, waited)


@pytest.mark.parametrize("stop", ["stopped", "crashed_before_marking"])
def test_run_wait_after_a_restart_starts_no_adopted_job_before_revalidation(tmp_path: Path, mongo_db: Database,
                                                                             stop: str) -> None:
    """Before: the jobs a stopped service left queued were adopted by the first poll of `run --wait` and started
    by its second, before the revalidation after the polls re-checked them: files protected meanwhile were
    deleted. So too for jobs a crash left `submitting` (found on disk by reconciliation, then adopted)."""
    src = write_sources(tmp_path / "src", [RSE], files=1200)
    gate = Gate(tmp_path)  # the first service's workers wait for it: its first job runs, the others stay queued
    first = make_service(tmp_path, mongo_db, src, python=gate.python)
    first.config.jobs.local_parallel = first.runner.jobs.backend.parallel = 1
    assert first.runner.run_once(RSE).submitted >= 3
    first.runner.jobs.backend.close()  # the service stops: its queued jobs wait on disk
    first.stop()
    waiting = sorted(j["_id"] for j in mongo_db.jobs.find())[1:]
    if stop == "crashed_before_marking":  # submitted, the submission not marked: reconciliation finds them
        mongo_db.jobs.update_many({"_id": {"$in": waiting}}, {"$set": {"state": "submitting"},
                                                                "$unset": {"batch_id": ""}})
    waited = {lfn for jid in waiting for lfn in first.ledger.rounds.job_lfns(jid)}
    dirs = protect(src, [first.ledger.rounds.job_lfns(jid)[0] for jid in waiting])
    again = Service(first.config, Ledger(mongo_db), OfflineSources(src),
                    LoggedLocalBackend(first.config, tmp_path / "batch"), instance="test-1")
    again.runner.jobs.backend.parallel = 4  # slots free beside the first service's job still running
    again.runner.run_once(RSE, wait_s=5)  # polls for 5 s, then revalidates
    assert Ledger(mongo_db).reads.file_records(RSE, state="skipped_protected")
    gate.open()
    run_to_clean(again)
    check_kept(tmp_path, mongo_db, dirs, waited)


class Crash(BaseException):
    """Stands for the process dying: nothing in run_once may catch it."""


def manifest_until(backend: LoggedLocalBackend, jid: str) -> float:
    return json.loads((backend.job_dir(jid) / MANIFEST_NAME).read_text())["task"]["steps"][0]["protected_until"]


def test_a_reconciled_resubmission_records_until_when_its_new_list_may_be_used(tmp_path: Path,
                                                                              mongo_db: Database) -> None:
    """Before: jobs a crash left `submitting` (intent recorded, never submitted) went out again with a fresh list,
    while the ledger kept their first intent's `protected_until`: a revalidation then re-issued them needlessly."""
    src = write_sources(tmp_path / "src", [RSE], files=1200)
    gate = Gate(tmp_path)  # nothing ends meanwhile
    first = make_service(tmp_path, mongo_db, src, python=gate.python)
    # Half of it (8 s) is what the run's reconciliation may take to its revalidation without a re-issue.
    first.config.jobs.max_protection_age_s = 16.0
    first.config.jobs.local_parallel = 1  # the jobs after the first wait: revalidated

    def crash(step: str, rse: str) -> None:
        if step == "intent":
            raise Crash(step)
    first.runner.hook = crash
    with pytest.raises(Crash):
        first.runner.run_once(RSE)
    first.runner.leases.release(RSE)
    first.stop()
    jobs = {j["_id"]: j["protected_until"] for j in mongo_db.jobs.find({"state": "submitting"})}
    assert jobs
    time.sleep(8.5)  # more than half of the bound: the first intent's list would be re-issued
    again = Service(first.config, Ledger(mongo_db), OfflineSources(src),
                    LoggedLocalBackend(first.config, tmp_path / "batch", python=first.runner.jobs.backend.python),
                    instance="test-1")
    try:
        assert again.runner.run_once(RSE).action == "poll"  # reconciled, then revalidated
        docs = {j["_id"]: j for j in mongo_db.jobs.find({"_id": {"$in": list(jobs)}})}
        assert [d["state"] for d in docs.values()].count("queued") >= 2
        assert {d.get("requeued") for d in docs.values()} == {None}
        backend = again.runner.jobs.backend
        assert all(d["protected_until"] == manifest_until(backend, jid) > jobs[jid] for jid, d in docs.items())
    finally:
        gate.open()
        again.runner.jobs.backend.close()


def test_run_wait_tops_up_with_a_list_no_older_than_half_the_bound(tmp_path: Path, mongo_db: Database) -> None:
    """Before: `run --wait` sent every job it topped up with the list of its start: once older than the bound, each
    worker refused (protection_expired), and the job went out again with the same list, until the wait ended."""
    src = write_sources(tmp_path / "src", [RSE], files=1800)
    svc = make_service(tmp_path, mongo_db, src, python=slow_python(tmp_path, 4))  # 6 jobs, one at a time: > 24 s
    # A job sent with a list younger than 10 s starts in time on a quiet machine (4 s late, its start-up in the rest).
    svc.config.jobs.max_protection_age_s = 20.0
    svc.config.jobs.sites.setdefault(RSE, SiteConfig()).max_in_flight = 1  # the others go out while it waits
    result = svc.runner.run_once(RSE, wait_s=300)  # bounds a hang: the run returns once its jobs are collected
    assert result.submitted >= 5 and result.state == "clean", result
    docs = list(mongo_db.jobs.find())
    # What the run sent, not how fast the workers started (a worker that starts too late on a busy machine is
    # refused and its job re-issued, rightly): each job went out with a list still valid, and the run fetched
    # new lists as it went (the old rule sent the 5th and 6th jobs, over 20 s in, with the expired first one).
    sent = [(d["_id"], d.get("reason"), d.get("submitted_at"), d.get("protected_until")) for d in docs]
    assert {d["state"] for d in docs} == {"finished"}, sent
    assert all(d["submitted_at"] < d["protected_until"] for d in docs), sent
    assert len({d["protected_until"] for d in docs}) > 1, sent
    assert not files_left(tmp_path / "storage" / RSE) & {r["lfn"] for r in Ledger(mongo_db).reads.file_records(RSE)}


def test_a_top_up_that_only_re_issued_jobs_counts_them(tmp_path: Path, mongo_db: Database) -> None:
    """Before: a top-up pass that re-issued waiting jobs but submitted nothing (here: the storage credential went
    missing) left the RSE's job counts and state as they were, until the next cycle."""
    src = write_sources(tmp_path / "src", [RSE], files=1200)
    gate = Gate(tmp_path)  # the workers wait for it: the first job stays running, the others queued
    svc = make_service(tmp_path, mongo_db, src, python=gate.python)
    svc.config.jobs.local_parallel = svc.runner.jobs.backend.parallel = 1
    bound = svc.config.jobs.max_protection_age_s = 6.0
    assert svc.runner.run_once(RSE).submitted >= 3
    until = min(j["protected_until"] for j in mongo_db.jobs.find())
    time.sleep(max(0.0, until - bound / 2 - time.time() + 0.5))
    svc.config.jobs.credential, svc.config.jobs.token_file = "token", str(tmp_path / "no-token")
    Drainer(svc.config, svc.ledger, svc.sources, svc.runner.jobs.backend, "test-1", lambda: [RSE]).once()
    jobs = list(mongo_db.jobs.find())
    assert [j["state"] for j in jobs].count("planned") >= 2  # re-issued, not sent again
    counted: dict[str, int] = {}
    for j in jobs:
        counted[j["state"]] = counted.get(j["state"], 0) + 1
    doc = svc.ledger.base.rse(RSE)
    assert doc["counters"]["jobs_by_state"] == counted
    live = sum(counted.get(s, 0) for s in ("submitting", "queued", "running", "held"))
    assert doc["detail"] == f"{live} jobs in the batch system"
    gate.open()
    svc.runner.jobs.backend.close()
