"""The JSON API over real HTTP, with a real MongoDB wire-protocol server behind it."""
from __future__ import annotations

import datetime
import json
import re
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from typing import Any, Optional

import pytest
from prometheus_client.parser import text_string_to_metric_families

from MSUnmerged import __version__
from MSUnmerged.rest.auth import sign

from rest_kit import record_cycle, seed_rse

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
         as_json: bool = True) -> tuple[int, Any]:
    """POST `data` as a JSON body (a fresh request_id added unless given), or as a form."""
    data = {"request_id": uuid.uuid4().hex, **data}
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
    headers = {"cms-auth-status": "ok", "cms-authn-method": "X509Cert", "cms-authn-login": login,
               "cms-authn-name": "Alice Operator", "cms-authn-dn": f"/DC=ch/CN={login}",
               f"cms-authz-{role}": scope}
    headers["cms-authn-hmac"] = sign(headers, key)
    return headers


DUMP = [f"/store/unmerged/Run3/Prim{i % 4}/RAW/v{i % 2}/f{i:05d}.root" for i in range(2600)] + \
    [f"/store/unmerged/Run3/Kept/RAW/v1/000/123/f{i:05d}.root" for i in range(400)]
PROTECTED = ["/store/unmerged/Run3/Kept/RAW/v1/000/123"]
DIRS = [{"dir": "/store/unmerged/Run3/Prim0/RAW/v0", "state": "removed", "pfn": "/s/store/unmerged/Run3/Prim0/RAW/v0"},
        {"dir": "/store/unmerged/Run3/Prim1/RAW/v1", "state": "refused", "error_class": "symlink_in_path",
         "error": "Prim1 is a symbolic link"},
        {"dir": "/store/unmerged/Run3/Prim2/RAW/v0", "state": "not_empty"}]


def outcome(i: int, lfn: str) -> Optional[dict[str, Any]]:
    """70% deleted, 10% each permission_denied and timeout, the rest missing or (every 50th) not reported."""
    if i % 50 == 49:
        return None
    kind = i % 10
    if kind < 7:
        return {"state": "deleted", "size": 1000}
    if kind == 7:  # the storage's message names the file: the tally by message leaves the path out
        return {"state": "failed", "error_class": "permission_denied", "error": f"Permission denied: /pnfs/x{lfn}"}
    if kind == 8:
        return {"state": "failed", "error_class": "timeout", "error": "timed out after 120 s"}
    return {"state": "missing"}


