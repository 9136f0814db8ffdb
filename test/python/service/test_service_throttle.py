"""The throttle and the in-flight cap end to end: a real SecantusDB ledger, the real LocalBackend running the
worker on a POSIX site. A backlog larger than the count guard drains over several cycles of one dump without
a guard; no more than `max_in_flight` jobs of an RSE are ever in the batch system."""
from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path

import pytest
from pymongo.database import Database

from MSUnmerged.config import SiteConfig
from MSUnmerged.ledger import Ledger
from MSUnmerged.service.drain import Drainer
from MSUnmerged.sources.offline import PROTECTED_FILE, dump_file
from service_kit import files_left, write_sources
from test_service_run import RSE, make_service

pytestmark = pytest.mark.integration


def most_at_once(spans: list[tuple[float, float]]) -> int:
    """The most intervals [start, end) that overlap at one moment."""
    return max((sum(1 for a, b in spans if a <= t < b) for t, _ in spans), default=0)


def test_a_backlog_larger_than_the_guard_drains_over_several_cycles(tmp_path: Path, mongo_db: Database) -> None:
    src = write_sources(tmp_path / "src", [RSE], files=1200)
    svc = make_service(tmp_path, mongo_db, src)
    svc.config.guards.max_delete_files = 300  # the dump holds ~1,000 deletable files: too many for one plan
    svc.config.planner.max_files_per_cycle = 300
    svc.config.planner.files_per_job = 100
    all_files = set(dump_file(src, RSE).read_text().split())
    shares, results = [], []
    for _ in range(8):
        result = svc.runner.run_once(RSE, wait_s=60)
        results.append(result)
        if result.action == "finish":
            break
        c = svc.ledger.base.rse(RSE)["counters"]
        shares.append((c["slice"], c["cycle_files"], c["to_delete"], c["slices"]))
    assert [r.state for r in results if r.state == "guarded"] == [] and results[-1].state == "clean"
    assert results[0].action == "new_generation" and {r.action for r in results[1:-1]} == {"resume"}
    assert len({r.generation for r in results}) == 1  # one dump, several cycles
    to_delete = shares[0][2]
    assert to_delete > 300 and shares[0][3] >= 4
    # One slice per cycle, in order, each at most 300 files, together the whole plan.
    assert [s[0] for s in shares] == list(range(1, shares[0][3] + 1))
    assert all(0 < s[1] <= 300 for s in shares) and sum(s[1] for s in shares) == to_delete
    deleted = {d["lfn"] for d in Ledger(mongo_db).reads.file_records(state="deleted")}
    assert len(deleted) == to_delete and files_left(tmp_path / "storage" / RSE) == all_files - deleted
    # Each cycle submitted only its own slice's jobs.
    jobs = list(mongo_db.jobs.find({"rse": RSE}))
    assert {j["slice"] for j in jobs} == set(range(1, shares[0][3] + 1))
    cycle_of = {j["_id"]: j["slice"] for j in jobs}
    starts = sorted((j["submitted_at"], cycle_of[j["_id"]]) for j in jobs)
    assert [sl for _, sl in starts] == sorted(sl for _, sl in starts)


def test_no_more_than_max_in_flight_jobs_at_once(tmp_path: Path, mongo_db: Database) -> None:
    src = write_sources(tmp_path / "src", [RSE], files=1200)
    svc = make_service(tmp_path, mongo_db, src)
    svc.config.planner.files_per_job = 100
    svc.config.jobs.local_parallel = 4
    svc.runner.jobs.backend.parallel = 4
    svc.config.jobs.sites.setdefault(RSE, SiteConfig()).max_in_flight = 2
    first = svc.runner.run_once(RSE, wait_s=120)
    assert first.action == "new_generation" and first.submitted >= 9  # topped up while waiting
    jobs = list(mongo_db.jobs.find({"rse": RSE}))
    assert {j["state"] for j in jobs} == {"finished"} and len(jobs) == first.submitted
    # A job is in flight from its intent until it is collected.
    assert most_at_once([(j["intent_at"], j["finished_at"]) for j in jobs]) <= 2
    assert svc.runner.run_once(RSE).state == "clean"


