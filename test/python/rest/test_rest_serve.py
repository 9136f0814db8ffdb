"""`msunmerged serve` end to end: loop, triggers and REST in one process over real HTTP, embedded SecantusDB,
an RSE from OfflineSources cleaned by the local backend, the outcome read back from the ledger, and read
by WMCore's own HTTP client (pycurl_manager, MSUtils) as the existing callers of ms-unmerged do."""
from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Iterator

import pytest
from pymongo import MongoClient

from MSUnmerged.ledger import Ledger
from MSUnmerged.samplesite import DEMO_RSE, DEMO_SITE, count_files
from rest_kit import offline_site
from servers import Process, free_port, run_script, wait_port
from test_rest_api import get, operator_headers, post

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[3]
# What `msunmerged serve` runs, with OfflineSources instead of the live services (SIGTERM as Ctrl-C, as the CLI).
SERVE = """
import sys
from MSUnmerged.cli import terminate_as_interrupt
from MSUnmerged.config import load_config
from MSUnmerged.sources.offline import OfflineSources
from MSUnmerged.wiring import serve_private
with terminate_as_interrupt():
    serve_private(load_config(sys.argv[1]), OfflineSources(sys.argv[2]), int(sys.argv[3]))
"""
# WMCore's client as its services call ms-unmerged (argv: base URL, RSE); prints what it got as JSON.
# The status report has an "error" member (UNMERGED_REPORT), which makeHttpRequest takes for a failure:
# status is read with pycurl_manager itself, as WMCore's own status checks do.
WMCORE_CLIENT = """
import json, sys
from WMCore.Services.MSUtils.MSUtils import makeHttpRequest
from WMCore.Services.pycurl_manager import RequestHandler
base, rse = sys.argv[1], sys.argv[2]
get = lambda api, params: RequestHandler().getdata(base + "/data/" + api, params, {"Accept": "application/json"},
                                                   encode=True, decode=True)
out = {"info": makeHttpRequest(base + "/data/info", payload={"rse": rse, "detail": False}),
       "detail": makeHttpRequest(base + "/data/info", payload={"rse": rse, "detail": True}),
       "status": get("status", {"detail": False, "rse_type": "t2t3"}),
       "all": get("info", {"rse": "all_docs"}),
       # What WMCore ignores: a cache-buster, rse_type on info, detail=yes (not true for WMCore).
       "ignored": get("info", {"rse": rse, "detail": "yes", "rse_type": "t2t3", "_": "1712345678901"}),
       "status_full": get("status", {"_": "1712345678901"}),
       # WMCore answers the versions alone without an RSE (MSManager.info), and ALL_DOCS without detail.
       "no_rse": makeHttpRequest(base + "/data/info", payload={}),
       "empty_rse": get("info", {"rse": ""}),
       "all_detail": get("info", {"rse": "ALL_DOCS", "detail": True})}
try:  # an error, as WMCore's client reports it (pycurl_manager.getException): the headers it carries
    get("files", {"rse": rse, "state": "gone"})
except Exception as exc:
    out["error"] = {"status": exc.status, "headers": exc.headers}
print(json.dumps(out))
"""


