"""`msunmerged serve` end to end: loop, triggers and REST in one process over real HTTP, embedded SecantusDB,
an RSE from OfflineSources cleaned by the local backend, the outcome read back from the ledger."""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any, Iterator

import pytest
from pymongo import MongoClient

from MSUnmerged.samplesite import DEMO_RSE, DEMO_SITE, count_files
from rest_seed import offline_site
from servers import Process, free_port, wait_port
from test_rest_api import get, operator_headers, post

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[3]
# What `msunmerged serve` runs, with OfflineSources instead of the live services.
SERVE = """
import sys
from MSUnmerged.cli.serve import serve
from MSUnmerged.config import load_config
from MSUnmerged.sources.offline import OfflineSources
from MSUnmerged.wiring import build_service
config = load_config(sys.argv[1])
with build_service(config, sources=OfflineSources(sys.argv[2])) as service:
    serve(config, service, int(sys.argv[3]))
"""


class Served:
    def __init__(self, url: str, key: bytes, db: Any, storage: Path) -> None:
        self.url, self.key, self.db, self.storage = url, key, db, storage


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    work = tmp_path_factory.mktemp("serve")
    sources, storage, siteconf = offline_site(work)  # skipped by the loop: only triggers work the RSE
    key = work / "hmac.key"
    key.write_bytes(os.urandom(32))
    db_port, port = free_port(), free_port()
    (work / "msunmerged.toml").write_text(f"""
[service]
state_dir = "{work / 'state'}"
dry_run = false
interval_s = 5
[planner]
skip_rses = ["{DEMO_RSE}"]
[mongo]
embedded_port = {db_port}
[jobs]
backend = "local"
[jobs.sites.{DEMO_RSE}]
site = "{DEMO_SITE}"
siteconfig = "{siteconf}"
[rest]
hmac_key_file = "{key}"
audit_log = "{work / 'audit.jsonl'}"
cache_ttl_s = 0
""")
    env = {"PYTHONPATH": f"{REPO / 'src' / 'python'}:{os.environ.get('PYTHONPATH', '')}"}
    proc = Process("serve", [sys.executable, "-c", SERVE, str(work / "msunmerged.toml"), str(sources), str(port)],
                   work, env=env)
    client: MongoClient = MongoClient(f"mongodb://127.0.0.1:{db_port}/?directConnection=true")
    try:
        wait_port(port, timeout=120, proc=proc)
        yield Served(f"http://127.0.0.1:{port}/ms-unmerged", key.read_bytes(), client.msunmerged, storage)
    finally:
        client.close()
        proc.stop(timeout=60)
        print(proc.log.read_text()[-3000:])


def trigger(served: Served, mode: str, timeout: float = 120) -> dict[str, Any]:
    """POST a signed trigger and wait for it to finish; returns its record."""
    status, body = post(served, "data/trigger", {"rse": DEMO_RSE, "mode": mode}, operator_headers(served.key))
    assert status == 202, body
    wanted = body["result"][0]["id"]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        rec = next(t for t in get(served, "data/triggers")[1]["result"] if t["id"] == wanted)
        if rec["state"] not in ("queued", "running"):
            assert rec["state"] == "done", rec
            return rec
        time.sleep(0.2)
    raise AssertionError(f"trigger {wanted} still running after {timeout} s")


def test_loop_runs(served: Served) -> None:
    deadline = time.monotonic() + 60
    while not served.db.cycles.find_one({"finished": {"$exists": True}}) and time.monotonic() < deadline:
        time.sleep(0.5)
    _, body, _ = get(served, "data/status")
    assert body["result"][0]["cycles"] and body["result"][0]["triggers"]["enabled"] is True


def test_trigger_plan_previews_without_recording(served: Served) -> None:
    rec = trigger(served, "plan")
    assert rec["result"]["rse"] == DEMO_RSE and rec["result"]["files_to_delete"] > 0 and not rec["result"]["guard"]
    assert served.db.files.count_documents({"rse": DEMO_RSE}) == 0 and served.db.jobs.count_documents({}) == 0


def test_trigger_apply_cleans_the_rse_and_the_ledger_shows_it(served: Served) -> None:
    before = count_files(served.storage)
    rec = trigger(served, "apply")
    assert rec["result"]["action"] == "new_generation" and rec["result"]["submitted"] > 0, rec
    submitted = rec["result"]["submitted"]
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:  # each apply polls the local jobs and collects the finished ones
        time.sleep(1)
        rec = trigger(served, "apply")
        if rec["result"]["state"] in ("clean", "done_with_errors"):
            break
    assert rec["result"]["state"] == "clean", rec
    doc = served.db.rses.find_one({"_id": DEMO_RSE})
    deleted = doc["counters"]["deleted"]
    assert deleted == doc["counters"]["to_delete"] > 0 and doc["counters"]["failed"] == 0
    assert before - count_files(served.storage) == deleted
    assert served.db.jobs.count_documents({"rse": DEMO_RSE, "state": "finished"}) == submitted
    _, body, _ = get(served, f"data/info?rse={DEMO_RSE}")
    assert body["result"][0]["isClean"] is True and body["result"][0]["counters"]["filesDeletedSuccess"] == deleted
    _, body, _ = get(served, f"data/files?rse={DEMO_RSE}&state=deleted&limit=5")
    assert len(body["result"]) == 5 and {f["state"] for f in body["result"]} == {"deleted"}
    audit = (served.storage.parent / "audit.jsonl").read_text().splitlines()
    assert sum(json.loads(a)["outcome"] == "accepted" for a in audit) >= 3


def test_a_trigger_for_an_unknown_rse_is_refused_and_records_nothing(served: Served) -> None:
    typo = "T2_XX_Sampel"
    for mode in ("plan", "apply"):
        status, body = post(served, "data/trigger", {"rse": typo, "mode": mode}, operator_headers(served.key))
        assert status == 202, body
        wanted = body["result"][0]["id"]
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            rec = next(t for t in get(served, "data/triggers")[1]["result"] if t["id"] == wanted)
            if rec["state"] not in ("queued", "running"):
                break
            time.sleep(0.2)
        said = rec["error"] if mode == "plan" else rec["result"]["detail"]
        assert f"RSE {typo} is not one of this instance's RSEs" in said, rec
        assert mode == "plan" or rec["result"]["reason"] == "unknown_rse"
    for name in served.db.list_collection_names():
        assert served.db[name].count_documents({"$or": [{"_id": typo}, {"rse": typo}]}) == 0, name
