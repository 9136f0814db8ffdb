"""run_once against a real SecantusDB and the real LocalBackend on a POSIX site: the happy path, skips
with reasons, guards, retries, new dumps, revalidation of queued jobs, preflight refusals."""
from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from typing import Optional

import pytest
from pymongo.database import Database

from MSUnmerged.config import Config
from MSUnmerged.jobs.backend import wait_for
from MSUnmerged.ledger import Ledger
from MSUnmerged.service import Service
from MSUnmerged.sources import Sources
from MSUnmerged.sources.offline import PROTECTED_FILE, STATS_FILE, OfflineSources, dump_file
from MSUnmerged.jobs.local import LocalBackend
from MSUnmerged.jobs.router import RoutingBackend
from MSUnmerged.samplesite import rescan
from gate_kit import Gate
from service_kit import (NOBODY, LoggedLocalBackend, as_nobody, chown_tree, files_left, make_site,
                         world_readable_dir, write_sources)

pytestmark = pytest.mark.integration
RSE = "T2_CH_Test"


def make_service(tmp_path: Path, db: Database, srcdir: Path, python: Optional[str] = None,
                 sources: Optional[Sources] = None, batch_dir: Optional[Path] = None, **service: object) -> Service:
    """A service whose jobs run with the real worker on the RSE's own storage folder (tmp_path/storage), their
    folders in `batch_dir` (default tmp_path/batch); its sources: `sources`, else OfflineSources(srcdir)."""
    config = Config()
    config.service.state_dir = str(tmp_path / "state")
    config.service.dry_run = False
    config.service.lease_ttl_s = 10
    config.planner.files_per_job = 300
    for key, value in service.items():
        setattr(config.service, key, value)
    make_site(tmp_path, srcdir, RSE, config)
    ledger = Ledger(db, config.mongo.generations_kept)
    ledger.ensure_indexes()
    backend = LoggedLocalBackend(config, batch_dir or tmp_path / "batch", python=python)
    return Service(config, ledger, sources or OfflineSources(srcdir), backend, instance="test-1")


def test_run_once_plans_submits_collects_and_ends_clean(tmp_path: Path, mongo_db: Database) -> None:
    src = write_sources(tmp_path / "src", [RSE], files=1200)
    svc = make_service(tmp_path, mongo_db, src)
    first = svc.runner.run_once(RSE, wait_s=30)
    assert first.action == "new_generation" and first.submitted > 0
    doc = svc.ledger.base.rse(RSE)
    c = doc["counters"]
    assert c["to_delete"] > 0 and c["deleted"] == c["to_delete"] and c["pending"] == 0
    assert c["bytes_freed"] == 0  # the sample files are empty (sizes come from the worker's stat)
    assert c["protected"] + c["excluded"] + c["to_delete"] + sum(c["invalid"].values()) == 1200
    assert doc["protected_count"] > 0
    # Every planned file has exactly one record, in exactly one job.
    assert len(Ledger(mongo_db).reads.file_records(RSE)) == c["to_delete"]
    assert sorted(svc.runner.jobs.backend.submissions()) == sorted(j["_id"] for j in mongo_db.jobs.find())
    # The files are really gone from the site, and only those.
    deleted = {d["lfn"] for d in Ledger(mongo_db).reads.file_records(state="deleted")}
    all_files = set(dump_file(src, RSE).read_text().split())
    assert files_left(tmp_path / "storage" / RSE) == all_files - deleted
    second = svc.runner.run_once(RSE)
    assert (second.action, second.state) == ("finish", "clean")
    assert svc.ledger.base.rse(RSE)["state"] == "clean"
    assert len(svc.runner.jobs.backend.submissions()) == first.submitted  # nothing submitted again


@pytest.mark.parametrize("scan,reason", [
    (None, "scan_missing"),
    ({"status": "started", "end_time": None}, "scan_running"),
    ({"status": "failed", "error": "timeout", "end_time": 1.0}, "scan_failed"),
    ({"status": "done", "end_time": 1000.0, "files": 10}, "scan_stale"),
])
def test_skip_reasons_are_recorded(tmp_path: Path, mongo_db: Database, scan: dict, reason: str) -> None:
    src = write_sources(tmp_path / "src", [RSE], files=100)
    stats = json.loads((src / STATS_FILE).read_text())
    if scan is None:
        stats.pop(RSE)
    else:
        stats[RSE] = scan
    (src / STATS_FILE).write_text(json.dumps(stats))
    svc = make_service(tmp_path, mongo_db, src)
    result = svc.runner.run_once(RSE)
    assert (result.action, result.reason) == ("skip", reason)
    doc = svc.ledger.base.rse(RSE)
    assert doc["state"] == "skipped" and doc["reason"] == reason and doc["events"][-1]["reason"] == reason
    assert svc.runner.jobs.backend.submissions() == []