def test_between_cycles_the_drainer_collects_and_tops_up(tmp_path: Path, mongo_db: Database) -> None:
    """One cycle submits as many jobs as the cap allows; without another cycle the drainer collects them and
    submits the rest under the same cap; an RSE a cycle holds, or a protected list it cannot trust, submits
    nothing."""
    src = write_sources(tmp_path / "src", [RSE], files=1200)
    svc = make_service(tmp_path, mongo_db, src)
    svc.config.planner.files_per_job = 200
    svc.config.jobs.sites.setdefault(RSE, SiteConfig()).max_in_flight = 2
    first = svc.runner.run_once(RSE)
    planned = mongo_db.jobs.count_documents({"rse": RSE})
    assert first.submitted == 2 and planned >= 5
    drainer = Drainer(svc.config, svc.ledger, svc.sources, svc.runner.jobs.backend, "test-1", lambda: [RSE])

    def detail_is_current() -> None:  # issue 39: not "2 jobs submitted" while the top-up submits more
        live = mongo_db.jobs.count_documents({"rse": RSE, "state": {"$in": ["submitting", "queued", "running"]}})
        doc = mongo_db.rses.find_one({"_id": RSE})
        assert (doc["state"], doc["detail"]) == ("running" if live else "planned", f"{live} jobs in the batch system")
    try:
        assert svc.runner.leases.acquire(RSE)  # a cycle works on the RSE: left alone
        assert drainer.once() == {}
        svc.runner.leases.release(RSE)
        prot = json.loads((src / PROTECTED_FILE).read_text())
        (src / PROTECTED_FILE).write_text(json.dumps({"result": []}))  # WMStats restarting: not to be trusted
        deadline = time.monotonic() + 60
        while mongo_db.jobs.count_documents({"rse": RSE, "state": "queued"}) + \
                mongo_db.jobs.count_documents({"rse": RSE, "state": "running"}):
            assert time.monotonic() < deadline
            drainer.once()
            detail_is_current()
            time.sleep(0.2)
        assert mongo_db.jobs.count_documents({"rse": RSE, "state": "planned"}) == planned - 2  # guard: none more
        (src / PROTECTED_FILE).write_text(json.dumps(prot))
        while mongo_db.jobs.count_documents({"rse": RSE, "state": {"$ne": "finished"}}):
            assert time.monotonic() < deadline + 120
            drainer.once()
            detail_is_current()
            time.sleep(0.2)
    finally:
        drainer.stop()
    jobs = list(mongo_db.jobs.find({"rse": RSE}))
    assert most_at_once([(j["intent_at"], j["finished_at"]) for j in jobs]) <= 2
    assert svc.runner.run_once(RSE).state == "clean"


def test_a_per_site_exclusion_is_honoured(tmp_path: Path, mongo_db: Database) -> None:
    """jobs.sites.<RSE>.exclude: its files are never planned, their jobs' manifests carry it for the worker's
    own check, the plan summary shows it, and the files stay at the site."""
    src = write_sources(tmp_path / "src", [RSE], files=300)
    svc = make_service(tmp_path, mongo_db, src)
    lines = dump_file(src, RSE).read_text().split()
    wmagent_logs = lines[3].rsplit("/", 3)[0]  # one dataset directory, e.g. where a site keeps job logs
    svc.config.jobs.sites.setdefault(RSE, SiteConfig()).exclude = [wmagent_logs]
    result = svc.runner.run_once(RSE)
    assert result.action == "new_generation"
    manifests = list((tmp_path / "batch").rglob("manifest.json"))  # before collection removes the job folders
    assert manifests and all(wmagent_logs in json.loads(m.read_text())["task"]["steps"][0]["exclude"]
                             for m in manifests)
    assert svc.runner.run_once(RSE, wait_s=60).action in ("poll", "finish")
    under = [x for x in lines if x.startswith(wmagent_logs + "/")]
    storage = tmp_path / "storage" / RSE
    assert under and all((storage / x.lstrip("/")).exists() for x in under)
    assert not [r for r in Ledger(mongo_db).reads.file_records(RSE) if r["lfn"].startswith(wmagent_logs + "/")]
    entry = svc.ledger.base.generation_entry(RSE, result.generation)
    assert entry["excluded"] == len(under)
    summary = json.loads((Path(entry["plan_dir"]) / "summary.json").read_text())
    assert wmagent_logs in summary["filters"]["exclude"]


def test_after_a_dry_run_the_real_deletions_stay_throttled(tmp_path: Path, mongo_db: Database) -> None:
    """A throttled RSE worked in dry run, then for real: the files the dry run left go out N a cycle, never
    the whole plan at once, each counted as its own first real try."""
    src = write_sources(tmp_path / "src", [RSE], files=1200)
    svc = make_service(tmp_path, mongo_db, src)
    svc.config.service.dry_run = True
    svc.config.guards.max_delete_files = 300
    svc.config.planner.max_files_per_cycle = 300
    svc.config.planner.files_per_job = 100
    for _ in range(8):
        if svc.runner.run_once(RSE, wait_s=60).state == "dry_run_done":
            break
    to_delete = svc.ledger.base.rse(RSE)["counters"]["would_delete"]
    assert to_delete > 300 and not Ledger(mongo_db).reads.file_records(state="deleted")
    svc.config.service.dry_run = False
    rounds = []
    for _ in range(10):
        result = svc.runner.run_once(RSE, wait_s=60)
        if result.action == "finish":
            break
        assert result.action == "resume" and result.state != "guarded"
        rounds.append(result.submitted)
    assert result.state == "clean" and len(rounds) >= 4
    real = [j for j in mongo_db.jobs.find({"rse": RSE}) if j["round"] > 1]
    per_round = Counter()
    for job in real:
        per_round[job["round"]] += job["files"]
    assert max(per_round.values()) <= 300 and sum(per_round.values()) == to_delete
    deleted = Ledger(mongo_db).reads.file_records(state="deleted")
    assert len(deleted) == to_delete and {d["attempts"] for d in deleted} == {2}
