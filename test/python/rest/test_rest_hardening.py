"""The REST service against the real front end's headers, hostile clients and a ledger database that is away.

Each test names what the service did before it was hardened; every one of them failed then.
"""
from __future__ import annotations

import http.client
import json
import logging
import socket
import stat
import time
import urllib.parse
import uuid
from pathlib import Path
from typing import Any, Iterator

import pytest
from pymongo import MongoClient
from pymongo.errors import AutoReconnect

from MSUnmerged.rest import app as rest_app_module
from MSUnmerged.rest.auth import sign
from MSUnmerged.rest.server import GuardedServer
from MSUnmerged.ledger import Ledger
from MSUnmerged.ledger.view import MongoLedgerView

from rest_kit import assert_cut_by_the_deadline, ledger_logged, seed_rse
from servers.rest import Mounted
from test_rest_api import get, operator_headers, post

pytestmark = pytest.mark.integration

RSE = "T2_RT_Hard"
DUMP = [f"/store/unmerged/Run3/Hard{i % 3}/RAW/v1/f{i:05d}.root" for i in range(300)] + \
    [f"/store/unmerged/Run3/Kept/RAW/v1/f{i:05d}.root" for i in range(50)]
PROTECTED = ["/store/unmerged/Run3/Kept/RAW/v1"]


def request(app: Any, method: str, path: str, headers: dict[str, Any], body: bytes = b"",
            timeout: float = 30) -> tuple[int, Any]:
    """One HTTP request with header values sent as given (str, or raw bytes as the front end sends them)."""
    url = urllib.parse.urlsplit(app.url)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=timeout)
    try:
        conn.putrequest(method, f"{url.path}/{path}")
        for name, value in {"Content-Length": str(len(body)), **headers}.items():
            conn.putheader(name, value)
        conn.endheaders(body)
        resp = conn.getresponse()
        data = resp.read()
        return resp.status, json.loads(data) if resp.getheader("Content-Type", "").startswith(
            "application/json") else data.decode()
    finally:
        conn.close()


def trigger_body(**fields: str) -> bytes:
    return json.dumps({"rse": RSE, "mode": "plan", "request_id": uuid.uuid4().hex, **fields}).encode()


JSON = {"Content-Type": "application/json"}


def audit_lines(app: Any) -> list[dict[str, Any]]:
    """The audit file's lines (none before the first is written)."""
    return [json.loads(line) for line in app.audit.read_text().splitlines()] if app.audit.exists() else []


@pytest.fixture(scope="module")
def hard(rest_app: Any, tmp_path_factory: pytest.TempPathFactory) -> Any:
    seed_rse(rest_app.db, RSE, tmp_path_factory.mktemp("plans"), DUMP, PROTECTED, time.time() - 3600, done_jobs=1,
             outcome=lambda i, lfn: {"state": "deleted", "size": 1})
    return rest_app


def mount(app: Any, base: str, view: Any, **rest_keys: Any) -> Mounted:
    """A second app on the running server, under its own base, with its own view and configuration."""
    return app.mount(base, view, **rest_keys)


# -- the real front end --------------------------------------------------------------------------


def front_end_headers(key: bytes, role: str = "t0_operator") -> dict[str, bytes]:
    """Headers as auth-proxy-server sends them: `ok`, Go-canonical names, UTF-8 values, a role with '_'."""
    headers = {"Cms-Auth-Status": "ok", "Cms-Authn-Name": "Jürgen Müller", "Cms-Authn-Dn": "/DC=ch/CN=jmuller",
               "Cms-Authn-Login": "jmuller", "Cms-Authn-Method": "X509Cert", f"Cms-Authz-{role}": "group:dmwm"}
    headers["Cms-Authn-Hmac"] = sign(headers, key)
    return {k: v.encode("utf-8") for k, v in headers.items()}


