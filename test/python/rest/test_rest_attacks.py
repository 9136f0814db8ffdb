"""The attacks of issue 26 on the running app, with headers signed by dmwm/cmsauth's own Go code
(test/fixtures/cmsauth, see its README): each is refused, and each test failed before (what the service
did then is named in its docstring).

The slow clients, the restart and the database's death are in test_rest_serve_attacks.py (`msunmerged
serve` in a process of its own); malformed parameters in test_rest_fuzz.py.
"""
from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
import time
import urllib.parse
import uuid
from pathlib import Path
from typing import Any

import pytest
from pymongo import MongoClient

from MSUnmerged.config import Config
from MSUnmerged.guards import UNKNOWN_RSE
from MSUnmerged.ledger import Ledger
from MSUnmerged.ledger.requestids import RequestIds
from MSUnmerged.rest.auth import CLOSED
from MSUnmerged.rest.triggers import TriggerRefused

from rest_kit import assert_cut_by_the_deadline, ledger_logged, seed_rse
from test_rest_api import get, operator_headers
from test_rest_hardening import JSON, audit_lines, request

pytestmark = pytest.mark.integration

RSE = "T2_RT_Attack"
DUMP = [f"/store/unmerged/Run3/Atk{i % 3}/RAW/v1/f{i:05d}.root" for i in range(60)] + \
    [f"/store/unmerged/Run3/Kept/RAW/v1/f{i:05d}.root" for i in range(20)]
PROTECTED = ["/store/unmerged/Run3/Kept/RAW/v1"]
REPO = Path(__file__).resolve().parents[3]
SRC = REPO / "src" / "python"
FRONT_END = json.loads((REPO / "test" / "fixtures" / "cmsauth" / "front-end.json").read_text())
SECRETS = ("s3cr3t-pw", "T0PSECRET-token", "SIGNATURE-abc", "Bearer-eyJhbGci")


def signed(case: str) -> dict[str, bytes]:
    """A case's headers as cmsauth's SetCMSHeaders signed them, sent as the front end sends them (UTF-8)."""
    return {k: v.encode("utf-8") for k, v in FRONT_END[case]["headers"].items()}


def trigger(app: Any, headers: dict[str, Any], mode: str = "plan", rse: str = RSE,
            request_id: str = "") -> tuple[int, Any]:
    body = json.dumps({"rse": rse, "mode": mode, "request_id": request_id or uuid.uuid4().hex}).encode()
    return request(app, "POST", "data/trigger", {**JSON, **headers}, body)


@pytest.fixture(scope="module")
def attacked(rest_app: Any, tmp_path_factory: pytest.TempPathFactory) -> Any:
    seed_rse(rest_app.db, RSE, tmp_path_factory.mktemp("plans"), DUMP, PROTECTED, time.time() - 3600, done_jobs=0,
             outcome=lambda i, lfn: None)
    return rest_app


def key_file(tmp_path: Path, case: str) -> str:
    path = tmp_path / f"{case}.key"
    path.write_bytes(bytes.fromhex(FRONT_END[case]["key_hex"]))
    return str(path)


# -- 1. closed by default ----------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["apply", "plan"])
def test_triggers_are_closed_without_operator_logins(attacked: Any, tmp_path: Path, mode: str) -> None:
    """Before: with the default (empty) rest.operator_logins, a CMS user who added `cms-authz-operator`
    herself (signed by the front end like any header) got 202 for apply, as did any operator (issue 26);
    then `plan` stayed open by role (issue 38): anyone could queue plans ahead of an operator's apply."""
    app = attacked.mount(f"/ms-unmerged-closed-{mode}", hmac_key_file=key_file(tmp_path, "operator"),
                         operator_logins=[])
    assert Config().rest.operator_logins == []  # the default
    before = len(audit_lines(attacked))
    for case in ("self_made_role", "operator"):
        status, body = trigger(app, signed(case), mode)
        assert status == 403 and "rest.operator_logins" in body["error"], (case, body)
    denied = audit_lines(attacked)[before:]
    assert [(a["login"], a["reason"]) for a in denied] == [("eve", CLOSED), ("jmuller", CLOSED)]
    assert app.root.data.queue.recent() == []


