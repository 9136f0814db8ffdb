"""The JSON API over real HTTP, with a real MongoDB wire-protocol server behind it."""
from __future__ import annotations

import json
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, Optional

import pytest

from MSUnmerged.ledger import Ledger, file_id, job_id
from MSUnmerged.rest.auth import sign

pytestmark = pytest.mark.integration

RSE = "T2_RT_Api"
NOW = time.time()
GEN = NOW - 7200  # the ConMon scan end_time of the recorded generation


def get(app: Any, path: str) -> tuple[int, Any, dict[str, str]]:
    try:
        with urllib.request.urlopen(f"{app.url}/{path}", timeout=30) as r:
            body, status, headers = r.read(), r.status, dict(r.headers)
    except urllib.error.HTTPError as e:
        body, status, headers = e.read(), e.code, dict(e.headers)
    ctype = headers.get("Content-Type", "")
    return status, json.loads(body) if ctype.startswith("application/json") else body.decode(), headers


def post(app: Any, path: str, data: dict[str, str], headers: Optional[dict[str, str]] = None,
         as_json: bool = False) -> tuple[int, Any]:
    body = json.dumps(data).encode() if as_json else urllib.parse.urlencode(data).encode()
    hdrs = {"Content-Type": "application/json" if as_json else "application/x-www-form-urlencoded",
            **(headers or {})}
    req = urllib.request.Request(f"{app.url}/{path}", data=body, headers=hdrs, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def operator_headers(key: bytes, login: str = "alice", role: str = "operator", scope: str = "group:dmwm") -> dict:
    headers = {"cms-auth-status": "OK", "cms-authn-method": "X509Cert", "cms-authn-login": login,
               "cms-authn-name": "Alice Operator", "cms-authn-dn": f"/DC=ch/CN={login}",
               f"cms-authz-{role}": scope}
    headers["cms-authn-hmac"] = sign(headers, key)
    return headers


def job(n: int) -> str:
    return job_id(RSE, GEN, 1, n)


@pytest.fixture(scope="module")
def seeded(rest_app: Any) -> Any:
    """One RSE generation written in the ledger's own shapes; counters computed by Ledger.refresh_counters."""
    db = rest_app.db
    db.rses.delete_many({"_id": RSE})
    db.files.delete_many({"rse": RSE})
    db.jobs.delete_many({"rse": RSE})
    db.rses.insert_one({"_id": RSE, "state": "running", "reason": "", "generation": GEN, "updated": NOW,
                        "generations": [{"gen": GEN, "files_total": 3000, "to_delete": 2600, "protected": 400,
                                         "excluded": 0, "invalid": {"bad_chars": 2}, "dirs_removable": 8,
                                         "jobs": 6, "planned": NOW - 3600}]})
    files = []
    for i in range(2600):
        state = "deleted" if i < 2000 else "failed" if i < 2300 else "missing" if i < 2400 else "planned"
        d = f"/store/unmerged/Run3/Prim{i % 4}/RAW/v{i % 2}"
        lfn = f"{d}/f{i:05d}.root"
        failed = state == "failed"
        files.append({"_id": file_id(RSE, GEN, lfn), "rse": RSE, "gen": GEN, "lfn": lfn, "dir": d, "state": state,
                      "job": job(i // 500 + 1), "attempts": 1, "t": NOW,
                      "error_class": ("permission_denied" if i < 2200 else "timeout") if failed else "",
                      "error": "denied" if failed else ""})
    db.files.insert_many(files)
    db.jobs.insert_many([{"_id": job(j), "rse": RSE, "gen": GEN, "round": 1, "n": j, "site": "T2_RT_Api",
                          "state": "finished" if j <= 4 else "running", "files": 500,
                          "submitted_at": NOW - 500 + j, "finished_at": NOW - 100 if j <= 4 else None,
                          "summary": {"bytes_freed": 123456789 if j == 1 else 0}} for j in range(1, 7)])
    db.cycles.insert_one({"_id": "cycle-rest-1", "instance": "test", "slot": 0, "started": NOW - 900,
                          "finished": NOW - 300, "rses": [RSE], "results": {RSE: {"deleted": 2000}}})
    Ledger(db).refresh_counters(RSE)
    return rest_app


def test_status_envelope_and_cycles(seeded: Any) -> None:
    status, body, headers = get(seeded, "data/status")
    assert status == 200 and headers["Content-Type"].startswith("application/json")
    (doc,) = body["result"]
    assert doc["status"] == "OK" and doc["rses"]["total"] >= 1
    cycle = next(c for c in doc["cycles"] if c["id"] == "cycle-rest-1")
    assert cycle["duration_s"] == pytest.approx(600, abs=0.01) and cycle["results"][RSE]["deleted"] == 2000


def test_info_one_rse_uses_wmcore_names(seeded: Any) -> None:
    status, body, _ = get(seeded, f"data/info?rse={RSE}&detail=false")
    assert status == 200
    (doc,) = body["result"]
    assert doc["name"] == RSE and doc["isClean"] is False
    assert doc["counters"]["filesToDelete"] == 2600 and doc["counters"]["filesDeletedSuccess"] == 2000
    assert doc["counters"]["filesDeletedFail"] == 300 and doc["timestamps"]["rseConsStatTime"] == pytest.approx(GEN)
    assert doc["counters"]["totalNumFiles"] == 3000 and doc["counters"]["dirsToDelete"] == 8
    assert doc["counters"]["deletionErrors"] == {"permission_denied": 200, "timeout": 100}
    assert doc["counters"]["pending"] == 200 and doc["counters"]["invalid"] == 2
    assert "jobs" not in doc


def test_info_detail_and_all_docs(seeded: Any) -> None:
    _, body, _ = get(seeded, f"data/info?rse={RSE}&detail=true")
    (doc,) = body["result"]
    assert len(doc["jobs"]) == 6 and len(doc["files"]["deletedFail"]) == 100
    _, body, _ = get(seeded, "data/info?rse=ALL_DOCS")
    assert RSE in [d["name"] for d in body["result"]]
    _, body, _ = get(seeded, "data/info?rse=T2_XX_Unknown")
    assert body["result"] == []


@pytest.mark.parametrize("path, param", [
    ("data/info", "rse"),
    ("data/info?rse=<script>", "rse"),
    (f"data/info?rse={RSE}&detail=maybe", "detail"),
    (f"data/info?rse={RSE}&rse=X", "rse"),
    (f"data/info?rse={RSE}&colour=red", "colour"),
    ("data/files?state=failed", "rse"),
    (f"data/files?rse={RSE}&state=gone", "state"),
    (f"data/files?rse={RSE}&limit=0", "limit"),
    (f"data/files?rse={RSE}&limit=ten", "limit"),
    (f"data/files?rse={RSE}&dir=/etc/", "dir"),
    (f"data/files?rse={RSE}&error_class=a%20b", "error_class"),
    ("data/jobs?state=asleep", "state"),
    ("data/cycles?limit=-1", "limit"),
    ("data/plan", "rse"),
    ("data/status?cycles=1000", "cycles"),
])
def test_bad_parameters_get_400_naming_the_parameter(seeded: Any, path: str, param: str) -> None:
    status, body, _ = get(seeded, path)
    assert status == 400, body
    assert f"parameter '{param}'" in body["error"] and body["result"] == []


def test_files_by_state_paginates_with_a_cursor(seeded: Any) -> None:
    seen: list[str] = []
    after = ""
    pages = 0
    while True:
        _, body, _ = get(seeded, f"data/files?rse={RSE}&state=failed&limit=120"
                                 + (f"&after={urllib.parse.quote(after)}" if after else ""))
        seen += [f["lfn"] for f in body["result"]]
        pages += 1
        if not body["next"]:
            break
        after = body["next"]
    assert pages == 3 and len(seen) == 300 == len(set(seen)) and seen == sorted(seen)


def test_files_filters(seeded: Any) -> None:
    _, body, _ = get(seeded, f"data/files?rse={RSE}&error_class=timeout&limit=1000")
    assert len(body["result"]) == 100 and {f["error_class"] for f in body["result"]} == {"timeout"}
    _, body, _ = get(seeded, f"data/files?rse={RSE}&dir=/store/unmerged/Run3/Prim1/&limit=10000")
    assert len(body["result"]) == 650 and all("/Prim1/" in f["lfn"] for f in body["result"])
    _, body, _ = get(seeded, f"data/files?job={urllib.parse.quote(job(2))}&limit=10000")
    assert len(body["result"]) == 500 and {f["job"] for f in body["result"]} == {job(2)}
    _, body, _ = get(seeded, f"data/files?rse={RSE}&state=submitted&limit=10000")
    assert len(body["result"]) == 200 and {f["job"] for f in body["result"]} == {job(5), job(6)}


def test_files_stream_is_one_valid_envelope(seeded: Any) -> None:
    status, body, headers = get(seeded, f"data/files?rse={RSE}&stream=true")
    assert status == 200 and headers.get("Transfer-Encoding") == "chunked"
    assert len(body["result"]) == 2600


def test_jobs_cycles_plan(seeded: Any) -> None:
    _, body, _ = get(seeded, f"data/jobs?rse={RSE}&state=running")
    assert [j["id"] for j in body["result"]] == [job(6), job(5)]
    _, body, _ = get(seeded, "data/cycles?limit=5")
    assert any(c["id"] == "cycle-rest-1" for c in body["result"])
    _, body, _ = get(seeded, f"data/plan?rse={RSE}&limit=50")
    (plan,) = body["result"]
    assert plan["files_to_delete"] == 500 and plan["shown"] == 50  # 200 planned + 300 failed to retry
    assert plan["plan"]["to_delete"] == 2600
    assert sum(len(d["files"]) for d in plan["directories"]) == 50


def test_metrics_prometheus_text(seeded: Any) -> None:
    status, text, headers = get(seeded, "metrics")
    assert status == 200 and "version=0.0.4" in headers["Content-Type"].replace(" ", "")
    assert f'msunmerged_files_deleted{{rse="{RSE}"}} 2000' in text
    assert f'msunmerged_files_failed{{rse="{RSE}",error_class="permission_denied"}} 200' in text
    assert f'msunmerged_bytes_freed{{rse="{RSE}"}} 123456789' in text
    assert f'msunmerged_jobs{{rse="{RSE}",state="running"}} 2' in text
    assert "msunmerged_cycle_duration_seconds " in text and "msunmerged_ledger_up 1" in text


def test_health_probes_and_unknown_paths(seeded: Any) -> None:
    assert get(seeded, "data/health?probe=live")[0] == 200
    assert get(seeded, "data/health")[0] == 200
    status, body, _ = get(seeded, "data/nothing-here")
    assert status == 404 and "error" in body
    status, body, _ = get(seeded, "data/trigger")
    assert status == 405


def test_trigger_by_operator_runs_the_rse_and_is_audited(seeded: Any) -> None:
    key = seeded.key.read_bytes()
    status, body = post(seeded, "data/trigger", {"rse": RSE, "mode": "apply"}, operator_headers(key, "bob"))
    assert status == 202, body
    (rec,) = body["result"]
    assert rec["rse"] == RSE and rec["mode"] == "apply" and rec["user"] == "bob"
    deadline = time.monotonic() + 10
    while (RSE, "apply") not in seeded.ran and time.monotonic() < deadline:
        time.sleep(0.05)
    assert (RSE, "apply") in seeded.ran
    status, body = post(seeded, "data/trigger", {"rse": RSE, "mode": "plan"}, operator_headers(key, "bob"),
                        as_json=True)
    assert status == 202
    _, listing, _ = get(seeded, "data/triggers")
    assert {(t["rse"], t["mode"]) for t in listing["result"]} >= {(RSE, "apply"), (RSE, "plan")}
    audit = [json.loads(line) for line in seeded.audit.read_text().splitlines()]
    assert any(a["outcome"] == "accepted" and a["login"] == "bob" and a["mode"] == "apply" for a in audit)


def test_trigger_bad_mode_is_400(seeded: Any) -> None:
    status, body = post(seeded, "data/trigger", {"rse": RSE, "mode": "delete-everything"},
                        operator_headers(seeded.key.read_bytes(), "carol"))
    assert status == 400 and "parameter 'mode'" in body["error"]


def test_trigger_refusals(seeded: Any) -> None:
    key = seeded.key.read_bytes()
    status, body = post(seeded, "data/trigger", {"rse": RSE})
    assert status == 403 and "missing" in body["error"]
    forged = operator_headers(key, "mallory")
    forged["cms-authn-login"] = "alice"  # changed after signing
    assert post(seeded, "data/trigger", {"rse": RSE}, forged)[0] == 403
    assert post(seeded, "data/trigger", {"rse": RSE}, operator_headers(b"not the key", "mallory"))[0] == 403
    added = operator_headers(key, "mallory", role="user", scope="group:cms")
    added["cms-authz-admin"] = "group:dmwm"  # a role the front end never signed
    assert post(seeded, "data/trigger", {"rse": RSE}, added)[0] == 403
    status, body = post(seeded, "data/trigger", {"rse": RSE}, operator_headers(key, "dave", "user", "group:cms"))
    assert status == 403 and "operator role" in body["error"]
    audit = seeded.audit.read_text()
    assert audit.count('"outcome": "denied"') >= 5


def test_trigger_rate_limit_per_user(seeded: Any) -> None:
    key = seeded.key.read_bytes()
    codes = [post(seeded, "data/trigger", {"rse": f"T2_RT_Rate{i}"}, operator_headers(key, "erin"))[0]
             for i in range(4)]
    assert codes == [202, 202, 202, 429]
    assert post(seeded, "data/trigger", {"rse": "T2_RT_Rate9"}, operator_headers(key, "frank"))[0] == 202
    assert '"outcome": "rate_limited"' in seeded.audit.read_text()
