"""The job's storage credential: which one it has, whether it is usable, and how each tool is told about it.

The service puts the credential (a WLCG bearer token or an X.509 proxy) in the job's folder and names it in
the environment: BEARER_TOKEN_FILE or X509_USER_PROXY (HTCondor sets the latter itself for x509userproxy);
MSUNMERGED_CREDENTIAL says which kind the job must have. Without MSUNMERGED_CREDENTIAL the worker uses what
the node offers (WLCG bearer token discovery, the usual proxy location), and none at all when there is none.
A credential's content never goes into the report or the log.
"""
from __future__ import annotations

import base64
import json
import os
import time
from typing import Any, Dict, List, Mapping, NamedTuple, Optional, Tuple

from .ids import PROXY_NAME, TOKEN_NAME

KIND_VAR = "MSUNMERGED_CREDENTIAL"
TOKEN_VAR = "BEARER_TOKEN"
TOKEN_FILE_VAR = "BEARER_TOKEN_FILE"
PROXY_VAR = "X509_USER_PROXY"
XRD_PROTOCOL_VAR = "XrdSecPROTOCOL"
TOOL_VARS = (TOKEN_VAR, TOKEN_FILE_VAR, PROXY_VAR, XRD_PROTOCOL_VAR)  # what tool_env may set
TOKEN, PROXY = "token", "proxy"
# The credential's file name in the job's folder (sandbox), written by the service.
FILE_NAMES = {TOKEN: TOKEN_NAME, PROXY: PROXY_NAME}
_FILE_VARS = {TOKEN: TOKEN_FILE_VAR, PROXY: PROXY_VAR}
# The xrootd security protocol each kind authenticates with.
_XRD_PROTOCOLS = {TOKEN: "ztn", PROXY: "gsi"}
EXPIRY_MARGIN_S = 60  # a credential expiring sooner than this would fail mid-job


class Credential(NamedTuple):
    kind: str  # TOKEN, PROXY, or "" when the job has none
    path: Optional[str] = None  # absolute path of its file; None for a token given in BEARER_TOKEN itself


NONE = Credential("")


def job_env(kind: str, file_name: str) -> Dict[str, str]:
    """(Service side) the environment naming a job's credential; `file_name` is relative to the job's folder."""
    if kind not in _FILE_VARS:
        return {}
    env = {KIND_VAR: kind}
    if file_name:
        env[_FILE_VARS[kind]] = file_name
    return env


def _token_files(env: Mapping[str, str]) -> List[str]:
    """WLCG bearer token discovery order (after BEARER_TOKEN itself)."""
    uid = os.geteuid()
    found = [env[TOKEN_FILE_VAR]] if env.get(TOKEN_FILE_VAR) else []
    if env.get("XDG_RUNTIME_DIR"):
        found.append(os.path.join(env["XDG_RUNTIME_DIR"], "bt_u%d" % uid))
    return found + ["/tmp/bt_u%d" % uid]


def _proxy_files(env: Mapping[str, str]) -> List[str]:
    return [env[PROXY_VAR]] if env.get(PROXY_VAR) else ["/tmp/x509up_u%d" % os.geteuid()]


def _find(kind: str, env: Mapping[str, str], cwd: str, explicit: bool) -> Optional[Credential]:
    if kind == TOKEN and env.get(TOKEN_VAR, "").strip():
        return Credential(TOKEN)
    candidates = _token_files(env) if kind == TOKEN else _proxy_files(env)
    for i, path in enumerate(candidates):
        path = os.path.join(cwd, path)
        # A file the environment names counts even when missing: that is a problem to report, not to skip.
        if os.path.exists(path) or (i == 0 and explicit and env.get(_FILE_VARS[kind])):
            return Credential(kind, path)
    return None


def token_expiry(token: str) -> Optional[float]:
    """The `exp` claim of a JWT (not verified: the storage does that), None when it has none."""
    try:
        payload = token.strip().split(".")[1]
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
        exp = claims.get("exp")
        return float(exp) if isinstance(exp, (int, float)) and not isinstance(exp, bool) else None
    except (IndexError, ValueError, AttributeError, TypeError):
        return None


