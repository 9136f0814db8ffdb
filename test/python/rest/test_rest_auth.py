"""CMSWEB header authentication: the front end's signature byte for byte, roles, key handling, replay, rate limit.

The vectors below were derived by hand from dmwm/cmsauth `authz.go` `GetHmac` (the signer of the current
Go front end; no Go toolchain and module source can be built here): it walks the request's header names
as Go keeps them (canonical: `Cms-Authz-T0_operator`), keeps those whose lower-case name starts with
`cms-authn` or `cms-authz` except `cms-authn-hmac`, sorts the canonical names, and for each appends
`h%xv%x` (name length, value length in bytes) to a prefix and lower-case name + value to a suffix;
it signs the bytes of `prefix#suffix` with HMAC-SHA1 keyed by the key file's raw bytes.
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from MSUnmerged.rest.auth import AuthError, KeyFile, RateLimiter, go_canonical, has_role, key_weakness, parse_role, \
    sign, signed_message, user_from_headers

KEY = b"0123456789abcdef0123456789abcdef"

# What auth-proxy-server's SetCMSHeaders sends for a user with a non-ASCII name and a role with '_',
# plus headers it sets that are not signed (cms-auth-*, cms-cern-id, cms-request-uri).
FRONT_END = {"Cms-Auth-Status": "ok", "Cms-Authn-Name": "Jürgen Müller", "Cms-Authn-Dn": "/CN=jm",
             "Cms-Auth-Cert": "/CN=jm", "Cms-Authz-T0_operator": "group:dmwm", "Cms-Authz-Admin": "group:dmwm",
             "Cms-Authn-Login": "jmuller", "Cms-Authn-Method": "X509Cert", "Cms-Cern-Id": "123",
             "Cms-Request-Uri": "/ms-unmerged/data/trigger"}
FRONT_END_MESSAGE = ("hcv6hfv7h10v8hevfhfvah15va#cms-authn-dn/CN=jmcms-authn-loginjmullercms-authn-methodX509Cert"
                     "cms-authn-nameJürgen Müllercms-authz-admingroup:dmwmcms-authz-t0_operatorgroup:dmwm").encode()
FRONT_END_HMAC = "a3c5ab750205332e95f081289b8d7d42ab548cec"
# Go sorts canonical names: 'Z' (0x5a) < '_' (0x5f), while in lower case '_' < 'z'.
ORDER = {"cms-authn-login": "a", "cms-authz-zeta": "x", "cms-authz-_private": "y"}
ORDER_MESSAGE = b"hfv1hev1h12v1#cms-authn-loginacms-authz-zetaxcms-authz-_privatey"
ORDER_KEY = b"secret\n"  # read raw: the trailing newline is part of the key
ORDER_HMAC = "836526cfa06f9880255451de959bdad8b4b671d3"


def raw(headers: dict[str, str]) -> dict[str, bytes]:
    """Headers as the back end receives them: lower-case names, the raw UTF-8 bytes of the values."""
    return {k.lower(): v.encode("utf-8") for k, v in headers.items()}


def headers(**extra: str) -> dict[str, bytes]:
    h = {"cms-auth-status": "ok", "cms-authn-method": "X509Cert", "cms-authn-login": "alice",
         "cms-authn-name": "Alice", "cms-authn-dn": "/DC=ch/CN=alice", "cms-authz-operator": "group:dmwm site:T2_CH_CERN"}
    h.update(extra)
    h["cms-authn-hmac"] = sign(h, KEY)
    return raw(h)


@pytest.fixture()
def keyfile(tmp_path: Path) -> KeyFile:
    path = tmp_path / "hmac.key"
    path.write_bytes(KEY)
    return KeyFile(str(path))


def test_go_canonical_names() -> None:
    assert go_canonical("cms-authz-t0_operator") == "Cms-Authz-T0_operator"
    assert go_canonical("CMS-AUTHN-LOGIN") == "Cms-Authn-Login"


def test_front_end_vectors() -> None:
    assert signed_message(raw(FRONT_END)) == FRONT_END_MESSAGE
    assert sign(FRONT_END, KEY) == FRONT_END_HMAC
    assert signed_message(raw(ORDER)) == ORDER_MESSAGE
    assert sign(ORDER, ORDER_KEY) == ORDER_HMAC


def test_the_front_ends_headers_verify(keyfile: KeyFile) -> None:
    """Lower-case `ok`, a UTF-8 name, a role with '_': all as auth-proxy-server sends them."""
    h = raw({**FRONT_END, "Cms-Authn-Hmac": FRONT_END_HMAC})
    user = user_from_headers(h, keyfile)
    assert user.login == "jmuller" and user.name == "Jürgen Müller"
    assert has_role(user, ["t0_operator:group:dmwm"]) and has_role(user, ["admin"])
    for status in (b"OK", b"ok"):
        assert user_from_headers({**h, "cms-auth-status": status}, keyfile).login == "jmuller"


def test_valid_headers_give_the_user_and_roles(keyfile: KeyFile) -> None:
    user = user_from_headers(headers(), keyfile)
    assert user.login == "alice" and user.dn == "/DC=ch/CN=alice"
    assert user.roles["operator"] == {"group": {"dmwm"}, "site": {"t2-ch-cern"}}
    assert has_role(user, ["operator:group:dmwm"]) and has_role(user, ["operator:site:T2_CH_CERN"])
    assert has_role(user, ["operator"]) and not has_role(user, ["admin:group:dmwm", "operator:group:other"])


@pytest.mark.parametrize("change", ["drop-hmac", "drop-status", "status-none", "tamper-login", "add-role",
                                    "drop-role", "bad-hex", "latin-1-name"])
def test_missing_or_forged_headers_are_refused(keyfile: KeyFile, change: str) -> None:
    h = headers()
    if change == "drop-hmac":
        del h["cms-authn-hmac"]
    elif change == "drop-status":
        del h["cms-auth-status"]
    elif change == "status-none":
        h["cms-auth-status"] = b"NONE"
    elif change == "tamper-login":
        h["cms-authn-login"] = b"root"
    elif change == "add-role":
        h["cms-authz-admin"] = b"group:dmwm"
    elif change == "drop-role":
        del h["cms-authz-operator"]
    elif change == "latin-1-name":  # the same text in other bytes is another message
        h = raw({**FRONT_END, "Cms-Authn-Hmac": FRONT_END_HMAC})
        h["cms-authn-name"] = "Jürgen Müller".encode("latin-1")
    else:
        h["cms-authn-hmac"] = b"zz" * 20
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


@pytest.mark.parametrize("content", [None, b"", b"\n", b"  \n"])
def test_no_empty_or_unreadable_key_signs(tmp_path: Path, content: bytes) -> None:
    """Before: an empty key file was used as the key, so anyone could sign with it."""
    path = tmp_path / "hmac.key"
    if content is not None:
        path.write_bytes(content)
    keyfile = KeyFile(str(path))
    signed = raw({"cms-auth-status": "ok", "cms-authn-login": "mallory", "cms-authz-admin": "group:dmwm"})
    signed["cms-authn-hmac"] = sign({k: v.decode() for k, v in signed.items()}, content or b"").encode()
    with pytest.raises(AuthError, match="refused"):
        user_from_headers(signed, keyfile)
    assert keyfile.problem() and "refused" in keyfile.problem()
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


@pytest.mark.parametrize("content, weakness", [
    (b"\0" * 32, "empty"),  # HMAC pads a short key with NULs: this key signs like the empty one
    (b"0123456789abcde\n", "too short (15 bytes"),
    (b" 0123456\t789abcde \x00\n", "too short (15 bytes"),
    (b"a" * 64 + b"\n", "one byte repeated"),
])
def test_weak_keys_are_refused_and_logged(tmp_path: Path, caplog: pytest.LogCaptureFixture, content: bytes,
                                          weakness: str) -> None:
    """Before: a key file of NUL bytes, or of a few bytes, was used as the key."""
    path = tmp_path / "hmac.key"
    path.write_bytes(content)
    signed = raw({"cms-auth-status": "ok", "cms-authn-login": "mallory", "cms-authz-admin": "group:dmwm"})
    signed["cms-authn-hmac"] = sign({k: v.decode() for k, v in signed.items()}, content).encode()
    for _ in range(2):  # each refusal is logged, not only the first
        with pytest.raises(AuthError, match="refused"):
            user_from_headers(signed, KeyFile(str(path)))
    assert [r.getMessage() for r in caplog.records if weakness in r.getMessage()] == \
        [f"HMAC key file {path} refused: {key_weakness(content)}"] * 2


def test_a_strong_key_counts_its_bytes_as_read() -> None:
    assert key_weakness(b"0123456789abcdef") is None and key_weakness(b"0123456789abcdef\n") is None
    assert key_weakness(KEY) is None and key_weakness(hashlib.sha256(b"k").digest()) is None