@pytest.mark.parametrize("protected", [[], None])
def test_missing_or_empty_protected_list_submits_nothing(tmp_path: Path, mongo_db: Database, protected) -> None:
    src = write_sources(tmp_path / "src", [RSE], files=200)
    if protected is None:
        (src / PROTECTED_FILE).unlink()
    else:
        (src / PROTECTED_FILE).write_text(json.dumps({"result": protected}))
    svc = make_service(tmp_path, mongo_db, src)
    result = svc.runner.run_once(RSE)
    assert result.state in ("guarded", "failed")
    assert result.reason in ("protected_list_empty", "wmstats_http_status")
    assert svc.ledger.base.rse(RSE)["reason"] == result.reason
    assert svc.runner.jobs.backend.submissions() == [] and not Ledger(mongo_db).reads.file_records()


def test_failures_are_retried_then_reported_not_clean(mongo_db: Database) -> None:
    base = world_readable_dir("msu-svc-fail-")  # the worker runs as nobody: no private tmp_path
    try:
        src = write_sources(base / "src", [RSE], files=300)
        dump = dump_file(src, RSE)
        lines = dump.read_text().splitlines()
        head, name = lines[-1].rsplit("/", 1)
        lines[-1] = f"{head}/locked/{name}"  # in a directory nobody may not write: permission denied
        lines[-2] = gone = lines[-2].replace(".root", "-gone.root")
        dump.write_text("\n".join(lines) + "\n")
        svc = make_service(base, mongo_db, src, python=as_nobody(base))
        storage = base / "storage" / RSE
        (storage / gone.lstrip("/")).unlink()
        chown_tree(storage, NOBODY)
        os.chown(storage / f"{head}/locked".lstrip("/"), 0, 0)
        rescan(src, RSE, storage)  # a chown changes the files' ctime: the scan must start after it
        svc.config.jobs.retries = 1
        assert svc.runner.run_once(RSE, wait_s=30).action == "new_generation"
        assert svc.runner.run_once(RSE, wait_s=30).action == "resume"  # one retry round for the failed file
        last = svc.runner.run_once(RSE)
        assert (last.action, last.state, last.reason) == ("finish", "done_with_errors", "files_failed")
        c = svc.ledger.base.rse(RSE)["counters"]
        assert c["failed"] == 1 and c["failed_by_class"] == {"permission_denied": 1} and c["missing"] == 1
        failed = next(iter(Ledger(mongo_db).reads.file_records(state="failed")), None)
        assert failed["attempts"] == 2 and failed["job"].split(":")[-1].startswith("2-")
        assert failed["lfn"] == lines[-1] and (storage / lines[-1].lstrip("/")).exists()
    finally:
        shutil.rmtree(base)


def test_new_dump_starts_new_generation_and_old_ones_are_pruned(tmp_path: Path, mongo_db: Database) -> None:
    src = write_sources(tmp_path / "src", [RSE], files=200)
    svc = make_service(tmp_path, mongo_db, src)
    svc.ledger.base.generations_kept = 2
    gens = []
    for k in range(3):
        stats = json.loads((src / STATS_FILE).read_text())
        stats[RSE]["start_time"] = stats[RSE]["end_time"] = time.time()  # a new scan, after the site's files
        (src / STATS_FILE).write_text(json.dumps(stats))
        result = svc.runner.run_once(RSE, wait_s=30)
        assert result.action == "new_generation"
        gens.append(result.generation)
    doc = svc.ledger.base.rse(RSE)
    assert [g["gen"] for g in doc["generations"]] == gens[1:] and doc["generation"] == gens[2]
    assert sorted({d["gen"] for d in Ledger(mongo_db).reads.file_records()}) == gens[1:]
    history = svc.ledger.reads.file_history(RSE, Ledger(mongo_db).reads.file_records(generation=gens[2])[0]["lfn"])
    assert [h["gen"] for h in history] == [gens[2], gens[1]]


