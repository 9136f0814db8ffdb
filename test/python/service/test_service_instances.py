"""Two service instances (separate processes) on one database: each RSE once per cycle, even when one dies.

Both submit to one LocalBackend work folder (one batch system); the workers really delete the files of
each RSE's storage folder, so a job run twice would show up as files reported missing.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

import pytest
from pymongo import MongoClient

from MSUnmerged.config import Config
from MSUnmerged.ledger import Ledger
from MSUnmerged.service import Service
from MSUnmerged.sources.offline import OfflineSources, dump_file
from service_kit import LoggedLocalBackend, files_left, make_site, write_sources

pytestmark = [pytest.mark.integration, pytest.mark.slow]
HERE = Path(__file__).resolve().parent
RSES = [f"T2_XX_Site{i:02d}" for i in range(12)]
SLOT = 42


def start(tmp: Path, url: str, db: str, name: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), str(HERE.parents[2] / "src" / "python")])}
    return subprocess.Popen([sys.executable, str(HERE / "service_instance_driver.py"), url, db, str(tmp / "src"),
                             str(tmp / "batch"), str(tmp / f"state-{name}"), name, str(SLOT), str(tmp / "work.log"),
                             str(tmp / "sites.json")],
                            stdout=subprocess.PIPE, stderr=open(tmp / f"{name}.err", "w"), text=True, env=env,
                            start_new_session=True)


def test_two_instances_one_killed_mid_cycle(tmp_path: Path, mongo_url: str, mongo_client: MongoClient) -> None:
    write_sources(tmp_path / "src", RSES, files=600)
    config = Config()
    config.service.state_dir = str(tmp_path / "state-check")
    config.service.lease_ttl_s = 10
    storages = {rse: make_site(tmp_path, tmp_path / "src", rse, config) for rse in RSES}
    (tmp_path / "sites.json").write_text(json.dumps({rse: asdict(s) for rse, s in config.jobs.sites.items()}))
    db_name = f"instances_{os.getpid()}"
    mongo_client.drop_database(db_name)
    db = mongo_client[db_name]
    a = start(tmp_path, mongo_url, db_name, "inst-a")
    b = start(tmp_path, mongo_url, db_name, "inst-b")
    # Kill A while it holds a lease, in the middle of its work.
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        held = db.leases.count_documents({"owner": "inst-a"})
        done_by_a = (tmp_path / "work.log").exists() and '"inst-a"' in (tmp_path / "work.log").read_text()
        if held and done_by_a:
            break
        time.sleep(0.05)
    else:
        pytest.fail("instance A never got to work")
    held_by_a = [d["_id"] for d in db.leases.find({"owner": "inst-a"})]
    os.killpg(a.pid, signal.SIGKILL)
    a.wait(10)
    out, _ = b.communicate(timeout=240)
    assert b.returncode == 0, (tmp_path / "inst-b.err").read_text()[-3000:]
    results_b = json.loads(out)

    work = [json.loads(line) for line in (tmp_path / "work.log").read_text().splitlines()]
    worked = [w["rse"] for w in work]
    # A kill between A marking an RSE done (its lease) and the driver's log line leaves that RSE unlogged:
    # B must then have found it done, not worked it again.
    done_unlogged = sorted(set(RSES) - set(worked))
    assert all(results_b[rse]["action"] == "done_this_cycle" for rse in done_unlogged), results_b
    assert len(done_unlogged) <= 2, "only the RSEs A worked at the kill (parallel_rses 2) can fall in that window"
    assert sorted(worked + done_unlogged) == sorted(RSES), "each RSE exactly once in the cycle"
    for w in work:  # A died holding some: B took them over after expiry and finished what A began
        # (or, when A's jobs are still running at takeover, polls them: they are collected below)
        expected = ("new_generation", "finish", "resume", "poll") if w["rse"] in held_by_a else ("new_generation",)
        assert w["action"] in expected, w
    assert all(results_b[rse]["action"] != "failed" for rse in held_by_a)
    assert all(d["done_slot"] == SLOT for d in db.leases.find())

    backend = LoggedLocalBackend(config, tmp_path / "batch")
    submissions = backend.submissions()
    assert len(submissions) == len(set(submissions)), "a job was submitted twice"
    jobs = {d["_id"]: d for d in db.jobs.find()}
    assert set(submissions) == set(jobs), "a recorded job was never submitted, or an unrecorded one was"
    assert all(j["state"] in ("queued", "running", "finished") and j["batch_id"] for j in jobs.values())
    # A later run collects every job (also those A queued and never started): every file deleted once.
    config.service.dry_run = False
    check = Service(config, Ledger(db), OfflineSources(tmp_path / "src"), backend, instance="check")
    for rse in RSES:
        result = check.runner.run_once(rse, wait_s=120)
        assert (result.action, result.state, result.submitted) == ("finish", "clean", 0), result
    check.stop()
    assert {d["state"] for d in db.jobs.find()} == {"finished"}
    assert {d["state"] for d in Ledger(db).reads.file_records()} == {"deleted"}, \
        "a file deleted twice is reported missing"
    for rse in RSES:
        deleted = {d["lfn"] for d in Ledger(db).reads.file_records(rse)}
        everything = set(dump_file(tmp_path / "src", rse).read_text().split())
        assert files_left(storages[rse]) == everything - deleted
    for rse in RSES:
        doc = db.rses.find_one({"_id": rse})
        assert len(doc["generations"]) == 1
        n = len(Ledger(db).reads.file_records(rse))
        assert n == doc["generations"][0]["to_delete"] > 0
        assert sum(j["files"] for j in jobs.values() if j["rse"] == rse) == n  # each file in exactly one job
    mongo_client.drop_database(db_name)