@pytest.fixture(scope="module")
def seeded(rest_app: Any, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """One RSE recorded and worked through the ledger's own write methods: 6 jobs, 4 finished, 2 running."""
    rest_app.seed = seed_rse(rest_app.db, RSE, tmp_path_factory.mktemp("plans"), DUMP, PROTECTED, GEN,
                             done_jobs=4, outcome=outcome, dirs=DIRS)
    rest_app.cycle = record_cycle(rest_app.db, RSE, {"action": "poll", "state": "running", "collected": 4})
    return rest_app


def count(seeded: Any, **match: str) -> int:
    return sum(all(o.get(k) == v for k, v in match.items()) for o in seeded.seed["outcomes"].values())


def test_status_envelope_and_cycles(seeded: Any) -> None:
    status, body, headers = get(seeded, "data/status")
    assert status == 200 and headers["Content-Type"].startswith("application/json")
    (doc,) = body["result"]
    assert doc["status"] == "OK" and doc["rses"]["total"] >= 1 and doc["rses"]["by_state"]["running"] >= 1
    cycle = next(c for c in doc["cycles"] if c["id"] == seeded.cycle)
    assert cycle["duration_s"] is not None and cycle["results"][RSE]["collected"] == 4


def iso(ts: float) -> str:
    return datetime.datetime.fromtimestamp(ts, datetime.timezone.utc).replace(tzinfo=None).isoformat()


def test_info_answers_wmcore_shape_and_ours_beside(seeded: Any) -> None:
    status, body, _ = get(seeded, f"data/info?rse={RSE}&detail=False")
    assert status == 200
    (answer,) = body["result"]
    assert answer["query"] == f"rse={RSE}&detail=False" and answer["microservice"] == "MSManager"
    (doc,) = answer["rseData"]
    c, ledger = doc["counters"], seeded.seed["counters"]
    assert doc["name"] == RSE and doc["isClean"] is False and doc["state"] == "running"
    assert doc["pfnPrefix"] is None and doc["rucioConMonStatus"] == "done"
    assert doc["generation"] == pytest.approx(GEN) and doc["timestamps"]["rseConsStatTime"] == iso(GEN)
    assert set(doc["timestamps"]) >= {"rseConsStatTime", "prevStartTime", "startTime", "prevEndTime", "endTime"}
    assert all(isinstance(v, str) and datetime.datetime.fromisoformat(v) for v in doc["timestamps"].values())
    assert doc["timestamps"]["endTime"] == iso(0)  # not clean yet: WMCore's 0.0
    assert c["totalNumFiles"] == 3000 and c["filesToDelete"] == 2600 == ledger["to_delete"]
    assert c["filesDeletedSuccess"] == count(seeded, state="deleted") == ledger["deleted"]
    assert c["filesDeletedFail"] == count(seeded, state="failed")
    assert c["dirsToDelete"] == ledger["dirs_removable"] == c["totalNumDirs"] > 0  # numbers, as WMCore's
    assert all(isinstance(c[k], int) for k in ("totalNumFiles", "totalNumDirs", "dirsToDelete", "filesToDelete",
                                                "filesDeletedSuccess", "filesDeletedFail", "dirsDeletedSuccess",
                                                "dirsDeletedFail"))
    assert c["dirsDeletedSuccess"] == 1 and c["dirsDeletedFail"] == 1  # DIRS: one removed, one refused
    # WMCore's tally is by the storage's message; ours by class beside it.
    assert c["gfalErrors"] == {"Permission denied: <path>": count(seeded, error_class="permission_denied"),
                               "timed out after 120 s": count(seeded, error_class="timeout")}
    assert c["failed_by_class"] == {"permission_denied": count(seeded, error_class="permission_denied"),
                                    "timeout": count(seeded, error_class="timeout")}
    assert c["missing"] == count(seeded, state="missing") and c["unknown"] == 4 * 500 - len(seeded.seed["outcomes"])
    assert c["pending"] == 600 and c["protected"] == 400 and c["bytes_freed"] == 1000 * count(seeded, state="deleted")
    assert "to_delete" not in c and "deleted" not in c  # each ledger counter under one name only
    assert "jobs" not in doc and "dirs" not in doc


def test_info_detail_several_rses_and_all_docs(seeded: Any) -> None:
    _, body, _ = get(seeded, f"data/info?rse={RSE}&detail=true")
    (doc,) = body["result"][0]["rseData"]
    assert len(doc["jobs"]) == 6 and len(doc["files"]["deletedFail"]) == 100
    assert {j["state"] for j in doc["jobs"]} == {"finished", "running"}
    assert doc["dirs"]["toDelete"] and all(d.startswith("/store/unmerged/Run3/Prim") for d in doc["dirs"]["toDelete"])
    # WMCore's keys of `dirs`, lists of directories, from the jobs' directory outcomes (DIRS).
    assert doc["dirs"]["deletedSuccess"] == [DIRS[0]["dir"]] and doc["dirs"]["deletedFail"] == [DIRS[1]["dir"]]
    assert doc["dirs"]["protected"] == []
    assert set(doc["dirs"]["allUnmerged"]) == {*doc["dirs"]["toDelete"], DIRS[0]["dir"], DIRS[1]["dir"]}
    for spelling in ("ALL_DOCS", "all_docs", "All_Docs"):
        _, body, _ = get(seeded, f"data/info?rse={spelling}")
        assert RSE in [d["name"] for d in body["result"][0]["rseData"]], spelling
    # ALL_DOCS: WMCore's projection (four counters, no dirs) whatever detail says.
    _, plain, _ = get(seeded, "data/info?rse=ALL_DOCS")
    _, detailed, _ = get(seeded, "data/info?rse=ALL_DOCS&detail=true")
    assert detailed["result"][0]["rseData"] == plain["result"][0]["rseData"]
    assert detailed["result"][0]["query"] == "rse=ALL_DOCS&detail=True"
    doc = next(d for d in plain["result"][0]["rseData"] if d["name"] == RSE)
    assert set(doc) == {"name", "isClean", "rucioConMonStatus", "timestamps", "counters", "state", "reason"}
    assert set(doc["counters"]) == {"gfalErrors", "dirsToDelete", "dirsDeletedSuccess", "dirsDeletedFail"}
    assert doc["counters"]["dirsToDelete"] == seeded.seed["counters"]["dirs_removable"] > 0
    _, body, _ = get(seeded, f"data/info?rse={RSE}&rse=T2_XX_Unknown&rse={RSE}")
    assert [d["name"] for d in body["result"][0]["rseData"]] == [RSE, RSE]
    _, body, _ = get(seeded, "data/info?rse=T2_XX_Unknown")
    assert body["result"][0]["rseData"] == []


@pytest.mark.parametrize("value, detailed", [("True", True), ("true", True), ("TRUE", True), ("1", False),
                                             ("", False), ("False", False), ("false", False), ("0", False)])
def test_status_takes_wmcore_parameters(seeded: Any, value: str, detailed: bool) -> None:
    status, body, _ = get(seeded, f"data/status?detail={value}&rse_type=t2t3")
    assert status == 200, body
    (doc,) = body["result"]
    report = {"wmcore_version", "microservice_version", "microservice", "status", "thread_id", "start_time",
              "end_time", "execution_time", "error", "total_num_rses", "total_num_files", "num_rses_cleaned",
              "num_files_deleted"}
    assert report <= set(doc) and doc["status"] == "OK" and doc["rse_type"] == "t2t3"
    assert doc["total_num_rses"] >= 1 and doc["num_files_deleted"] >= count(seeded, state="deleted")
    assert doc["total_num_files"] >= 3000 and doc["end_time"] >= doc["start_time"]
    assert ("cycles" in doc) is detailed


@pytest.mark.parametrize("path", [
    f"data/info?rse={RSE}&detail=yes&_=1712345678901",  # WMCore: detail is true only for true/True/TRUE
    f"data/info?rse={RSE}&rse_type=t2t3&colour=red",
    f"data/info?rse={RSE}&detail=maybe",
])
def test_info_ignores_what_wmcore_ignores(seeded: Any, path: str) -> None:
    status, body, _ = get(seeded, path)
    assert status == 200, body
    (answer,) = body["result"]
    assert answer["query"] == f"rse={RSE}&detail=False" and [d["name"] for d in answer["rseData"]] == [RSE]
    assert "dirs" not in answer["rseData"][0]


@pytest.mark.parametrize("query, detailed", [("detail=yes", False), ("detail=maybe&_=1712345678901", False),
                                             ("_=1712345678901&colour=red", True), ("detail=TRUE&x=1", True)])
def test_status_ignores_what_wmcore_ignores(seeded: Any, query: str, detailed: bool) -> None:
    status, body, _ = get(seeded, f"data/status?{query}")
    assert status == 200, body
    assert ("cycles" in body["result"][0]) is detailed


def test_status_rse_type_counts_that_partition_only(seeded: Any) -> None:
    """WMCore's rse_type (t1, t2t3, t2t3us) selects the RSEs the totals count; an unknown type counts none."""
    _, body, _ = get(seeded, "data/status?detail=false")
    everything = body["result"][0]
    _, body, _ = get(seeded, "data/status?detail=false&rse_type=t2t3")  # T2_RT_Api is a T2 outside the US
    t2t3 = body["result"][0]
    assert t2t3["rse_type"] == "t2t3" and 1 <= t2t3["total_num_rses"] <= everything["total_num_rses"]
    _, body, _ = get(seeded, "data/status?detail=false&rse_type=t1")
    t1 = body["result"][0]
    assert t1["total_num_rses"] + t2t3["total_num_rses"] <= everything["total_num_rses"]
    assert t1["total_num_files"] < everything["total_num_files"]  # RSE's 3000 files are not a T1's
    _, body, _ = get(seeded, "data/status?detail=false&rse_type=%3Cb%3E")
    assert body["result"][0]["rse_type"] == "<b>" and body["result"][0]["total_num_rses"] == 0


@pytest.mark.parametrize("path", ["data/info", "data/info?rse=", "data/info?detail=true&rse_type=t1"])
def test_info_without_an_rse_answers_the_versions(seeded: Any, path: str) -> None:
    """As WMCore's MSManager.info: no rse (or an empty one), no query, 200 with the versions alone."""
    status, body, _ = get(seeded, path)
    assert status == 200, body
    assert body["result"] == [{"wmcore_version": __version__, "microservice_version": __version__,
                               "microservice": "MSManager"}]


@pytest.mark.parametrize("path, param", [
    ("data/info?rse=<script>", "rse"),
    ("data/info?rse=T2_RT_Api%0A", "rse"),
    (f"data/info?rse={RSE}&rse=bad%20name", "rse"),
    (f"data/files?rse={RSE}%0A", "rse"),
    (f"data/files?rse={RSE}&colour=red", "colour"),  # our own calls still refuse what they do not know
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
    status, body, headers = get(seeded, path)
    assert status == 400, body
    assert f"parameter '{param}'" in body["error"] and body["result"] == []
    # WMCore's error headers (REST/Error.py), which its clients read (names are case-insensitive; CherryPy
    # title-cases them, WMCore's as ours).
    errors = {k.lower(): v for k, v in headers.items() if k.lower().startswith("x-error-")}
    assert errors["x-error-http"] == "400" and errors["x-error-detail"] == body["error"]
    assert re.fullmatch(r"[0-9a-f]{32}", errors["x-error-id"])


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
    assert seen == seeded.seed["failed"] and pages == len(seen) // 120 + 1


def test_files_filters(seeded: Any) -> None:
    jobs = seeded.seed["jobs"]
    _, body, _ = get(seeded, f"data/files?rse={RSE}&error_class=timeout&limit=1000")
    assert len(body["result"]) == count(seeded, error_class="timeout")
    assert {(f["state"], f["error_class"]) for f in body["result"]} == {("failed", "timeout")}
    _, body, _ = get(seeded, f"data/files?rse={RSE}&error_class=no_report&state=unknown&limit=1000")
    assert len(body["result"]) == 4 * 500 - len(seeded.seed["outcomes"])
    prim1 = sorted(lfn for lfn in DUMP[:2600] if "/Prim1/" in lfn)
    _, body, _ = get(seeded, f"data/files?rse={RSE}&dir=/store/unmerged/Run3/Prim1/&limit=10000")
    assert [f["lfn"] for f in body["result"]] == prim1
    _, body, _ = get(seeded, f"data/files?rse={RSE}&dir=/store/unmerged/Run3/Prim1/&state=failed&limit=10000")
    assert [f["lfn"] for f in body["result"]] == [lfn for lfn in seeded.seed["failed"] if "/Prim1/" in lfn]
    _, body, _ = get(seeded, f"data/files?job={urllib.parse.quote(jobs[1])}&limit=10000")
    assert len(body["result"]) == 500 and {f["job"] for f in body["result"]} == {jobs[1]}
    _, body, _ = get(seeded, f"data/files?rse={RSE}&state=submitted&limit=10000")
    assert len(body["result"]) == 600 and {f["job"] for f in body["result"]} == set(jobs[4:])
    assert {f["state"] for f in body["result"]} == {"planned"}


def test_files_stream_is_one_valid_envelope(seeded: Any) -> None:
    status, body, headers = get(seeded, f"data/files?rse={RSE}&stream=true")
    assert status == 200 and headers.get("Transfer-Encoding") == "chunked"
    assert len(body["result"]) == 2600 and len({f["cursor"] for f in body["result"]}) == 2600


def test_dirs_by_state_reason_prefix_and_job(seeded: Any) -> None:
    _, body, _ = get(seeded, f"data/dirs?rse={RSE}")
    assert [(d["dir"], d["state"], d["job"]) for d in body["result"]] == \
        [(d["dir"], d["state"], seeded.seed["jobs"][0]) for d in DIRS] and body["next"] is None
    _, body, _ = get(seeded, f"data/dirs?rse={RSE}&state=refused")
    assert [(d["dir"], d["error_class"], d["error"]) for d in body["result"]] == \
        [(DIRS[1]["dir"], "symlink_in_path", "Prim1 is a symbolic link")]
    _, body, _ = get(seeded, f"data/dirs?rse={RSE}&error_class=symlink_in_path")
    assert [d["dir"] for d in body["result"]] == [DIRS[1]["dir"]]
    _, body, _ = get(seeded, f"data/dirs?rse={RSE}&dir=/store/unmerged/Run3/Prim2/&stream=true")
    assert [d["dir"] for d in body["result"]] == [DIRS[2]["dir"]]
    _, body, _ = get(seeded, f"data/dirs?job={urllib.parse.quote(seeded.seed['jobs'][1])}")
    assert body["result"] == []
    status, body, _ = get(seeded, f"data/dirs?rse={RSE}&state=deleted")  # a file state, not a directory one
    assert status == 400 and "parameter 'state'" in body["error"]
    _, body, _ = get(seeded, f"data/info?rse={RSE}")
    c = body["result"][0]["rseData"][0]["counters"]
    assert (c["dirsDeletedSuccess"], c["dirsDeletedFail"]) == (1, 1)
    assert (c["dirs_refused"], c["dirs_refused_by_reason"]) == (1, {"symlink_in_path": 1})


def test_jobs_cycles_plan(seeded: Any) -> None:
    jobs = seeded.seed["jobs"]
    _, body, _ = get(seeded, f"data/jobs?rse={RSE}&state=running")
    assert [j["id"] for j in body["result"]] == [jobs[5], jobs[4]]
    assert all(j["batch_id"] and j["backend"] == "local" for j in body["result"])
    _, body, _ = get(seeded, "data/cycles?limit=5")
    assert any(c["id"] == seeded.cycle for c in body["result"])
    _, body, _ = get(seeded, f"data/plan?rse={RSE}&limit=50")
    (plan,) = body["result"]
    retriable = count(seeded, state="failed") + 4 * 500 - len(seeded.seed["outcomes"])
    assert plan["generation"] == pytest.approx(GEN) and plan["files_to_delete"] == 600 + retriable
    assert plan["shown"] == 50 and plan["plan"]["to_delete"] == 2600
    assert sum(len(d["files"]) for d in plan["directories"]) == 50


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """The exposition parsed by prometheus_client: (name, sorted labels) -> value."""
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_metrics_prometheus_text(seeded: Any) -> None:
    status, text, headers = get(seeded, "metrics")
    assert status == 200 and "version=0.0.4" in headers["Content-Type"].replace(" ", "")
    got = samples(text)
    deleted = count(seeded, state="deleted")
    assert got[("msunmerged_files_deleted", (("rse", RSE),))] == deleted
    assert got[("msunmerged_files_failed", (("error_class", "permission_denied"), ("rse", RSE)))] \
        == count(seeded, error_class="permission_denied")
    assert got[("msunmerged_bytes_freed", (("rse", RSE),))] == 1000 * deleted
    assert got[("msunmerged_jobs", (("rse", RSE), ("state", "finished")))] == 4
    assert got[("msunmerged_jobs", (("rse", RSE), ("state", "running")))] == 2
    assert ("msunmerged_cycle_duration_seconds", ()) in got and got[("msunmerged_ledger_up", ())] == 1
    assert got[("msunmerged_dry_run", ())] == 1  # the default configuration


def test_health_probes_and_unknown_paths(seeded: Any) -> None:
    assert get(seeded, "data/health?probe=live")[0] == 200
    assert get(seeded, "data/health")[0] == 200
    status, body, _ = get(seeded, "data/nothing-here")
    assert status == 404 and "error" in body
    status, body, _ = get(seeded, "data/trigger")
    assert status == 405


def test_trigger_by_operator_runs_the_rse_and_is_audited(seeded: Any) -> None:
    key = seeded.key.read_bytes()
    app = seeded.mount("/ms-unmerged-operators", operator_logins=["bob"])  # apply is for listed logins only
    status, body = post(app, "data/trigger", {"rse": RSE, "mode": "apply"}, operator_headers(key, "bob"))
    assert status == 202, body
    (rec,) = body["result"]
    assert rec["rse"] == RSE and rec["mode"] == "apply" and rec["user"] == "bob"
    deadline = time.monotonic() + 10
    while (RSE, "apply") not in seeded.ran and time.monotonic() < deadline:
        time.sleep(0.05)
    assert (RSE, "apply") in seeded.ran
    status, body = post(app, "data/trigger", {"rse": RSE, "mode": "plan"}, operator_headers(key, "bob"))
    assert status == 202
    _, listing, _ = get(app, "data/triggers")
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


def test_status_error_says_what_failed(seeded: Any) -> None:
    """Before: `error` stayed "" while every cycle failed. Now WMCore's callers read what failed."""
    from MSUnmerged.ledger import Ledger
    ledger = Ledger(seeded.db)
    cid = ledger.cycles.start_cycle("rest-test", 99, [RSE])
    ledger.cycles.end_cycle(cid, failures=[{"source": "conmon", "reason": "conmon_http_status", "detail": "HTTP 502",
                                            "rse": RSE}])
    _, body, _ = get(seeded, "data/status?detail=false")
    (doc,) = body["result"]
    assert doc["error"].startswith("last cycle: 1 failures: conmon/conmon_http_status (T2_RT_Api): HTTP 502")
    assert time.strptime(doc["start_time"], "%a, %d %b %Y %H:%M:%S UTC")  # WMCore's format
    ledger.cycles.end_cycle(ledger.cycles.start_cycle("rest-test", 100, [RSE]))  # a good one: no error again
    _, body, _ = get(seeded, "data/status?detail=false")
    assert body["result"][0]["error"] == ""