def test_revalidation_removes_queued_jobs_with_newly_protected_files(tmp_path: Path, mongo_db: Database) -> None:
    src = write_sources(tmp_path / "src", [RSE], files=1200)
    gate = Gate(tmp_path)  # the workers wait for it: the first job stays running, the others queued
    svc = make_service(tmp_path, mongo_db, src, python=gate.python)
    svc.config.jobs.local_parallel = 1
    svc.runner.jobs.backend.parallel = 1
    first = svc.runner.run_once(RSE)
    assert first.submitted >= 3
    jobs = sorted(j["_id"] for j in mongo_db.jobs.find())
    running, queued = jobs[0], jobs[1]
    queued_files = set(svc.ledger.rounds.job_lfns(queued))
    newly = [svc.ledger.rounds.job_lfns(running)[0], svc.ledger.rounds.job_lfns(queued)[0]]
    newly = [lfn[:lfn.rfind("/")] for lfn in newly]  # their directories become protected
    prot = json.loads((src / PROTECTED_FILE).read_text())
    (src / PROTECTED_FILE).write_text(json.dumps({"result": prot["result"] + newly}))
    second = svc.runner.run_once(RSE)
    assert second.action == "poll" and second.removed_jobs == 1 and second.dropped_protected > 0
    # Removed before it started and planned again (its other files' tries unchanged): sent again without them.
    assert (mongo_db.jobs.find_one({"_id": queued})["state"], mongo_db.jobs.find_one({"_id": queued})["requeued"]) \
        == ("planned", 1)
    assert mongo_db.jobs.find_one({"_id": running})["state"] in ("running", "queued")  # started: left alone
    gate.open()
    for _ in range(6):
        if svc.runner.run_once(RSE, wait_s=60).action == "finish":
            break
    assert svc.ledger.base.rse(RSE)["state"] == "clean"
    kept = {d["lfn"] for d in Ledger(mongo_db).reads.file_records(job=queued, state="skipped_protected")}
    assert kept and all(lfn.startswith(newly[1] + "/") for lfn in kept)
    left = files_left(tmp_path / "storage" / RSE)
    assert kept <= left  # never deleted
    # The removed job's other files were sent again in it and deleted there, in their first try.
    rest = queued_files - kept
    assert rest and not rest & left
    assert {(d["state"], d.get("attempts", 1)) for d in Ledger(mongo_db).reads.file_records() if d["lfn"] in rest} \
        == {("deleted", 1)}
    assert mongo_db.jobs.find_one({"_id": queued})["state"] == "finished"
    assert not [d for d in Ledger(mongo_db).reads.file_records() if d["state"] in ("planned", "unknown", "failed")]
    # The running job was not touched by revalidation: the worker decided (its manifest predates the change).
    assert mongo_db.jobs.find_one({"_id": running})["state"] == "finished"


def test_preflight_refusal_is_recorded_and_other_rses_go_on(tmp_path: Path, mongo_db: Database) -> None:
    broken, fine = "T2_XX_Broken", "T2_XX_Fine"
    src = write_sources(tmp_path / "src", [RSE, broken, fine], files=200)
    svc = make_service(tmp_path, mongo_db, src)
    make_site(tmp_path, src, broken, svc.config)
    make_site(tmp_path, src, fine, svc.config)
    backends = {broken: LocalBackend(svc.config, tmp_path / "batch", python="/nonexistent/python3"),
                fine: svc.runner.jobs.backend}
    svc.runner.jobs.backend = RoutingBackend(svc.config, lambda rse: rse, factory=lambda kind, site: backends[site])
    results = svc.cycle([broken, fine], slot=1)
    assert (results[broken].action, results[broken].reason) == ("failed", "backend_unreachable")
    doc = svc.ledger.base.rse(broken)
    assert doc["reason"] == "backend_unreachable" and "cannot run" in doc["detail"]
    assert mongo_db.jobs.count_documents({"rse": broken, "state": {"$ne": "planned"}}) == 0  # nothing submitted
    assert not [j for j in backends[fine].submissions() if j.startswith(broken)]
    assert results[fine].action == "new_generation" and results[fine].submitted > 0
    svc.stop()


