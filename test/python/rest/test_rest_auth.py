"""CMSWEB header authentication: signature, roles, key rotation (expiry), rate limit."""
from __future__ import annotations

import hashlib
import hmac
import os
from pathlib import Path

import pytest

from MSUnmerged.rest.auth import AuthError, KeyFile, RateLimiter, has_role, parse_role, sign, signed_message, \
    user_from_headers

KEY = b"0123456789abcdef0123456789abcdef"


def headers(**extra: str) -> dict[str, str]:
    h = {"cms-auth-status": "OK", "cms-authn-method": "X509Cert", "cms-authn-login": "alice",
         "cms-authn-name": "Alice", "cms-authn-dn": "/DC=ch/CN=alice", "cms-authz-operator": "group:dmwm site:T2_CH_CERN"}
    h.update(extra)
    h["cms-authn-hmac"] = sign(h, KEY)
    return h


@pytest.fixture()
def keyfile(tmp_path: Path) -> KeyFile:
    path = tmp_path / "hmac.key"
    path.write_bytes(KEY)
    return KeyFile(str(path))


def test_message_is_built_exactly_as_the_front_end_does() -> None:
    h = {"cms-authn-login": "bob", "cms-auth-status": "OK", "cms-authz-admin": "group:dmwm",
         "cms-authn-hmac": "ignored", "x-other": "ignored"}
    # sorted names: cms-authn-login (15 chars), cms-authz-admin (15); lengths in hex
    assert signed_message(h) == "hfv3hfva#cms-authn-loginbobcms-authz-admingroup:dmwm"
    expected = hmac.new(KEY, signed_message(h).encode(), hashlib.sha1).hexdigest()
    assert sign({k.upper(): v for k, v in h.items()}, KEY) == expected  # header names are case-insensitive


def test_valid_headers_give_the_user_and_roles(keyfile: KeyFile) -> None:
    user = user_from_headers({k.title(): v for k, v in headers().items()}, keyfile)
    assert user.login == "alice" and user.dn == "/DC=ch/CN=alice"
    assert user.roles["operator"] == {"group": {"dmwm"}, "site": {"t2-ch-cern"}}
    assert has_role(user, ["operator:group:dmwm"]) and has_role(user, ["operator:site:T2_CH_CERN"])
    assert has_role(user, ["operator"]) and not has_role(user, ["admin:group:dmwm", "operator:group:other"])


@pytest.mark.parametrize("change", ["drop-hmac", "drop-status", "status-none", "tamper-login", "add-role",
                                    "drop-role", "bad-hex"])
def test_missing_or_forged_headers_are_refused(keyfile: KeyFile, change: str) -> None:
    h = headers()
    if change == "drop-hmac":
        del h["cms-authn-hmac"]
    elif change == "drop-status":
        del h["cms-auth-status"]
    elif change == "status-none":
        h["cms-auth-status"] = "NONE"
    elif change == "tamper-login":
        h["cms-authn-login"] = "root"
    elif change == "add-role":
        h["cms-authz-admin"] = "group:dmwm"
    elif change == "drop-role":
        del h["cms-authz-operator"]
    else:
        h["cms-authn-hmac"] = "zz" * 20
    with pytest.raises(AuthError) as err:
        user_from_headers(h, keyfile)
    assert err.value.status == 403


def test_rotated_key_expires_old_signatures(keyfile: KeyFile) -> None:
    h = headers()
    assert user_from_headers(h, keyfile).login == "alice"
    Path(keyfile.path).write_bytes(b"the new key, rotated by the front end")
    st = os.stat(keyfile.path)
    os.utime(keyfile.path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    with pytest.raises(AuthError):
        user_from_headers(h, keyfile)


def test_no_key_configured_refuses() -> None:
    with pytest.raises(AuthError):
        user_from_headers(headers(), KeyFile(""))


def test_role_specs() -> None:
    assert parse_role("admin:group:DMWM") == ("admin", "group", "dmwm")
    assert parse_role("operator") == ("operator", "", "")
    for bad in ("admin:team:x", "admin:group:"):
        with pytest.raises(ValueError):
            parse_role(bad)


def test_rate_limiter_sliding_window() -> None:
    limiter = RateLimiter(2)
    assert limiter.allow("a", 0.0)[0] and limiter.allow("a", 1.0)[0]
    allowed, wait = limiter.allow("a", 2.0)
    assert not allowed and wait == pytest.approx(58.0)
    assert limiter.allow("b", 2.0)[0]
    assert limiter.allow("a", 60.5)[0]