class Served:
    def __init__(self, url: str, key: bytes, db: Any, storage: Path, metrics_url: str) -> None:
        self.url, self.key, self.db, self.storage, self.metrics_url = url, key, db, storage, metrics_url


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    work = tmp_path_factory.mktemp("serve")
    sources, storage, siteconf = offline_site(work)  # skipped by the loop: only triggers work the RSE
    key = work / "hmac.key"
    key.write_bytes(os.urandom(32))
    db_port, port, metrics_port = free_port(), free_port(), free_port()
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
metrics_port = {metrics_port}
hmac_key_file = "{key}"
operator_logins = ["alice", "bob"]
audit_log = "{work / 'audit.jsonl'}"
cache_ttl_s = 0
""")
    env = {"PYTHONPATH": f"{REPO / 'src' / 'python'}:{os.environ.get('PYTHONPATH', '')}"}
    proc = Process("serve", [sys.executable, "-c", SERVE, str(work / "msunmerged.toml"), str(sources), str(port)],
                   work, env=env)
    client: MongoClient = MongoClient(f"mongodb://127.0.0.1:{db_port}/?directConnection=true")
    try:
        wait_port(port, timeout=120, proc=proc)
        yield Served(f"http://127.0.0.1:{port}/ms-unmerged", key.read_bytes(), client.msunmerged, storage,
                     f"http://127.0.0.1:{metrics_port}")
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


def test_status_names_the_instance_its_cycles_ran_as(served: Served) -> None:
    """No service.instance in the configuration: thread_id is the name the loop runs as (host-PID), not empty."""
    deadline = time.monotonic() + 60
    while not served.db.cycles.find_one({}) and time.monotonic() < deadline:
        time.sleep(0.5)
    ran_as = served.db.cycles.find_one({})["instance"]
    _, body, _ = get(served, "data/status")
    (status,) = body["result"]
    assert ran_as and status["thread_id"] == status["instance"] == ran_as


def test_metrics_port_serves_metrics_only(served: Served) -> None:
    """CMSWEB scrapes port 18242 (rest.metrics_port): metrics there, nothing else."""
    status, text, _ = get(SimpleNamespace(url=served.metrics_url), "metrics")
    assert status == 200 and "msunmerged_ledger_up 1" in text
    assert get(SimpleNamespace(url=served.metrics_url + "/ms-unmerged"), "data/status")[0] == 404


def test_trigger_plan_previews_without_recording(served: Served) -> None:
    rec = trigger(served, "plan")
    assert rec["result"]["rse"] == DEMO_RSE and rec["result"]["files_to_delete"] > 0 and not rec["result"]["guard"]
    assert not Ledger(served.db).reads.file_records(DEMO_RSE) and served.db.jobs.count_documents({}) == 0


def test_trigger_apply_cleans_the_rse_and_the_ledger_shows_it(served: Served) -> None:
    before = count_files(served.storage)
    rec = trigger(served, "apply")
    assert rec["result"]["action"] == "new_generation" and rec["result"]["submitted"] > 0, rec
    submitted, triggers = rec["result"]["submitted"], 1
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:  # each apply polls the local jobs and collects the finished ones
        time.sleep(1)
        rec = trigger(served, "apply")
        triggers += 1
        if rec["result"]["state"] in ("clean", "done_with_errors"):
            break
    assert rec["result"]["state"] == "clean", rec
    doc = served.db.rses.find_one({"_id": DEMO_RSE})
    deleted = doc["counters"]["deleted"]
    assert deleted == doc["counters"]["to_delete"] > 0 and doc["counters"]["failed"] == 0
    assert before - count_files(served.storage) == deleted
    assert served.db.jobs.count_documents({"rse": DEMO_RSE, "state": "finished"}) == submitted
    _, body, _ = get(served, f"data/info?rse={DEMO_RSE}")
    (rse,) = body["result"][0]["rseData"]
    assert rse["isClean"] is True and rse["counters"]["filesDeletedSuccess"] == deleted
    _, body, _ = get(served, f"data/files?rse={DEMO_RSE}&state=deleted&limit=5")
    assert len(body["result"]) == 5 and {f["state"] for f in body["result"]} == {"deleted"}
    audit = (served.storage.parent / "audit.jsonl").read_text().splitlines()
    assert sum(json.loads(a)["outcome"] == "accepted" for a in audit) >= triggers >= 2


@pytest.fixture(scope="module")
def wmcore_client() -> str:
    """PYTHONPATH of WMCore's own client: PyPI wmcore without its dependencies, plus what its
    pycurl_manager and MSUtils import."""
    return run_script("pip-target.sh", "wmcore-client", "WMCore.Services.MSUtils.MSUtils",
                      "--no-deps wmcore==2.4.5.9", "pycurl future", timeout=900).strip().splitlines()[-1]


def test_wmcore_client_reads_info_and_status(served: Served, wmcore_client: str) -> None:
    """Before: 400 for detail=False and rse_type, no {"query", "rseData"} shape, nothing for all_docs."""
    trigger(served, "apply")  # records a generation of the RSE (and works on it)
    out = subprocess.run([sys.executable, "-c", WMCORE_CLIENT, served.url, DEMO_RSE], capture_output=True,
                         text=True, timeout=120, env={**os.environ, "PYTHONPATH": wmcore_client})
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    doc = served.db.rses.find_one({"_id": DEMO_RSE})
    result = got["info"]
    assert result[0]["query"] == f"rse={DEMO_RSE}&detail=False"
    assert result[0]["rseData"][0]["counters"]["filesToDelete"] == doc["counters"]["to_delete"] > 0
    assert result[0]["rseData"][0]["isClean"] is (doc["state"] == "clean")
    assert "dirs" not in result[0]["rseData"][0] and got["detail"][0]["rseData"][0]["dirs"]["toDelete"] is not None
    (status,) = got["status"]["result"]
    assert status["status"] == "OK" and status["total_num_rses"] >= 1 and "cycles" not in status
    assert DEMO_RSE in [d["name"] for d in got["all"]["result"][0]["rseData"]]
    # WMCore's field types and keys.
    counters = result[0]["rseData"][0]["counters"]
    assert isinstance(counters["totalNumDirs"], int) and isinstance(counters["gfalErrors"], dict)
    assert {"toDelete", "protected", "deletedSuccess", "deletedFail", "allUnmerged"} <= \
        set(got["detail"][0]["rseData"][0]["dirs"])
    assert all(isinstance(v, list) for k, v in got["detail"][0]["rseData"][0]["dirs"].items() if k != "toDeleteComplete")
    (ignored,) = got["ignored"]["result"]
    assert ignored["query"] == f"rse={DEMO_RSE}&detail=False" and "dirs" not in ignored["rseData"][0]
    # WMCore's MSManager names itself in every answer; no RSE: the versions alone.
    assert result[0]["microservice"] == status["microservice"] == "MSManager"
    for versions_only in (got["no_rse"], got["empty_rse"]["result"]):
        assert versions_only == [{"wmcore_version": status["wmcore_version"],
                                  "microservice_version": status["microservice_version"], "microservice": "MSManager"}]
    everything = got["all"]["result"][0]["rseData"]
    assert got["all_detail"]["result"][0]["rseData"] == everything and all("dirs" not in d for d in everything)
    error = {k.lower(): v for k, v in got["error"]["headers"].items()}
    assert got["error"]["status"] == 400 and error["x-error-http"] == "400"
    assert "parameter 'state'" in error["x-error-detail"] and len(error["x-error-id"]) == 32
    (full,) = got["status_full"]["result"]
    assert "cycles" in full and isinstance(full["error"], str)
    if full["end_time"] is not None:  # WMCore's time format (MSManager.updateTimeUTC)
        assert time.strptime(full["end_time"], "%a, %d %b %Y %H:%M:%S UTC")


def test_files_written_are_private(served: Served) -> None:
    """Before: the audit log and the embedded database's files were world-readable (umask 022)."""
    trigger(served, "plan")
    work = served.storage.parent
    for path in [work / "audit.jsonl", work / "state", *(work / "state").rglob("*")]:
        mode = stat.S_IMODE(path.stat().st_mode)
        assert mode & 0o077 == 0, f"{path} is {oct(mode)}"


def test_a_trigger_for_an_unknown_rse_is_refused_and_records_nothing(served: Served) -> None:
    """Refused before it is queued (404, one line naming the RSE), audited, and no document anywhere."""
    typo = "T2_XX_Sampel"
    before = {t["id"] for t in get(served, "data/triggers")[1]["result"]}
    for mode in ("plan", "apply"):
        status, body = post(served, "data/trigger", {"rse": typo, "mode": mode},
                            operator_headers(served.key, login="bob"))  # a rate limit of its own
        assert status == 404, body
        assert f"RSE {typo} is not one of this instance's RSEs" in body["error"] and body["result"] == [], body
    assert {t["id"] for t in get(served, "data/triggers")[1]["result"]} == before  # nothing queued
    audit = [json.loads(line) for line in (served.storage.parent / "audit.jsonl").read_text().splitlines()]
    refused = [a for a in audit if a.get("rse") == typo]
    assert [(a["outcome"], a["reason"], a["mode"]) for a in refused] == [
        ("refused", "unknown_rse", "plan"), ("refused", "unknown_rse", "apply")]
    for name in served.db.list_collection_names():
        assert served.db[name].count_documents({"$or": [{"_id": typo}, {"rse": typo}]}) == 0, name