"""Each caller's share (rest/limits.py) on its own: who the caller is, and the three limits, with the clock given."""
from __future__ import annotations

from pathlib import Path

import pytest

from MSUnmerged.config import RestConfig
from MSUnmerged.rest.auth import KeyFile, sign
from MSUnmerged.rest.limits import CallerLimits, Refusal, Slot, caller_of, is_stream

KEY = b"0123456789abcdef0123456789abcdef"


def headers(login: str, key: bytes = KEY, **more: str) -> dict[str, bytes]:
    plain = {"cms-auth-status": "ok", "cms-authn-login": login, "cms-authn-dn": f"/CN={login}", **more}
    return {**{k: v.encode() for k, v in plain.items()}, "cms-authn-hmac": sign(plain, key).encode()}


@pytest.fixture()
def keyfile(tmp_path: Path) -> KeyFile:
    (tmp_path / "key").write_bytes(KEY)
    return KeyFile(str(tmp_path / "key"))


def test_the_caller_is_the_verified_login_else_the_address(keyfile: KeyFile, tmp_path: Path) -> None:
    assert caller_of(headers("alice"), "10.0.0.1", keyfile) == "login:alice"
    assert caller_of(headers(""), "10.0.0.1", keyfile) == "dn:/CN="
    forged = {**headers("alice"), "cms-authn-login": b"bob"}  # changed after signing
    assert caller_of(forged, "10.0.0.1", keyfile) == "addr:10.0.0.1"
    assert caller_of(headers("alice", b"another key, 32 bytes long......"), "10.0.0.1", keyfile) == "addr:10.0.0.1"
    assert caller_of({**headers("alice"), "cms-auth-status": b"NONE"}, "10.0.0.1", keyfile) == "addr:10.0.0.1"
    assert caller_of({}, "10.0.0.2", keyfile) == "addr:10.0.0.2"
    (tmp_path / "weak").write_bytes(b"\0" * 32)  # a key anyone has: nobody is verified with it
    plain = {"cms-auth-status": "ok", "cms-authn-login": "mallory"}
    nul_signed = {**{k: v.encode() for k, v in plain.items()}, "cms-authn-hmac": sign(plain, b"").encode()}
    assert caller_of(nul_signed, "10.0.0.3", KeyFile(str(tmp_path / "weak"))) == "addr:10.0.0.3"


@pytest.mark.parametrize("target, stream", [(b"/b/data/files?rse=A&stream=true", True), (b"/b/data/files?stream=1", True),
                                            (b"/b/data/files?stream=TRUE&rse=A", True), (b"/b/data/files?rse=A", False),
                                            (b"/b/data/files?stream=false", False), (b"/b/data/status", False),
                                            (b"/b/data/files?upstream=true", False)])
def test_streams_are_known_from_the_target(target: bytes, stream: bool) -> None:
    assert is_stream(target) is stream


def limits(**keys: object) -> CallerLimits:
    rest = RestConfig(max_requests_per_caller=3, max_streams_per_caller=1, caller_requests_per_s=2.0, caller_burst=5,
                      max_requests_unverified=4)
    for k, v in keys.items():
        setattr(rest, k, v)
    return CallerLimits(rest)


def test_requests_and_streams_in_progress_per_caller() -> None:
    shares = limits()
    held = [shares.admit("login:a", False, now=0.0) for _ in range(3)]
    assert all(isinstance(s, Slot) for s in held)
    over = shares.admit("login:a", False, now=0.0)
    assert isinstance(over, Refusal) and "rest.max_requests_per_caller" in over.reason and over.retry_after == 1
    assert isinstance(shares.admit("login:b", True, now=0.0), Slot)  # another caller has its own share
    assert isinstance(shares.admit("login:b", True, now=0.0), Refusal)  # one stream at a time
    assert isinstance(shares.admit("login:b", False, now=0.0), Slot)
    shares.done(held[0])
    assert isinstance(shares.admit("login:a", False, now=0.0), Slot)  # a request ended: room for one more


def test_request_starts_per_second_with_bursts() -> None:
    shares = limits(max_requests_per_caller=100)
    started = [shares.admit("login:carol", False, now=0.0) for _ in range(6)]
    assert [isinstance(s, Slot) for s in started] == [True] * 5 + [False]
    assert started[-1].retry_after == 1 and "rest.caller_requests_per_s" in started[-1].reason
    assert isinstance(shares.admit("login:carol", False, now=0.5), Slot)  # 2 a second: one more after 0.5 s
    assert isinstance(shares.admit("login:carol", False, now=0.5), Refusal)
    assert isinstance(shares.admit("login:dave", False, now=0.5), Slot)


def test_unverified_callers_share_one_part_of_the_threads() -> None:
    """Direct clients from many addresses (each within its own share) together hold at most
    rest.max_requests_unverified requests: the other threads stay for the front end's verified users."""
    shares = limits()
    held = [shares.admit(f"addr:10.0.0.{n}", False, now=0.0) for n in range(6)]
    assert [isinstance(s, Slot) for s in held] == [True] * 4 + [False] * 2
    assert "rest.max_requests_unverified" in held[-1].reason
    assert isinstance(shares.admit("login:alice", False, now=0.0), Slot)  # a verified user is not held back
    shares.done(held[0])
    assert isinstance(shares.admit("addr:10.0.0.9", False, now=0.0), Slot)
