"""The trigger's gate (rest/auth.TriggerGate) on its own: its order, the body read only once the headers
passed, and every refusal audited with what was asked."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from MSUnmerged.config import RestConfig
from MSUnmerged.rest.auth import CLOSED, Audit, AuthError, KeyFile, RateLimiter, TriggerGate, sign
from MSUnmerged.rest.params import BadParam
from MSUnmerged.rest.triggers import TriggerMode

KEY = b"0123456789abcdef0123456789abcdef"
JSON = "application/json"
OPERATOR = {"cms-auth-status": "ok", "cms-authn-login": "alice", "cms-authn-dn": "/CN=alice",
            "cms-authz-operator": "group:dmwm"}


def signed(headers: dict[str, str]) -> dict[str, bytes]:
    raw = {k: v.encode() for k, v in headers.items()}
    raw["cms-authn-hmac"] = sign(headers, KEY).encode()
    return raw


class Body:
    """A request body that records whether the gate read it."""

    def __init__(self, data: dict[str, Any]) -> None:
        self.data, self.read = json.dumps(data).encode(), False

    def __call__(self, limit: int) -> bytes:
        self.read = True
        return self.data[:limit]


@pytest.fixture()
def gate(tmp_path: Path) -> TriggerGate:
    (tmp_path / "key").write_bytes(KEY)
    rest = RestConfig(hmac_key_file=str(tmp_path / "key"), audit_log=str(tmp_path / "audit.log"),
                      operator_logins=["alice"], allowed_origins=["https://cmsweb.cern.ch"], trigger_rate_per_min=2)
    return TriggerGate(rest, KeyFile(rest.hmac_key_file))


def audit(gate: TriggerGate) -> list[dict[str, Any]]:
    return [json.loads(line) for line in Path(gate.rest.audit_log).read_text().splitlines()]


def test_admits_an_operator_and_audits_the_outcome(gate: TriggerGate) -> None:
    body = Body({"rse": "T2_CH_CERN", "mode": "apply", "request_id": "req-00000001"})
    ask = gate.admit(signed(OPERATOR), JSON, "10.0.0.1", {}, body)
    assert (ask.rse, ask.mode, ask.request_id, ask.who) == ("T2_CH_CERN", "apply", "req-00000001", "alice")
    assert ask.mode is TriggerMode.APPLY  # the wire's string, parsed into the one enum of modes
    gate.record(ask, "accepted", id="t-1")
    [line] = audit(gate)
    assert line["outcome"] == "accepted" and line["id"] == "t-1" and line["login"] == "alice"
    assert line["remote"] == "10.0.0.1" and line["rse"] == "T2_CH_CERN" and line["mode"] == "apply"


@pytest.mark.parametrize("headers, content_type, status, reason", [
    ({**OPERATOR, "cms-authz-operator": "group:other"}, JSON, 403, "no operator role"),
    ({**OPERATOR, "cms-authn-login": "mallory"}, JSON, 403, "login not in rest.operator_logins"),
    (OPERATOR, "text/plain", 415, "not a JSON body"),
])
def test_headers_refuse_before_the_body_is_read(gate: TriggerGate, headers: dict[str, str], content_type: str,
                                                status: int, reason: str) -> None:
    body = Body({"rse": "T2_CH_CERN", "request_id": "req-00000001"})
    with pytest.raises(AuthError) as refused:
        gate.admit(signed(headers), content_type, "10.0.0.1", {"rse": "T2_CH_CERN"}, body)
    assert refused.value.status == status and not body.read
    [line] = audit(gate)
    assert line["outcome"] == "denied" and line["reason"] == reason and line["rse"] == "T2_CH_CERN"


def test_foreign_origin_and_a_changed_header_are_refused_unread(gate: TriggerGate) -> None:
    body = Body({})
    with pytest.raises(AuthError):
        gate.admit({**signed(OPERATOR), "origin": b"https://evil.example"}, JSON, "10.0.0.1", {}, body)
    tampered = {**signed(OPERATOR), "cms-authn-login": b"bob"}
    with pytest.raises(AuthError, match="signature mismatch"):
        gate.admit(tampered, JSON, "10.0.0.1", {}, body)
    assert not body.read and [line["outcome"] for line in audit(gate)] == ["denied", "denied"]


def test_bad_request_is_refused_and_audited(gate: TriggerGate) -> None:
    with pytest.raises(BadParam, match="given in the query and the body"):
        gate.admit(signed(OPERATOR), JSON, "10.0.0.1", {"rse": "T2_A"},
                   Body({"rse": "T2_B", "request_id": "req-00000001"}))
    with pytest.raises(BadParam, match="request_id"):
        gate.admit(signed(OPERATOR), JSON, "10.0.0.1", {}, Body({"rse": "T2_B"}))
    assert [(line["outcome"], line.get("rse")) for line in audit(gate)] == [("refused", "T2_A"), ("refused", None)]


def test_an_unknown_mode_is_refused_naming_the_wire_values(gate: TriggerGate) -> None:
    with pytest.raises(BadParam, match="'mode': must be one of plan, apply"):
        gate.admit(signed(OPERATOR), JSON, "10.0.0.1", {}, Body({"rse": "T2_A", "mode": "APPLY",
                                                                   "request_id": "req-00000001"}))
    assert [line["outcome"] for line in audit(gate)] == ["refused"]


def test_plan_is_the_default_mode(gate: TriggerGate) -> None:
    plan = gate.admit(signed(OPERATOR), JSON, "10.0.0.1", {}, Body({"rse": "T2_A", "request_id": "req-00000001"}))
    assert plan.mode is TriggerMode.PLAN  # when no mode is sent


@pytest.mark.parametrize("mode", list(TriggerMode))
def test_every_mode_closed_without_operator_logins(gate: TriggerGate, mode: TriggerMode) -> None:
    gate.rest.operator_logins = []
    body = Body({"rse": "T2_A", "mode": mode, "request_id": "req-00000002"})
    with pytest.raises(AuthError, match="rest.operator_logins") as refused:
        gate.admit(signed(OPERATOR), JSON, "10.0.0.1", {}, body)
    assert refused.value.status == 403 and not body.read  # decided by the headers alone
    assert audit(gate)[-1]["reason"] == CLOSED


def test_rate_limit_per_user_is_audited(gate: TriggerGate) -> None:
    ask = gate.admit(signed(OPERATOR), JSON, "10.0.0.1", {}, Body({"rse": "T2_A", "request_id": "req-00000001"}))
    assert gate.rate_limited(ask) is None and gate.rate_limited(ask) is None
    wait = gate.rate_limited(ask)
    assert wait is not None and 0 < wait <= 60
    assert audit(gate)[-1]["outcome"] == "rate_limited"


def test_refusals_are_audited_up_to_their_rate_per_caller(gate: TriggerGate) -> None:
    """Before: every refused attempt wrote its audit line (3,200 in 5.2 s: 704 kB). Now a caller's refusals past
    rest.refusals_per_min are answered 429 unaudited, and its next audited line counts them."""
    gate.rest.refusals_per_min = 3
    gate.refusals = RateLimiter(3)
    stranger = {**OPERATOR, "cms-authn-login": "mallory"}
    statuses = []
    for _ in range(10):
        with pytest.raises(AuthError) as refused:
            gate.admit(signed(stranger), JSON, "10.0.0.9", {}, Body({}), caller="login:mallory")
        statuses.append((refused.value.status, refused.value.retry_after))
    assert statuses[:3] == [(403, None)] * 3
    assert all(status == 429 and 1 <= wait <= 61 for status, wait in statuses[3:]), statuses
    assert [line["caller"] for line in audit(gate)] == ["login:mallory"] * 3
    with pytest.raises(AuthError) as other:  # another caller has its own share
        gate.admit(signed(stranger), JSON, "10.0.0.9", {}, Body({}), caller="login:trudy")
    assert other.value.status == 403
    gate.refusals._events.clear()  # the minute has passed
    with pytest.raises(AuthError):
        gate.admit(signed(stranger), JSON, "10.0.0.9", {}, Body({}), caller="login:mallory")
    last = audit(gate)[-1]
    assert last["caller"] == "login:mallory" and last["suppressed"] == 7 and len(audit(gate)) == 5


def test_the_forwarded_for_chain_is_audited(gate: TriggerGate) -> None:
    headers = {**signed(OPERATOR), "x-forwarded-for": b"188.184.1.2, 10.100.0.7"}
    ask = gate.admit(headers, JSON, "10.0.0.1", {}, Body({"rse": "T2_A", "request_id": "req-00000001"}))
    gate.record(ask, "accepted")
    assert audit(gate)[-1]["forwarded_for"] == "188.184.1.2, 10.100.0.7"
    with pytest.raises(AuthError):
        gate.admit({**headers, "cms-authn-login": b"eve"}, JSON, "10.0.0.1", {}, Body({}))
    assert audit(gate)[-1]["forwarded_for"] == "188.184.1.2, 10.100.0.7" and audit(gate)[-1]["outcome"] == "denied"


def test_the_audit_file_is_rotated_by_size(tmp_path: Path) -> None:
    """Before: the audit file grew without bound (about 11 GB a day under a flood of refusals)."""
    path = tmp_path / "audit.jsonl"
    log = Audit(str(path), max_bytes=2000, files=2)
    for n in range(200):
        log.write(action="trigger", outcome="denied", n=n, filler="x" * 50)
    kept = sorted(p.name for p in tmp_path.iterdir())
    assert kept == ["audit.jsonl", "audit.jsonl.1", "audit.jsonl.2"]
    for p in tmp_path.iterdir():
        assert 0 < p.stat().st_size <= 2000 and p.stat().st_mode & 0o777 == 0o600
    numbers = [json.loads(line)["n"] for p in (path.with_name("audit.jsonl.2"), path.with_name("audit.jsonl.1"), path)
               for line in p.read_text().splitlines()]
    assert numbers == list(range(numbers[0], 200))  # the newest lines, in order, none lost between the files
