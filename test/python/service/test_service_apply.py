"""apply: exactly the plan on disk is recorded and submitted; files protected since planning are dropped."""
from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from pymongo.database import Database

from MSUnmerged import planner, sample
from MSUnmerged.config import Config
from MSUnmerged.dumpreader import iter_chunks
from MSUnmerged.jobs.backend import wait_for
from MSUnmerged.ledger import Ledger
from MSUnmerged.service import Service
from MSUnmerged.sources.offline import STATS_FILE, dump_file
from service_kit import LoggedLocalBackend, dump_lines, files_left, make_site, rse_list

pytestmark = pytest.mark.integration
RSE = "T2_IT_Apply"


def write_dump(tmp_path: Path, lines: list[str]) -> tuple[Path, Config]:
    """The RSE's dump where make_site looks for it, and a configuration with its own state folder."""
    dump = dump_file(tmp_path / "src", RSE)
    dump.parent.mkdir(parents=True)
    dump.write_text("\n".join(lines) + "\n")
    config = Config()
    config.service.state_dir = str(tmp_path / "state")
    return dump, config


def scan_of(src: Path, files: int) -> dict:
    """A finished scan of the RSE, started now (after its site's files were made), as src/stats.json."""
    now = time.time()
    stats = sample.stats_for(RSE, files, now, now)
    (src / STATS_FILE).write_text(json.dumps(stats))
    return stats[RSE]


def test_apply_drops_newly_protected_and_submits_the_rest(tmp_path: Path, mongo_db: Database) -> None:
    lines, protected = dump_lines(RSE, 500)
    dump, config = write_dump(tmp_path, lines)
    config.planner.files_per_job = 100
    storage = make_site(tmp_path, tmp_path / "src", RSE, config)
    stats = scan_of(tmp_path / "src", len(lines))  # apply re-derives the plan from the RSE's current scan
    plan = planner.plan(RSE, iter_chunks(str(dump)), protected, config, tmp_path / "plan", stats=stats)
    newly = f"/store/unmerged/Run3Era/Primary5/AODSIM/Proc{RSE[-3:]}-v1"
    ledger = Ledger(mongo_db)
    ledger.ensure_indexes()
    backend = LoggedLocalBackend(config, tmp_path / "batch")
    svc = Service(config, ledger, rse_list(tmp_path / "src", [RSE]), backend=backend, instance="cli")
    result = svc.runner.apply_plan(tmp_path / "plan", protected + [newly])
    svc.stop()
    assert result.dropped_protected == 50 and result.submitted == plan.jobs
    submitted = [lfn for d in (tmp_path / "batch").iterdir() if d.is_dir()
                 for lfn in json.loads((d / "manifest.json").read_text())["task"]["steps"][0]["lfns"]]
    planned = [x for name in plan.job_files for x in (tmp_path / "plan" / "jobs" / name).read_text().split()]
    assert sorted(submitted) == sorted(x for x in planned if not x.startswith(newly + "/"))
    assert len(Ledger(mongo_db).reads.file_records(state="skipped_protected")) == 50
    assert ledger.base.rse(RSE)["generations"][0]["dropped_protected"] == 50
    manifests = [json.loads((d / "manifest.json").read_text()) for d in (tmp_path / "batch").iterdir() if d.is_dir()]
    assert all(m["task"]["steps"][0]["dry_run"] for m in manifests)  # dry run is the default
    states = wait_for(backend, {j["_id"]: j["batch_id"] for j in mongo_db.jobs.find()}, timeout=60)
    assert {s.state.value for s in states.values()} == {"finished"}
    assert files_left(storage) == set(lines)  # the jobs ran at the site and deleted nothing


def test_apply_refuses_an_empty_protected_list(tmp_path: Path, mongo_db: Database) -> None:
    lines, protected = dump_lines(RSE, 100)
    (tmp_path / "dump.txt").write_text("\n".join(lines) + "\n")
    config = Config()
    config.service.state_dir = str(tmp_path / "state")
    planner.plan(RSE, iter_chunks(str(tmp_path / "dump.txt")), protected, config, tmp_path / "plan",
                 require_scan=False)
    backend = LoggedLocalBackend(config, tmp_path / "b")
    svc = Service(config, Ledger(mongo_db), rse_list(tmp_path / "src", [RSE]), backend=backend)
    result = svc.runner.apply_plan(tmp_path / "plan", [])
    svc.stop()
    assert (result.state, result.reason) == ("guarded", "protected_list_empty")
    assert backend.submissions() == [] and not Ledger(mongo_db).reads.file_records()


def test_apply_carries_the_scan_start_to_the_workers(tmp_path: Path, mongo_db: Database) -> None:
    """A plan made with the ConMon stats keeps the scan's start_time (sealed in summary.json); the jobs
    that `apply` submits carry it, so their workers refuse files modified since the scan."""
    lines, protected = dump_lines(RSE, 100)
    dump, config = write_dump(tmp_path, lines)
    config.guards.max_delete_fraction = 1.0
    end = time.time() - 3600
    stats = {"status": "done", "start_time": end - 1800, "end_time": end, "files": len(lines)}
    plan = planner.plan(RSE, iter_chunks(str(dump)), protected, config, tmp_path / "plan",
                        stats=stats)
    assert plan.guard is None and plan.scan_started == end - 1800
    make_site(tmp_path, tmp_path / "src", RSE, config)
    (tmp_path / "src" / STATS_FILE).write_text(json.dumps({RSE: stats}))  # the scan apply reads again
    backend = LoggedLocalBackend(config, tmp_path / "b")
    svc = Service(config, Ledger(mongo_db), rse_list(tmp_path / "src", [RSE]), backend=backend)
    result = svc.runner.apply_plan(tmp_path / "plan", protected)
    svc.stop()
    assert result.submitted == plan.jobs > 0
    steps = [json.loads((d / "manifest.json").read_text())["task"]["steps"][0]
             for d in (tmp_path / "b").iterdir() if d.is_dir()]
    assert len(steps) == plan.jobs and {s["scan_started"] for s in steps} == {end - 1800}
