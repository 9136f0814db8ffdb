"""run_once against a real SecantusDB: the happy path, skips with reasons, guards, retries, new dumps."""
from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from pymongo.database import Database

from MSUnmerged.config import Config
from MSUnmerged.ledger import Ledger
from MSUnmerged.service import Service
from MSUnmerged.sources.offline import OfflineSources
from svc_doubles import DirBackend, write_sources

pytestmark = pytest.mark.integration
RSE = "T2_CH_Test"


def make_service(tmp_path: Path, db: Database, srcdir: Path, **service: object) -> Service:
    config = Config()
    config.service.state_dir = str(tmp_path / "state")
    config.service.dry_run = False
    config.service.lease_ttl_s = 10
    config.planner.files_per_job = 300
    for key, value in service.items():
        setattr(config.service, key, value)
    ledger = Ledger(db, config.mongo.generations_kept)
    ledger.ensure_indexes()
    return Service(config, ledger, OfflineSources(srcdir), DirBackend(tmp_path / "batch"), instance="test-1")


def test_run_once_plans_submits_collects_and_ends_clean(tmp_path: Path, mongo_db: Database) -> None:
    src = write_sources(tmp_path / "src", [RSE], files=1200)
    svc = make_service(tmp_path, mongo_db, src)
    first = svc.run_once(RSE, wait_s=30)
    assert first.action == "new_generation" and first.submitted > 0
    doc = svc.ledger.rse(RSE)
    c = doc["counters"]
    assert c["to_delete"] > 0 and c["deleted"] == c["to_delete"] and c["pending"] == 0
    assert c["bytes_freed"] == 1000 * c["deleted"]
    assert c["protected"] + c["excluded"] + c["to_delete"] + sum(c["invalid"].values()) == 1200
    assert doc["protected_count"] > 0
    # Every planned file has exactly one record, in exactly one job.
    assert mongo_db.files.count_documents({"rse": RSE}) == c["to_delete"]
    assert sorted(svc.backend.submissions()) == sorted(j["_id"] for j in mongo_db.jobs.find())
    second = svc.run_once(RSE)
    assert (second.action, second.state) == ("finish", "clean")
    assert svc.ledger.rse(RSE)["state"] == "clean"
    assert len(svc.backend.submissions()) == first.submitted  # nothing submitted again


@pytest.mark.parametrize("scan,reason", [
    (None, "scan_missing"),
    ({"status": "started", "end_time": None}, "scan_running"),
    ({"status": "failed", "error": "timeout", "end_time": 1.0}, "scan_failed"),
    ({"status": "done", "end_time": 1000.0, "files": 10}, "scan_stale"),
])
def test_skip_reasons_are_recorded(tmp_path: Path, mongo_db: Database, scan: dict, reason: str) -> None:
    src = write_sources(tmp_path / "src", [RSE], files=100)
    stats = json.loads((src / "stats.json").read_text())
    if scan is None:
        stats.pop(RSE)
    else:
        stats[RSE] = scan
    (src / "stats.json").write_text(json.dumps(stats))
    svc = make_service(tmp_path, mongo_db, src)
    result = svc.run_once(RSE)
    assert (result.action, result.reason) == ("skip", reason)
    doc = svc.ledger.rse(RSE)
    assert doc["state"] == "skipped" and doc["reason"] == reason and doc["events"][-1]["reason"] == reason
    assert svc.backend.submissions() == []


@pytest.mark.parametrize("protected", [[], None])
def test_missing_or_empty_protected_list_submits_nothing(tmp_path: Path, mongo_db: Database, protected) -> None:
    src = write_sources(tmp_path / "src", [RSE], files=200)
    if protected is None:
        (src / "protected.json").unlink()
    else:
        (src / "protected.json").write_text(json.dumps({"result": protected}))
    svc = make_service(tmp_path, mongo_db, src)
    result = svc.run_once(RSE)
    assert result.state in ("guarded", "failed")
    assert result.reason in ("protected_list_empty", "wmstats_http_status")
    assert svc.ledger.rse(RSE)["reason"] == result.reason
    assert svc.backend.submissions() == [] and mongo_db.files.count_documents({}) == 0


def test_failures_are_retried_then_reported_not_clean(tmp_path: Path, mongo_db: Database) -> None:
    src = write_sources(tmp_path / "src", [RSE], files=300)
    dump = src / "dumps" / f"{RSE}.txt"
    lines = dump.read_text().splitlines()
    lines[-1] = lines[-1].replace(".root", "-fail.root")
    lines[-2] = lines[-2].replace(".root", "-gone.root")
    dump.write_text("\n".join(lines) + "\n")
    svc = make_service(tmp_path, mongo_db, src)
    svc.config.jobs.retries = 1
    assert svc.run_once(RSE, wait_s=30).action == "new_generation"
    assert svc.run_once(RSE, wait_s=30).action == "resume"  # one retry round for the failed file
    last = svc.run_once(RSE)
    assert (last.action, last.state, last.reason) == ("finish", "done_with_errors", "files_failed")
    c = svc.ledger.rse(RSE)["counters"]
    assert c["failed"] == 1 and c["failed_by_class"] == {"permission_denied": 1} and c["missing"] == 1
    failed = mongo_db.files.find_one({"state": "failed"})
    assert failed["attempts"] == 2 and failed["job"].split(":")[-1].startswith("2-")


def test_new_dump_starts_new_generation_and_old_ones_are_pruned(tmp_path: Path, mongo_db: Database) -> None:
    src = write_sources(tmp_path / "src", [RSE], files=200)
    svc = make_service(tmp_path, mongo_db, src)
    svc.ledger.generations_kept = 2
    gens = []
    for k in range(3):
        stats = json.loads((src / "stats.json").read_text())
        stats[RSE]["end_time"] = time.time() - 100 + k
        (src / "stats.json").write_text(json.dumps(stats))
        result = svc.run_once(RSE, wait_s=30)
        assert result.action == "new_generation"
        gens.append(result.generation)
    doc = svc.ledger.rse(RSE)
    assert [g["gen"] for g in doc["generations"]] == gens[1:] and doc["generation"] == gens[2]
    assert sorted(mongo_db.files.distinct("gen")) == gens[1:]
    history = svc.ledger.file_history(RSE, mongo_db.files.find_one({"gen": gens[2]})["lfn"])
    assert [h["gen"] for h in history] == [gens[2], gens[1]]