def proxy_expiry(path: str) -> Optional[float]:
    """notAfter of the first certificate of a PEM proxy file; None when the standard library cannot tell."""
    import ssl  # here: ~13 ms of every worker's start, needed only for a proxy

    decode = getattr(getattr(ssl, "_ssl", None), "_test_decode_cert", None)
    if decode is None:
        return None
    try:
        return float(ssl.cert_time_to_seconds(decode(path)["notAfter"]))
    except Exception:  # not a PEM certificate this helper can read: the storage will judge it
        return None


def _problem(cred: Credential, env: Mapping[str, str], now: float) -> Optional[str]:
    """Why this credential cannot be used (None: it looks usable). The message names files, never contents."""
    where = cred.path or TOKEN_VAR
    if cred.path is None:
        text = env.get(TOKEN_VAR, "")
    else:
        try:
            with open(cred.path, "rb") as fh:
                text = fh.read().decode("ascii", "replace")
        except OSError as exc:
            return "storage %s %s unreadable: %s" % (cred.kind, where, exc.strerror)
    if not text.strip():
        return "storage %s %s is empty" % (cred.kind, where)
    expires = token_expiry(text) if cred.kind == TOKEN else proxy_expiry(where)
    if expires is not None and expires < now + EXPIRY_MARGIN_S:
        return "storage %s %s expired at %s" % (
            cred.kind, where, time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(expires)))
    return None


def discover(env: Mapping[str, str], cwd: str, now: Optional[float] = None) -> Tuple[Credential, Optional[str]]:
    """The job's credential and, when it cannot be used, why (the job then reports auth_failed)."""
    now = time.time() if now is None else now
    wanted = env.get(KIND_VAR, "")
    if wanted and wanted not in _FILE_VARS:
        return NONE, "%s=%s is not %s" % (KIND_VAR, wanted, " or ".join(sorted(_FILE_VARS)))
    for kind in [wanted] if wanted else [TOKEN, PROXY]:
        cred = _find(kind, env, cwd, explicit=bool(wanted))
        if cred is not None:
            # One the node offers on its own is not judged here: a storage that needs none (POSIX) must not
            # fail for a stale token in /tmp; a storage that needs it refuses it itself (auth_failed).
            return cred, _problem(cred, env, now) if wanted else None
    if wanted:
        return NONE, "the job needs a storage %s and has none (%s is not set)" % (wanted, _FILE_VARS[wanted])
    return NONE, None


def tool_env(env: Mapping[str, str], cred: Credential) -> Dict[str, str]:
    """The environment for the deletion tools (xrdfs, gfal-rm, and XrdCl inside gfal2): absolute credential
    paths, and the xrootd security protocol for the kind unless the site chose one."""
    out = dict(env)
    if not cred.kind:
        return out
    if cred.path is not None:
        out[_FILE_VARS[cred.kind]] = cred.path
    out.setdefault(XRD_PROTOCOL_VAR, _XRD_PROTOCOLS[cred.kind])
    return out


def bearer_token(env: Mapping[str, str]) -> str:
    """The bearer token `tool_env` names (BEARER_TOKEN, else the BEARER_TOKEN_FILE's content), "" when none."""
    token = env.get(TOKEN_VAR, "").strip()
    if not token and env.get(TOKEN_FILE_VAR):
        try:
            with open(env[TOKEN_FILE_VAR], encoding="ascii", errors="replace") as fh:
                token = fh.read().strip()
        except OSError:
            token = ""
    return token


def gfal2_options(env: Mapping[str, str]) -> List[Tuple[str, str, str]]:
    """gfal2 context string options (group, key, value) for the credential `tool_env` names."""
    proxy = env.get(PROXY_VAR)
    token = bearer_token(env)
    out: List[Tuple[str, str, str]] = []
    if token:
        out.append(("BEARER", "TOKEN", token))
    if proxy:
        out += [("X509", "CERT", proxy), ("X509", "KEY", proxy)]
    return out


def describe(cred: Credential) -> Dict[str, Any]:
    """For the report's start line: the kind, the file and its permissions (0600 expected), never the content."""
    if not cred.kind:
        return {"kind": "none"}
    out: Dict[str, Any] = {"kind": cred.kind, "file": cred.path}
    if cred.path is not None:
        try:
            out["mode"] = "%04o" % (os.stat(cred.path).st_mode & 0o777)
        except OSError:
            pass
    return out