def test_the_front_ends_signature_is_accepted(hard: Any) -> None:
    """Before: 403 (status `ok` refused, the UTF-8 name signed as characters, '_' in the role name lost)."""
    roles = {"operator_roles": ["t0_operator:group:dmwm"]}
    app = mount(hard, "/ms-unmerged-fe", Ledger(hard.db).view(), **roles)
    status, body = request(app, "POST", "data/trigger", {**JSON, **front_end_headers(hard.key.read_bytes())},
                           trigger_body())
    assert status == 202, body
    assert body["result"][0]["user"] == "jmuller"


def test_operator_logins_allow_list(hard: Any) -> None:
    """A role header the client added itself is signed by the front end too: with rest.operator_logins
    set, the role alone is not enough."""
    app = mount(hard, "/ms-unmerged-logins", Ledger(hard.db).view(), operator_logins=["alice"])
    key = hard.key.read_bytes()
    status, body = post(app, "data/trigger", {"rse": RSE}, operator_headers(key, "eve"))
    assert status == 403 and "operator_logins" in body["error"]
    assert post(app, "data/trigger", {"rse": RSE}, operator_headers(key, "alice"))[0] == 202


# -- the trigger -----------------------------------------------------------------------------------


def test_trigger_wants_a_json_body(hard: Any) -> None:
    """Before: a cross-site form post (x-www-form-urlencoded) was accepted."""
    key = hard.key.read_bytes()
    status, body = post(hard, "data/trigger", {"rse": RSE}, operator_headers(key), as_json=False)
    assert status == 415 and "application/json" in body["error"]


def test_trigger_refuses_a_foreign_origin(hard: Any) -> None:
    """Before: any Origin was accepted."""
    key = hard.key.read_bytes()
    headers = {**operator_headers(key, "olga"), "Origin": "https://evil.example"}
    status, body = post(hard, "data/trigger", {"rse": RSE}, headers)
    assert status == 403 and "origin" in body["error"]
    assert any(a["outcome"] == "denied" and "origin" in a["reason"] and a["login"] == "olga"
               for a in audit_lines(hard))


def test_body_size_limit_before_authentication(hard: Any) -> None:
    """Before: bodies up to 40 MiB were read and parsed, then the request refused (403)."""
    status, _ = request(hard, "POST", "data/trigger", JSON, b"{" + b" " * (hard.config.rest.max_body_bytes + 1) + b"}")
    assert status == 413  # refused before authentication (403) and before parsing (400); a hang ends at 30 s


@pytest.mark.parametrize("fields, query, param", [
    ({"rse": RSE + "\n"}, "", "rse"),
    ({"request_id": "short"}, "", "request_id"),
    ({"rse": RSE}, "?rse=T2_Other", "rse"),
    ({"mode": "plan"}, "?mode=apply", "mode"),
])
def test_trigger_bad_input(hard: Any, fields: dict[str, str], query: str, param: str) -> None:
    """Before: a trailing newline passed the RSE pattern and the body silently overrode the query."""
    headers = {**JSON, **operator_headers(hard.key.read_bytes())}
    status, body = request(hard, "POST", "data/trigger" + query, headers, trigger_body(**fields))
    assert status == 400 and f"parameter '{param}'" in body["error"], body


def test_replayed_request_id_is_refused(hard: Any) -> None:
    """Before: the same signed request could be sent again and again (signatures never expire)."""
    headers = {**JSON, **operator_headers(hard.key.read_bytes(), "rita")}
    body = trigger_body()
    assert request(hard, "POST", "data/trigger", headers, body)[0] == 202
    status, answer = request(hard, "POST", "data/trigger", headers, body)
    assert status == 409 and "already used" in answer["error"]
    assert any(a.get("reason") == "request_id reused" and a["login"] == "rita" for a in audit_lines(hard))


def test_denials_are_audited_with_the_claimed_identity(hard: Any) -> None:
    """Before: a denial line named neither who claimed to ask, nor the RSE, nor the mode."""
    forged = operator_headers(b"not the key", "mallory")
    # The body is not read before the caller is known: what was asked is audited from the query string.
    status, _ = post(hard, f"data/trigger?rse={RSE}&mode=apply", {"rse": RSE, "mode": "apply"}, forged)
    assert status == 403
    line = [a for a in audit_lines(hard) if a["outcome"] == "denied" and a.get("login") == "mallory"][-1]
    assert line["rse"] == RSE and line["mode"] == "apply" and line["dn"] == "/DC=ch/CN=mallory"
    assert "signature" in line["reason"] and line["remote"] == "127.0.0.1"