def test_apply_only_for_listed_logins(attacked: Any, tmp_path: Path) -> None:
    app = attacked.mount("/ms-unmerged-listed", hmac_key_file=key_file(tmp_path, "operator"),
                         operator_logins=["jmuller"])
    assert trigger(app, signed("operator"), "apply")[0] == 202
    status, body = trigger(app, signed("self_made_role"), "apply")
    assert status == 403 and "rest.operator_logins" in body["error"]


# -- 2. key strength -----------------------------------------------------------------------------------


@pytest.mark.parametrize("case", ["nul_key", "empty_key"])
def test_a_key_file_of_nuls_verifies_nothing(attacked: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture,
                                             case: str) -> None:
    """Before: a key file of NUL bytes was accepted, and a request signed with the empty key got 202 (HMAC
    pads short keys with NULs: cmsauth's signatures with both keys are the same). Logged at start-up."""
    nuls = tmp_path / "nuls.key"
    nuls.write_bytes(b"\0" * 32)
    with caplog.at_level(logging.ERROR, "MSUnmerged"):
        app = attacked.mount(f"/ms-unmerged-{case}", hmac_key_file=str(nuls))
    assert any("refused: empty" in r.getMessage() for r in caplog.records)
    status, body = trigger(app, signed(case))
    assert status == 403 and "HMAC key empty" in body["error"]


# -- 3. the body is read only for a caller the headers let in ---------------------------------------


def raw_exchange(app: Any, head: bytes, body_part: bytes, source: str = "127.0.0.1") -> tuple[bytes, bool]:
    """Send a request's line and headers and part of its announced body, then wait (30 s at most) for the
    answer without sending the rest; returns (answer, whether the server closed the connection)."""
    url = urllib.parse.urlsplit(app.url)
    with socket.create_connection((url.hostname, url.port), timeout=30, source_address=(source, 0)) as s:
        s.sendall(head + body_part)
        answer = b""
        while b"\r\n\r\n" not in answer:
            chunk = s.recv(65536)
            if not chunk:
                return answer, True
            answer += chunk
        try:
            while chunk:
                chunk = s.recv(65536)
                answer += chunk
            return answer, True
        except socket.timeout:
            return answer, False