def test_job_counts_on_the_rse_document_follow_every_way_a_run_ends(tmp_path: Path, mongo_db: Database) -> None:
    """The `msunmerged_jobs` gauge reads counters.jobs_by_state: recounted when a run submits, and when a later
    run collects the jobs and then skips the RSE (a path that refreshes no other counter)."""
    src = write_sources(tmp_path / "src", [RSE], files=1200)
    svc = make_service(tmp_path, mongo_db, src)

    def actual() -> dict[str, int]:
        counts: dict[str, int] = {}
        for doc in mongo_db.jobs.find({"rse": RSE}):
            counts[doc["state"]] = counts.get(doc["state"], 0) + 1
        return counts

    first = svc.runner.run_once(RSE)
    assert first.submitted >= 3
    assert svc.ledger.base.rse(RSE)["counters"]["jobs_by_state"] == actual()
    ids = {j["_id"]: j["batch_id"] for j in mongo_db.jobs.find({"rse": RSE})}
    wait_for(svc.runner.jobs.backend, ids, timeout=120)  # finished in the batch system, not yet collected
    stats = json.loads((src / STATS_FILE).read_text())
    stats.pop(RSE)  # the next run collects, then skips: scan_missing
    (src / STATS_FILE).write_text(json.dumps(stats))
    second = svc.runner.run_once(RSE)
    assert (second.action, second.reason, second.collected) == ("skip", "scan_missing", first.submitted)
    counts = svc.ledger.base.rse(RSE)["counters"]["jobs_by_state"]
    assert counts == actual() and sum(counts.values()) == first.submitted
    assert not set(counts) & {"queued", "running", "submitting"}


@pytest.mark.parametrize("start", ["absent", None, "1700000000", "after_end", "in_the_future"])
def test_a_scan_without_a_usable_start_deletes_nothing(tmp_path: Path, mongo_db: Database, start: object) -> None:
    """Issue 23: a missing, null, non-numeric or inconsistent start_time switched the site's modified_since_scan
    check off (a file rewritten after the scan was deleted, the RSE clean). Now a named guard: nothing planned."""
    src = write_sources(tmp_path / "src", [RSE], files=100)
    svc = make_service(tmp_path, mongo_db, src)
    stats = json.loads((src / STATS_FILE).read_text())
    end = stats[RSE]["end_time"]
    if start == "absent":
        del stats[RSE]["start_time"]
    else:
        stats[RSE]["start_time"] = {"after_end": end + 1, "in_the_future": time.time() + 3600}.get(start, start)
    stats[RSE]["end_time"] = max(end, time.time() + 7200) if start == "in_the_future" else end
    (src / STATS_FILE).write_text(json.dumps(stats))
    storage = tmp_path / "storage" / RSE
    before = files_left(storage)
    rewritten = sorted(before)[-1]
    (storage / rewritten.lstrip("/")).write_bytes(b"rewritten after the scan")
    result = svc.runner.run_once(RSE, wait_s=10)
    reason = "scan_start_missing" if start in ("absent", None) else "scan_start_invalid"
    assert (result.action, result.reason) == ("skip", reason), result
    doc = svc.ledger.base.rse(RSE)
    assert (doc["state"], doc["reason"]) == ("skipped", reason) and doc["events"][-1]["reason"] == reason
    assert svc.runner.jobs.backend.submissions() == [] and files_left(storage) == before


def test_a_dry_run_that_finds_every_file_gone_is_not_clean(tmp_path: Path, mongo_db: Database) -> None:
    """Issue 23: every planned file already absent at the site read `clean` 100 % under the DRY RUN banner."""
    src = write_sources(tmp_path / "src", [RSE], files=100)
    svc = make_service(tmp_path, mongo_db, src, dry_run=True)
    shutil.rmtree(tmp_path / "storage" / RSE / "store")
    first = svc.runner.run_once(RSE, wait_s=30)
    assert first.submitted > 0 and first.collected == first.submitted
    c = svc.ledger.base.rse(RSE)["counters"]
    assert c["missing"] == c["to_delete"] > 0 and c["would_delete"] == 0
    last = svc.runner.run_once(RSE)
    assert (last.action, last.state, last.reason) == ("finish", "dry_run_done", "dry_run")
    assert svc.ledger.base.rse(RSE)["state"] == "dry_run_done"