def test_audit_log_is_private(hard: Any) -> None:
    """Before: created with the process umask (0644 here)."""
    post(hard, "data/trigger", {"rse": RSE}, {})
    assert stat.S_IMODE(hard.audit.stat().st_mode) == 0o600


def test_triggers_list_hides_logins_from_anonymous_callers(hard: Any) -> None:
    """Before: anyone could read which operator triggered what."""
    assert post(hard, "data/trigger", {"rse": RSE}, operator_headers(hard.key.read_bytes(), "tina"))[0] == 202
    _, body, _ = get(hard, "data/triggers")
    assert body["result"] and all("user" not in t for t in body["result"])
    status, body = request(hard, "GET", "data/triggers", operator_headers(hard.key.read_bytes(), "tina"))
    assert status == 200 and "tina" in {t["user"] for t in body["result"]}


@pytest.mark.parametrize("content", [b"", b"\n"])
def test_empty_key_refuses_every_trigger(hard: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture,
                                         content: bytes) -> None:
    """Before: a signature made with the empty key was accepted (202)."""
    empty = tmp_path / "empty.key"
    empty.write_bytes(content)
    with caplog.at_level(logging.ERROR, "MSUnmerged"):
        app = mount(hard, f"/ms-unmerged-nokey{len(content)}", Ledger(hard.db).view(), hmac_key_file=str(empty))
    assert any("HMAC key empty" in r.getMessage() and "refused" in r.getMessage() for r in caplog.records)
    status, body = post(app, "data/trigger", {"rse": RSE}, operator_headers(content))
    assert status == 403 and "refused" in body["error"]


# -- logging ---------------------------------------------------------------------------------------


class BrokenView(MongoLedgerView):
    """A programming error in the read side: the only way to make the app answer 500."""

    def rses(self) -> list[dict[str, Any]]:
        raise RuntimeError("a bug")


# Credentials a client may send, each in a header of its own (issue 38: Cookie and X-Rucio-Auth-Token were dumped).
CREDENTIAL_HEADERS = {"Authorization": "Basic QUxJQ0U6UzNDUkVULXB3", "Cookie": "session=S3CRET-cookie; theme=dark",
                      "X-Rucio-Auth-Token": "root-root-webui-S3CRET-rucio", "X-Api-Key": "S3CRET-apikey",
                      "X-Note": "retry with password=S3CRET-inline, eyJhbGciOiJIUzI1NiJ9.eyJTM0NSRVQ.S3CRET-jwt"}


def test_credentials_never_logged(hard: Any, caplog: pytest.LogCaptureFixture) -> None:
    """Before: on a 500, CherryPy logged every request header, the signed cms-authn-hmac included; then
    (issue 38) Cookie, X-Rucio-Auth-Token, Basic credentials and a password in any header were written in clear."""
    app = mount(hard, "/ms-unmerged-broken", BrokenView(Ledger(hard.db)))
    headers = {**operator_headers(hard.key.read_bytes()), "X-Trace": "visible", **CREDENTIAL_HEADERS}
    with caplog.at_level(logging.INFO):
        status, _ = request(app, "GET", "data/status", headers)
    assert status == 500
    assert "x-trace: visible" in caplog.text.lower() and "<redacted>" in caplog.text
    assert headers["cms-authn-hmac"] not in caplog.text and "Alice Operator" not in caplog.text
    assert "S3CRET" not in caplog.text and "QUxJQ0U6UzNDUkVULXB3" not in caplog.text
    text = caplog.text.lower()
    assert "cookie: <redacted>" in text and "x-note: retry with password=<redacted>" in text


# -- the ledger database away --------------------------------------------------------------------