def head(app: Any, method: str, path: str, headers: dict[str, Any], length: int) -> bytes:
    url = urllib.parse.urlsplit(app.url)
    lines = [f"{method} {url.path}/{path} HTTP/1.1", f"Host: {url.hostname}", f"Content-Length: {length}"]
    lines += [f"{k}: {v.decode('latin-1') if isinstance(v, bytes) else v}" for k, v in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def test_an_unknown_callers_body_is_never_waited_for(attacked: Any) -> None:
    """Before: the trigger read its body before looking at the caller, so a client announcing a body and
    sending it slowly held a request thread; now the refusal comes with the body still unsent."""
    for headers in ({}, signed("self_made_role")):  # nobody; a CMS user whose key is not this app's
        answer, closed = raw_exchange(attacked, head(attacked, "POST", "data/trigger", {**JSON, **headers}, 2000),
                                      b'{"rse": ')
        assert answer.startswith(b"HTTP/1.1 403") and closed, answer[:200]


def test_an_unread_body_is_not_drained(attacked: Any) -> None:
    """Before: after answering a GET that announced a body, the server read the rest of it (cheroot drains
    bodies to keep the connection), so a client trickling it held the thread; now it answers and closes."""
    answer, closed = raw_exchange(attacked, head(attacked, "GET", "data/health?probe=live", {}, 20000), b"x" * 10)
    assert answer.startswith(b"HTTP/1.1 200") and b"Connection: close" in answer and closed, answer[:300]


def chunked(app: Any, headers: dict[str, Any], chunks: list[bytes], end: bytes = b"0\r\n\r\n") -> tuple[int, Any]:
    """POST data/trigger with a chunked body made of `chunks` (each sent with its size line)."""
    url = urllib.parse.urlsplit(app.url)
    lines = [f"POST {url.path}/data/trigger HTTP/1.1", f"Host: {url.hostname}", "Transfer-Encoding: chunked"]
    lines += [f"{k}: {v.decode('latin-1') if isinstance(v, bytes) else v}" for k, v in {**JSON, **headers}.items()]
    data = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
    data += b"".join(b"%x\r\n%s\r\n" % (len(c), c) for c in chunks) + end
    with socket.create_connection((url.hostname, url.port), timeout=30) as s:
        s.sendall(data)
        answer = b""
        while chunk := s.recv(65536):
            answer += chunk
            if b"\r\n\r\n" in answer and b'"error"' in answer:
                break
    status = int(answer.split(b" ", 2)[1])
    return status, answer.split(b"\r\n\r\n", 1)[1]


def test_oversized_or_broken_chunked_bodies_are_400_or_413(attacked: Any) -> None:
    """Before: 500 with a traceback for a chunked body over rest.max_body_bytes (413 came from
    Content-Length only)."""
    operator = operator_headers(attacked.key.read_bytes(), "oscar")
    limit = attacked.config.rest.max_body_bytes
    status, body = chunked(attacked, operator, [b" " * 8192] * (limit // 8192 + 2))
    assert status == 413 and b"larger than" in body, body[:300]
    status, body = chunked(attacked, operator, [b" " * (limit + 1)])  # one chunk announced past the limit
    assert status == 413, body[:300]
    status, body = chunked(attacked, operator, [b'{"rse": "x"}'], end=b"zz\r\n\r\n")
    assert status == 400 and b"chunked" in body, body[:300]


# -- 4. request ids in the ledger --------------------------------------------------------------------


def test_request_ids_are_shared_by_instances(attacked: Any) -> None:
    """Before: each instance (and each restart) kept the ids it had seen in memory: a captured trigger
    replayed to another instance was accepted."""
    one, other = attacked.mount("/ms-unmerged-one"), attacked.mount("/ms-unmerged-two")
    headers, rid = operator_headers(attacked.key.read_bytes(), "ivan"), uuid.uuid4().hex
    assert trigger(one, headers, request_id=rid)[0] == 202
    status, body = trigger(other, headers, request_id=rid)
    assert status == 409 and "already used" in body["error"]


def refuse_nowhere(rse: str) -> None:
    if rse == "T2_Nowhere":
        raise TriggerRefused(404, UNKNOWN_RSE, f"RSE {rse} is not one of this instance's RSEs")


def test_refused_triggers_do_not_use_up_their_request_id(attacked: Any) -> None:
    """Before: a trigger refused with 404 or 429 had its request_id recorded, so sending it again as told
    (the right RSE, after Retry-After) got 409."""
    app = attacked.mount("/ms-unmerged-refused", check=refuse_nowhere, trigger_rate_per_min=2)
    headers = operator_headers(attacked.key.read_bytes(), "judy")
    rid = uuid.uuid4().hex
    assert trigger(app, headers, rse="T2_Nowhere", request_id=rid)[0] == 404
    assert trigger(app, headers, request_id=rid)[0] == 202  # the second and last trigger of the minute
    late = uuid.uuid4().hex
    assert trigger(app, headers, request_id=late)[0] == 429
    app.root.data.gate.limiter._events.clear()  # the minute has passed
    status, body = trigger(app, headers, request_id=late)
    assert status == 202, body


# -- 6. outages ----------------------------------------------------------------------------------------


def test_a_trigger_while_the_ledger_is_down_is_503(attacked: Any, mongo_away: MongoClient,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    """Before: 202, and the trigger then stayed `running`. Now nothing is queued: its request_id cannot
    be recorded, and the ledger's calls end at rest.db_timeout_s (the HTTP client's 30 s bounds a hang)."""
    app = attacked.mount("/ms-unmerged-ledger-away", Ledger(mongo_away.msunmerged).view(), db_timeout_s=1.0,
                         claim=RequestIds(mongo_away.msunmerged, 86400.0).claim)
    with ledger_logged(caplog):
        status, body = trigger(app, operator_headers(attacked.key.read_bytes(), "kate"))
    assert status == 503 and body["error"] == "ledger database unavailable", body
    assert_cut_by_the_deadline(caplog, mongo_away, app.root.db_timeout_s)
    assert app.root.data.queue.recent() == []
    assert audit_lines(attacked)[-1]["outcome"] == "refused" and audit_lines(attacked)[-1]["login"] == "kate"


def secret_url(n: int) -> str:
    return (f"https://alice:{SECRETS[0]}@cmsweb.example/rucioconmon/unmerged/files?rse={RSE}&format=raw"
            f"&access_token={SECRETS[1]}&X-Amz-Signature={SECRETS[2]}#{n}")


def test_secrets_in_source_urls_are_never_shown(attacked: Any, mongo_url: str, tmp_path: Path) -> None:
    """Before: a token in a source URL's query string (and a password in its user info) showed in failure
    details on the page, in data/cycles, data/status and the CLI. Written here as a ledger of an older
    version holds them: unredacted."""
    ledger = Ledger(attacked.db)
    detail = f"conmon: unreachable: GET {secret_url(1)}: ConnectionError; Authorization: Bearer {SECRETS[3]}"
    ledger.cycles.end_cycle(ledger.cycles.start_cycle("attack", int(time.time() // 3600), []),
                            failures=[{"source": "conmon", "reason": "conmon_unreachable", "detail": detail,
                                       "rse": RSE}])
    ledger.base.set_rse_state(RSE, "failed", "conmon_unreachable", detail=f"GET {secret_url(2)}")
    shown = [get(attacked, path)[1] for path in ("", f"rse?name={RSE}", "data/cycles", "data/status",
                                                  f"data/info?rse={RSE}")]
    config = tmp_path / "cli.toml"
    config.write_text(f'[mongo]\nurl = "{mongo_url}"\ndatabase = "{attacked.db.name}"\n')
    cli = subprocess.run([sys.executable, "-m", "MSUnmerged.cli", "--config", str(config), "status", "--rse", RSE],
                         capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(SRC)})
    assert cli.returncode == 0, cli.stderr
    for text in [*map(str, shown), cli.stdout]:
        assert "cmsweb.example" in text and ("<redacted>" in text or "&lt;redacted&gt;" in text)  # the page escapes
        assert not any(secret in text for secret in SECRETS), text[:3000]


# -- 7. refused attempts bounded (issue 38) -------------------------------------------------------------


def test_a_flood_of_refused_triggers_is_bounded(attacked: Any, tmp_path: Path) -> None:
    """Before: 3,200 refused triggers in 5.2 s wrote 704 kB of audit, each line without the forwarded-for chain.
    Now past rest.refusals_per_min a caller (here mallory, verified by the front end's signature but no operator)
    is answered 429 and not audited, and each audited line carries X-Forwarded-For."""
    app = attacked.mount("/ms-unmerged-flood", refusals_per_min=5)
    key = attacked.key.read_bytes()
    before = len(audit_lines(attacked))
    chain = "188.184.9.9, 10.100.3.4"
    headers = {**JSON, **operator_headers(key, "mallory"), "X-Forwarded-For": chain}
    answers = [request(app, "POST", "data/trigger", headers,
                       json.dumps({"rse": RSE, "request_id": uuid.uuid4().hex}).encode())[0] for _ in range(40)]
    assert answers == [403] * 5 + [429] * 35, answers
    lines = audit_lines(attacked)[before:]
    assert len(lines) == 5 and all(a["login"] == "mallory" and a["forwarded_for"] == chain for a in lines), lines
    assert {a["caller"] for a in lines} == {"login:mallory"}
    status, body = trigger(app, operator_headers(key, "ivan"))  # another user behind the same node keeps its share
    assert status == 202, body
