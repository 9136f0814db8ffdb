"""A crash after any step of run_once, then a restart, leaves the ledger as a run without the crash.

Jobs run with the real worker (LocalBackend) on the RSE's own storage folder; a crashed instance's
workers keep running, as they would in a batch system.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pymongo import MongoClient
from pymongo.database import Database

from MSUnmerged.config import Config, SiteConfig
from MSUnmerged.ledger import Ledger, gen_key
from MSUnmerged.service import STEPS, Service
from MSUnmerged.sources.offline import OfflineSources
from MSUnmerged.worker.ids import job_folder
from service_kit import LoggedLocalBackend, files_left, make_site, write_sources

pytestmark = pytest.mark.integration
RSE = "T2_DE_Crash"


class Crash(BaseException):
    """Stands for the process dying: nothing in run_once may catch it."""


def service(tmp: Path, db: Database, src: Path, hook: Any = None, submit_batch: int = 500) -> Service:
    config = Config()
    config.service.state_dir = str(tmp / "state")
    config.service.dry_run = False
    config.planner.files_per_job = 250
    config.jobs.submit_batch = submit_batch
    if (tmp / "storage" / RSE).exists():  # the restarted instance works on the same site
        config.jobs.sites[RSE] = SiteConfig(siteconfig=str(next((tmp / "siteconf" / "SITECONF").iterdir())))
    else:
        make_site(tmp, src, RSE, config)
    ledger = Ledger(db)
    ledger.ensure_indexes()
    return Service(config, ledger, OfflineSources(src), LoggedLocalBackend(config, tmp / "batch"), instance="crashy",
                   hook=hook)


def run_to_end(svc: Service) -> None:
    for _ in range(5):
        if svc.runner.run_once(RSE, wait_s=20).action == "finish":
            return
    raise AssertionError("run_once never finished the RSE")


def snapshot(db: Database, submissions: list[str]) -> dict[str, Any]:
    """The ledger's records and the jobs submitted, the generation written as "<gen>": each run fills its own site,
    and its scan starts after that (workers refuse files changed after the scan started), so generations differ."""
    files = {d["_id"]: (d["state"], d["job"], d["attempts"], d.get("error_class"))
             for d in Ledger(db).reads.file_records()}
    # A local batch id is the job's folder, which holds a hash of its id: compared as "its own folder".
    jobs = {d["_id"]: (d["state"], d["files"], d.get("batch_id") == f"local:{job_folder(d['_id'])}", d.get("summary"))
            for d in db.jobs.find()}
    rse = db.rses.find_one({"_id": RSE})
    gens = [g["gen"] for g in rse["generations"]]
    snap = {"files": files, "jobs": jobs, "state": rse["state"], "counters": rse["counters"],
            "generation": gens.index(rse["generation"]), "generations": len(gens), "submissions": sorted(submissions)}
    return json.loads(json.dumps(snap).replace(gen_key(rse["generation"]), "<gen>"))


@pytest.fixture(scope="module")
def sources(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_sources(tmp_path_factory.mktemp("crash-src"), [RSE], files=1000)


@pytest.fixture(scope="module")
def baseline(sources: Path, tmp_path_factory: pytest.TempPathFactory, mongo_client: MongoClient) -> dict[str, Any]:
    db = mongo_client["crash_baseline"]
    mongo_client.drop_database(db.name)
    tmp = tmp_path_factory.mktemp("baseline")
    svc = service(tmp, db, sources)
    run_to_end(svc)
    svc.runner.leases.stop_heartbeat()
    snap = snapshot(db, svc.runner.jobs.backend.submissions())
    snap["left"] = files_left(tmp / "storage" / RSE)
    mongo_client.drop_database(db.name)
    return snap


def crash_then_restart(step: str, occurrence: int, submit_batch: int, sources: Path, baseline: dict[str, Any],
                       tmp: Path, db: Database) -> None:
    """Crash at the `occurrence`-th time run_once reaches `step`, restart, run to the end: as without the crash."""
    seen = []

    def crash_once(at: str, rse: str) -> None:
        if at == step:
            seen.append(at)
            if len(seen) == occurrence:
                raise Crash(at)

    crashing = service(tmp, db, sources, crash_once, submit_batch)
    with pytest.raises(Crash):
        run_to_end(crashing)
    crashing.runner.leases.stop_heartbeat()
    restarted = service(tmp, db, sources, submit_batch=submit_batch)  # same instance name: takes its own lease back
    run_to_end(restarted)
    restarted.runner.leases.stop_heartbeat()
    submissions = restarted.runner.jobs.backend.submissions()
    snap = snapshot(db, submissions)
    assert len(submissions) == len(set(submissions)), "a job was submitted twice"
    for key in ("submissions", "files", "jobs", "state", "generation", "counters", "generations"):
        assert snap[key] == baseline[key], key
    assert files_left(tmp / "storage" / RSE) == baseline["left"]  # the same files really deleted


@pytest.mark.parametrize("step", STEPS)
def test_restart_after_crash_matches_uncrashed_run(step: str, sources: Path, baseline: dict[str, Any],
                                                   tmp_path: Path, mongo_db: Database) -> None:
    crash_then_restart(step, 1, 500, sources, baseline, tmp_path, mongo_db)


@pytest.mark.parametrize("step", ["intent", "submitted", "marked"])
def test_restart_after_crash_in_a_later_batch_matches_uncrashed_run(step: str, sources: Path,
                                                                    baseline: dict[str, Any], tmp_path: Path,
                                                                    mongo_db: Database) -> None:
    """One job per batch, crash in the second batch: the first batch is queued, the second `submitting` (or
    submitted, not marked), the others still planned; the baseline was submitted in one batch."""
    assert len(baseline["submissions"]) >= 3  # a batch before and after the crashed one
    crash_then_restart(step, 2, 1, sources, baseline, tmp_path, mongo_db)