@pytest.fixture(scope="module")
def down(hard: Any, mongo_away: MongoClient) -> Mounted:
    """The app over a database address where nothing listens."""
    return mount(hard, "/ms-unmerged-down", Ledger(mongo_away.msunmerged).view(), db_timeout_s=1.0)


@pytest.mark.parametrize("path", ["data/status", f"data/info?rse={RSE}", "data/info?rse=ALL_DOCS",
                                  f"data/files?rse={RSE}", f"data/files?rse={RSE}&stream=true", "data/jobs",
                                  "data/cycles", f"data/plan?rse={RSE}", "data/health", "", f"rse?name={RSE}"])
def test_database_away_is_503_within_the_timeout(down: Mounted, mongo_away: MongoClient, path: str,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    """Before: 500 after the ledger's retries (~9 s), and stream=true answered 200 then hung. The HTTP client's
    30 s bounds a hang; the time taken is not asserted: a busy machine may take longer than rest.db_timeout_s."""
    with ledger_logged(caplog):
        status, body, _ = get(down, path)
    assert status == 503, body
    assert_cut_by_the_deadline(caplog, mongo_away, down.root.db_timeout_s)


def test_database_away_metrics_report_ledger_down(down: Mounted) -> None:
    status, text, _ = get(down, "metrics")
    assert status == 200 and "msunmerged_ledger_up 0" in text


class DyingView(MongoLedgerView):
    """The database goes away after a few records: pymongo's own error, raised where it would be."""

    def files(self, *args: Any) -> Iterator[dict[str, Any]]:
        for n, rec in enumerate(super().files(*args)):
            if n == 3:
                raise AutoReconnect("connection closed")
            yield rec


def test_stream_broken_midway_ends_with_an_error_marker(hard: Any) -> None:
    """Before: the chunked answer stopped without closing the JSON and the client waited."""
    app = mount(hard, "/ms-unmerged-dying", DyingView(Ledger(hard.db)))
    status, body, _ = get(app, f"data/files?rse={RSE}&stream=true")
    assert status == 200 and len(body["result"]) == 3 and body["error"] == "ledger database unavailable"


# -- slow clients ----------------------------------------------------------------------------------


def serving(port: int) -> GuardedServer:
    """The GuardedServer (rest/server.py) that the session's app serves `port` with."""
    return next(adapter.httpserver for adapter in rest_app_module._SERVERS if adapter.bind_addr[1] == port)


HANG_S = 60.0  # bounds waiting for a stalled connection to be closed: a hang, not a speed


def test_slow_clients_do_not_starve_the_server(hard: Any) -> None:
    """Twice as many stalled clients as threads: the server answers others meanwhile, and closes each stalled
    connection after rest.socket_timeout_s of silence (the timeout its connection manager applies), not sooner.
    Before: the socket timeout was CherryPy's 10 s whatever the configuration, so the threads stayed held."""
    url = urllib.parse.urlsplit(hard.url)
    timeout_s = hard.config.rest.socket_timeout_s
    assert serving(url.port).timeout == timeout_s  # cheroot drops a connection silent for server.timeout
    stalled = []
    per_address = hard.config.rest.max_connections_per_client  # from several addresses: none is refused
    try:
        for n in range(2 * hard.config.rest.thread_pool):
            source = (f"127.0.0.{2 + n // per_address}", 0)
            s = socket.create_connection((url.hostname, url.port), source_address=source)
            silent_since = time.monotonic()  # before the server can have read the bytes
            s.sendall(b"GET /ms-unmerged/data/status HTTP/1.1\r\nHost: x\r\n")  # and never the blank line
            stalled.append((s, silent_since))
        time.sleep(0.3)
        status, _, _ = get(hard, "data/health?probe=live")
        assert status == 200
        for s, silent_since in stalled:
            s.settimeout(HANG_S)
            assert s.recv(1) == b"", "a stalled connection got an answer"  # closed by the server, unanswered
            assert time.monotonic() - silent_since >= timeout_s  # its silence lasted the timeout: dropped for it
    finally:
        for s, _ in stalled:
            s.close()
