"""Empty directories end to end (real SecantusDB ledger, real LocalBackend running the worker on a POSIX site):
directories a generation planned as removable and did not remove are remembered and removed by a later cycle,
after the next dump no longer lists them; ones that became protected are forgotten; the opt-in sweep removes
old empty directories below the datasets cleaned and they count in dirs_removed."""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest
from pymongo.database import Database

from MSUnmerged.config import SiteConfig
from MSUnmerged.jobs.spec import held_dirs
from MSUnmerged.ledger import Ledger, pending_dirs
from MSUnmerged.samplesite import rescan
from MSUnmerged.sources.offline import PROTECTED_FILE, STATS_FILE, dump_file
from MSUnmerged.worker.ids import MANIFEST_NAME, gen_key, job_folder
from service_kit import dump_lines, write_sources
from test_service_run import RSE, make_service

pytestmark = pytest.mark.integration


def failing_python(base: Path) -> str:
    """A python3 for LocalBackend whose jobs die before the worker writes a report (a lost job); the backend's
    preflight (`--help`) still works."""
    path = base / "dying-python"
    path.write_text(f'#!/bin/sh\n[ "$(eval echo \\${{$#}})" = --help ] && exec {sys.executable} "$@"\nexit 1\n')
    path.chmod(0o755)
    return str(path)


def new_dump(src: Path, keep: list[str]) -> None:
    """The next ConMon scan, starting now: only `keep` listed (the rest was deleted by someone else meanwhile)."""
    dump_file(src, RSE).write_text("\n".join(keep) + "\n")
    stats = json.loads((src / STATS_FILE).read_text())
    stats[RSE].update(files=len(keep))
    (src / STATS_FILE).write_text(json.dumps(stats))
    rescan(src, RSE)


def test_a_directory_emptied_after_an_earlier_cycle_is_removed_by_a_later_one(tmp_path: Path,
                                                                            mongo_db: Database) -> None:
    src = write_sources(tmp_path / "src", [RSE], files=200, end_time=time.time() - 3600)
    svc = make_service(tmp_path, mongo_db, src, python=failing_python(tmp_path))
    svc.config.jobs.retries = 0
    first = svc.runner.run_once(RSE, wait_s=60)
    assert first.action == "new_generation" and first.submitted > 0
    gen1 = first.generation
    lost = {d["dir"] for d in mongo_db.dirs.find({"rse": RSE, "gen": gen1})}
    assert lost and {d["state"] for d in mongo_db.dirs.find({"rse": RSE, "gen": gen1})} == {"not_attempted"}
    # Someone else deletes the files of one dataset; the next scan no longer lists them nor their directories.
    lines, _ = dump_lines(RSE, 200)
    gone = [x for x in lines if "/Primary5/" in x]
    storage = tmp_path / "storage" / RSE
    for lfn in gone:
        (storage / lfn.lstrip("/")).unlink()
    emptied = sorted(d for d in lost if "/Primary5/" in d)
    assert emptied and all((storage / d.lstrip("/")).is_dir() for d in emptied)
    new_dump(src, [x for x in lines if x not in gone])
    svc.runner.jobs.backend.python = sys.executable  # jobs run again
    second = svc.runner.run_once(RSE, wait_s=60)
    assert second.action == "new_generation" and second.generation > gen1
    # The emptied directories were retried by a directory job of the new generation and are gone.
    assert not any((storage / d.lstrip("/")).exists() for d in emptied)
    retry_jobs = list(mongo_db.jobs.find({"rse": RSE, "retry_dirs": {"$exists": True}}))
    assert retry_jobs and set(emptied) <= {d for j in retry_jobs for d in j["retry_dirs"]}
    assert all(j["gen"] == second.generation for j in retry_jobs)
    recorded = {d["dir"]: d["state"] for d in mongo_db.dirs.find({"rse": RSE, "gen": second.generation})}
    assert all(recorded[d] == "removed" for d in emptied)
    assert svc.ledger.base.rse(RSE)["counters"]["dirs_removed"] >= len(emptied)
    # Settled entries leave; directories of files still listed were planned again and removed by gen 2's jobs.
    left = {e["dir"] for e in mongo_db[pending_dirs.COLLECTION].find({"rse": RSE})}
    assert not left & set(emptied)


