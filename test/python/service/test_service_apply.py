"""apply: exactly the plan on disk is recorded and submitted; files protected since planning are dropped."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from pymongo.database import Database

from MSUnmerged import planner
from MSUnmerged.config import Config
from MSUnmerged.dumpreader import iter_chunks
from MSUnmerged.ledger import Ledger
from MSUnmerged.service import Service
from svc_doubles import DirBackend, dump_lines

pytestmark = pytest.mark.integration
RSE = "T2_IT_Apply"


def test_apply_drops_newly_protected_and_submits_the_rest(tmp_path: Path, mongo_db: Database) -> None:
    lines, protected = dump_lines(RSE, 500)
    (tmp_path / "dump.txt").write_text("\n".join(lines) + "\n")
    config = Config()
    config.service.state_dir = str(tmp_path / "state")
    config.planner.files_per_job = 100
    plan = planner.plan(RSE, iter_chunks(str(tmp_path / "dump.txt")), protected, config, tmp_path / "plan",
                        require_scan=False)
    newly = f"/store/unmerged/Run3Era/Primary5/AODSIM/Proc{RSE[-3:]}-v1"
    ledger = Ledger(mongo_db)
    ledger.ensure_indexes()
    backend = DirBackend(tmp_path / "batch")
    svc = Service(config, ledger, sources=None, backend=backend, instance="cli")  # type: ignore[arg-type]
    result = svc.apply_plan(tmp_path / "plan", protected + [newly])
    svc.stop()
    assert result.dropped_protected == 50 and result.submitted == plan.jobs
    submitted = [lfn for d in (tmp_path / "batch").iterdir() if d.is_dir()
                 for lfn in json.loads((d / "manifest.json").read_text())["task"]["steps"][0]["lfns"]]
    planned = [x for name in plan.job_files for x in (tmp_path / "plan" / "jobs" / name).read_text().split()]
    assert sorted(submitted) == sorted(x for x in planned if not x.startswith(newly + "/"))
    assert mongo_db.files.count_documents({"state": "skipped_protected"}) == 50
    assert ledger.rse(RSE)["generations"][0]["dropped_protected"] == 50
    manifests = [json.loads((d / "manifest.json").read_text()) for d in (tmp_path / "batch").iterdir() if d.is_dir()]
    assert all(m["task"]["steps"][0]["dry_run"] for m in manifests)  # dry run is the default


def test_apply_refuses_an_empty_protected_list(tmp_path: Path, mongo_db: Database) -> None:
    lines, protected = dump_lines(RSE, 100)
    (tmp_path / "dump.txt").write_text("\n".join(lines) + "\n")
    config = Config()
    config.service.state_dir = str(tmp_path / "state")
    planner.plan(RSE, iter_chunks(str(tmp_path / "dump.txt")), protected, config, tmp_path / "plan",
                 require_scan=False)
    svc = Service(config, Ledger(mongo_db), sources=None, backend=DirBackend(tmp_path / "b"))  # type: ignore[arg-type]
    result = svc.apply_plan(tmp_path / "plan", [])
    svc.stop()
    assert (result.state, result.reason) == ("guarded", "protected_list_empty")
    assert DirBackend(tmp_path / "b").submissions() == [] and mongo_db.files.count_documents({}) == 0