def test_a_pending_directory_that_became_protected_is_forgotten(tmp_path: Path, mongo_db: Database) -> None:
    src = write_sources(tmp_path / "src", [RSE], files=100, end_time=time.time() - 3600)
    svc = make_service(tmp_path, mongo_db, src, python=failing_python(tmp_path))
    svc.config.jobs.retries = 0
    first = svc.runner.run_once(RSE, wait_s=60)
    lost = sorted({d["dir"] for d in mongo_db.dirs.find({"rse": RSE, "gen": first.generation})})
    target = next(d for d in lost if d.count("/") >= 7)
    storage = tmp_path / "storage" / RSE
    for path in (storage / target.lstrip("/")).rglob("*"):
        if path.is_file():
            path.unlink()
    prot = json.loads((src / PROTECTED_FILE).read_text())
    (src / PROTECTED_FILE).write_text(json.dumps({"result": prot["result"] + [target]}))
    second = svc.runner.run_once(RSE, wait_s=60)  # the same dump: done with errors, then the directories are retried
    assert (second.action, second.state) == ("finish", "done_with_errors")
    assert (storage / target.lstrip("/")).is_dir()  # never tried: it is protected now
    retried = {d for j in mongo_db.jobs.find({"retry_dirs": {"$exists": True}}) for d in j["retry_dirs"]}
    assert target not in retried and not any(d.startswith(target + "/") for d in retried)
    assert mongo_db[pending_dirs.COLLECTION].count_documents({"dir": target}) == 0


def test_sweep_removes_old_empty_directories_and_counts_them(tmp_path: Path, mongo_db: Database) -> None:
    src = write_sources(tmp_path / "src", [RSE], files=100)
    svc = make_service(tmp_path, mongo_db, src)
    svc.config.jobs.sites.setdefault(RSE, SiteConfig()).remove_empty_dirs = True
    lines, _ = dump_lines(RSE, 100)
    dataset = lines[2].rsplit("/", 3)[0]  # /store/unmerged/<era>/<primary>/<tier>/<procstr>
    storage = tmp_path / "storage" / RSE
    old = [storage / f"{dataset}/999/empty".lstrip("/"), storage / f"{dataset}/999".lstrip("/")]
    old[0].mkdir(parents=True)  # empty directories no dump lists, older than the scan (it starts now)
    rescan(src, RSE)
    result = svc.runner.run_once(RSE, wait_s=60)
    assert result.action == "new_generation" and not any(p.exists() for p in old)
    recorded = {d["dir"]: d["state"] for d in mongo_db.dirs.find({"rse": RSE})}
    assert recorded[f"{dataset}/999/empty"] == recorded[f"{dataset}/999"] == "removed"
    # The collector took the swept directories as the job's own (no report line rejected), and counted them.
    assert all("rejected" not in (j.get("reason") or "") for j in mongo_db.jobs.find({"rse": RSE}))
    assert svc.ledger.base.rse(RSE)["counters"]["dirs_removed"] == sum(1 for s in recorded.values() if s == "removed")


def test_directory_jobs_of_the_same_dump_remove_retried_directories_and_their_emptied_parents(
        tmp_path: Path, mongo_db: Database) -> None:
    """The directory jobs made when a dump's work is over belong to that dump's generation, whose dirs.txt lists
    the retried directories and their parents: a job is given those parents too (job_dirs of its retried
    directories), so the worker removes them once emptied (they hold its retried directories) and the collector
    takes their lines. Small directory jobs split a parent from its children across jobs."""
    src = write_sources(tmp_path / "src", [RSE], files=40, end_time=time.time() - 3600)
    svc = make_service(tmp_path, mongo_db, src, python=failing_python(tmp_path))
    svc.config.jobs.retries = 0
    first = svc.runner.run_once(RSE, wait_s=60)
    gen = first.generation
    lost = {d["dir"] for d in mongo_db.dirs.find({"rse": RSE, "gen": gen})}
    assert lost and {d["state"] for d in mongo_db.dirs.find({"rse": RSE, "gen": gen})} == {"not_attempted"}
    storage = tmp_path / "storage" / RSE
    lines, _ = dump_lines(RSE, 40)
    for lfn in lines:  # someone else deleted every file; the same dump still lists them
        (storage / lfn.lstrip("/")).unlink(missing_ok=True)
    svc.runner.jobs.backend.python = sys.executable
    svc.config.planner.files_per_job = 3  # directory jobs of 3 directories: parents and children apart
    # One job at a time, in order: the job retrying a parent finds it not empty, the later ones holding its children
    # remove it (each job removes leaf first, so of jobs given one parent the last to try it finds it empty).
    svc.runner.jobs.backend.parallel = 1
    second = svc.runner.run_once(RSE)
    assert (second.action, second.state) == ("finish", "done_with_errors") and second.submitted > 1
    retry_jobs = list(mongo_db.jobs.find({"rse": RSE, "retry_dirs": {"$exists": True}}))
    assert {j["gen"] for j in retry_jobs} == {gen} and {d for j in retry_jobs for d in j["retry_dirs"]} == lost
    # What the collector takes a job to have been given and to speak of is what its manifest gave it.
    keeper, parents = svc.runner.jobs, 0
    for job in retry_jobs:
        manifest = json.loads((tmp_path / "batch" / job_folder(job["_id"]) / MANIFEST_NAME).read_text())
        step = manifest["task"]["steps"][0]
        given = set(step["remove_dirs"]) | set(step["retry_dirs"])
        assert sorted(keeper._given_dirs(job, [])) == sorted(given)
        parents += len(given - set(job["retry_dirs"]))  # parents of its retried directories another job retries
        allowed = keeper._other_dirs(job, [], None)
        assert all(allowed(d) for d in given)
        assert not any(allowed(d) for d in lost - held_dirs((), job["retry_dirs"]))
    assert parents
    deadline = time.monotonic() + 60
    while svc.runner.jobs.live(RSE) and time.monotonic() < deadline:
        svc.runner.jobs.poll(RSE)
        time.sleep(0.2)
    assert not svc.runner.jobs.live(RSE)
    jobs = list(mongo_db.jobs.find({"rse": RSE, "retry_dirs": {"$exists": True}}))
    assert [j["reason"] for j in jobs if j.get("reason")] == []  # no report line rejected, nothing refused
    assert not any((storage / d.lstrip("/")).exists() for d in lost)
    recorded = {d["dir"]: d["state"] for d in mongo_db.dirs.find({"rse": RSE, "gen": gen})}
    assert {recorded[d] for d in lost} == {"removed"}
    assert mongo_db[pending_dirs.COLLECTION].count_documents({"rse": RSE}) == 0


def test_settle_drops_the_entries_of_parents_a_directory_job_removed_and_counts_no_try_for_them(
        mongo_db: Database) -> None:
    """A directory job also removes the emptied parents of its retried directories (another job's entries): their
    entries leave once their record says removed, gone or refused; a parent it left standing keeps its entry and
    its tries (its own job counts them)."""
    ledger = Ledger(mongo_db)
    gen, top = 1700000000.0, "/store/unmerged/Era/Prim/AOD/Proc-v1"
    job = {"rse": RSE, "gen": gen, "retry_dirs": [f"{top}/000/001"]}
    records = {f"{top}/000/001": "removed", f"{top}/000": "removed", top: "not_empty"}
    mongo_db.dirs.insert_many([{"_id": f"{RSE}|{gen_key(gen)}|{d}", "rse": RSE, "gen": gen, "dir": d, "state": s}
                               for d, s in records.items()])
    mongo_db[pending_dirs.COLLECTION].insert_many([
        {"_id": f"{RSE}|{d}", "rse": RSE, "dir": d, "tries": 1, "state": "not_empty"} for d in records])
    ledger.pending_dirs.settle(job, held_dirs((), job["retry_dirs"]))
    left = {e["dir"]: e["tries"] for e in mongo_db[pending_dirs.COLLECTION].find({"rse": RSE})}
    assert left == {top: 1}
