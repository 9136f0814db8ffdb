"""The worker with its storage credential against real credential-checking xrootd servers.

Tokens (ztn over TLS + SciTokens): a token scoped to /store/unmerged deletes there and is refused elsewhere
by the storage itself; a job whose token is missing, expired or refused records auth_failed, deletes
nothing and stops early. X.509 (GSI): the job's proxy deletes; without one the storage refuses.
"""
from __future__ import annotations

import os
import shutil
import sys
import time
from pathlib import Path
from typing import Optional

import pytest
from cryptography.hazmat.primitives.asymmetric import ec

from MSUnmerged.worker.cleanup import EXIT_AUTH
from MSUnmerged.worker import credentials as cr
from MSUnmerged.worker.credentials import FILE_NAMES, job_env
from servers.testca import TestCA
from servers.xrootd import GsiXrootd, TokenXrootd, XrootdServer
from worker_kit import SYSTEM_PYTHON, files, make_site, manifest, run_worker, scan_start, summary, world_dir

pytestmark = pytest.mark.integration

BASE = "/store/unmerged/Run3Summer23DRPremix/ZeroBias/AODSIM/130X-tokens"


def run_with(server: XrootdServer, job: Path, lfns: list[str], kind: str, credential: Optional[bytes],
             command: str = "xrdcp", python: str = sys.executable, env: Optional[dict[str, str]] = None,
             **step: object) -> tuple[int, list[dict]]:
    """The worker as a backend starts it: the credential in the job's folder (0600), named by the environment
    (kind "": the service sends none)."""
    job.mkdir(parents=True, exist_ok=True)
    if credential is not None:
        path = job / FILE_NAMES[kind]
        path.write_bytes(credential)
        path.chmod(0o600)
    sc = make_site(world_dir("msunmerged-cred-"), [{"protocol": "XRootD", "access": "global-rw",
                                                    "rules": [{"lfn": "/+(.*)", "pfn": server.url + "//$1"}]}],
                   [{"volume": "Test_Disk", "protocol": "XRootD", "command": command}])
    env = {**(server.client_env or {}), **job_env(kind, FILE_NAMES.get(kind, "")), **(env or {})}
    return run_worker(job, manifest(lfns, **{"scan_started": scan_start(), **step}), sc, python=python, env=env,
                      prefix=["nsenter", "-t", str(server.pid), "-n"])


def run_with_token(tx: TokenXrootd, job: Path, lfns: list[str], token: Optional[str], command: str = "xrdcp",
                   python: str = sys.executable, **step: object) -> tuple[int, list[dict]]:
    return run_with(tx.server, job, lfns, "token", None if token is None else token.encode(), command, python,
                    **step)


@pytest.mark.parametrize("command,python,deleter", [
    ("xrdcp", sys.executable, "xrootd"),
    ("gfal2", SYSTEM_PYTHON, "gfal2"),  # XrdCl inside the gfal2 module takes the token from the environment
    ("gfal2", sys.executable, "gfal-rm"),  # no gfal2 module in this python: gfal-rm, same environment
])
def test_scoped_token_deletes_the_planned_files(token_xrootd: TokenXrootd, tmp_path: Path, command: str,
                                                python: str, deleter: str) -> None:
    lfns = [f"{BASE}-{deleter}/00000/f{i}.root" for i in range(30)]
    paths = [token_xrootd.server.put(lfn) for lfn in lfns]
    other = token_xrootd.server.put(f"{BASE}-{deleter}/00000/not-planned.root")
    rc, lines = run_with_token(token_xrootd, tmp_path / "job", lfns, token_xrootd.issuer.mint(), command, python)
    assert rc == 0, summary(lines)
    assert lines[0]["start"]["credential"] == {"kind": "token", "file": str(tmp_path / "job" / "storage.token"),
                                               "mode": "0600"}
    assert lines[0]["start"]["method"]["deleter"] == deleter
    assert {f["outcome"] for f in files(lines).values()} == {"deleted"}
    assert not any(p.exists() for p in paths) and other.exists()
    report = (tmp_path / "job" / "report.jsonl").read_text()
    assert "eyJ" not in report  # no token (a JWT starts with eyJ) ever reaches the report


def test_storage_refuses_the_token_outside_unmerged(token_xrootd: TokenXrootd, tmp_path: Path) -> None:
    """Below the worker's own checks: the storage itself allows this token nothing outside /store/unmerged."""
    inside = token_xrootd.server.put("/store/unmerged/x/y/z/w/keep-me-not.root")
    outside = token_xrootd.server.put("/store/data/Run2024A/ZeroBias/AOD/v1/000/precious.root")
    token = tmp_path / "token"
    token.write_text(token_xrootd.issuer.mint())
    token.chmod(0o600)
    env = {**os.environ, **(token_xrootd.server.client_env or {}), "BEARER_TOKEN_FILE": str(token),
           "XrdSecPROTOCOL": "ztn", "XRD_REQUESTTIMEOUT": "10"}
    out = token_xrootd.server.run(["xrdfs", token_xrootd.server.url, "rm", "/store/data/Run2024A/ZeroBias/AOD/v1/000/"
                                   "precious.root"], env=env, capture_output=True, text=True)
    assert out.returncode != 0 and "[3010]" in out.stdout + out.stderr, out
    assert outside.exists()
    ok = token_xrootd.server.run(["xrdfs", token_xrootd.server.url, "rm", "/store/unmerged/x/y/z/w/keep-me-not.root"],
                                 env=env, capture_output=True, text=True)
    assert ok.returncode == 0 and not inside.exists(), ok


@pytest.mark.parametrize("case", ["missing", "expired", "forged"])
def test_missing_expired_or_refused_token_stops_the_job(token_xrootd: TokenXrootd, tmp_path: Path,
                                                        case: str) -> None:
    lfns = [f"{BASE}-{case}/00000/f{i}.root" for i in range(60)]
    paths = [token_xrootd.server.put(lfn) for lfn in lfns]
    issuer = token_xrootd.issuer
    token = {"missing": None, "expired": issuer.mint(lifetime=-60),
             "forged": issuer.mint(key=ec.generate_private_key(ec.SECP256R1()))}[case]
    rc, lines = run_with_token(token_xrootd, tmp_path / "job", lfns, token,
                               remove_dirs=[f"{BASE}-{case}/00000"])
    assert rc == EXIT_AUTH, summary(lines)
    assert all(p.exists() for p in paths)  # nothing deleted
    outcomes = [f["outcome"] for f in files(lines).values()]
    assert "deleted" not in outcomes and outcomes.count("auth_failed") >= 1
    if case == "forged":
        # The worker cannot tell a forged token: the storage refuses the first batch, the job stops there.
        assert outcomes.count("auth_failed") == 20 and outcomes.count("not_attempted") == 40
        assert "Auth failed" in files(lines)[lfns[0]]["error"]
        assert "refused the job's token credential" in summary(lines)["summary"]["error"]
    else:
        # Found before any request: every file is auth_failed, the storage never asked.
        assert set(outcomes) == {"auth_failed"}
        assert ("expired at" if case == "expired" else "storage.token") in files(lines)[lfns[0]]["error"]
    assert summary(lines)["summary"]["dirs"] in ({"auth_failed": 1}, {"not_attempted": 1})



@pytest.mark.parametrize("command,python,deleter", [
    ("xrdcp", sys.executable, "xrootd"),
    ("gfal2", SYSTEM_PYTHON, "gfal2"),
])
def test_proxy_deletes_over_gsi(gsi_xrootd: GsiXrootd, tmp_path: Path, command: str, python: str,
                                deleter: str) -> None:
    lfns = [f"{BASE}-gsi-{deleter}/00000/f{i}.root" for i in range(5)]
    paths = [gsi_xrootd.server.put(lfn) for lfn in lfns]
    rc, lines = run_with(gsi_xrootd.server, tmp_path / "job", lfns, "proxy", gsi_xrootd.proxy.read_bytes(),
                         command, python)
    assert rc == 0, summary(lines)
    assert lines[0]["start"]["credential"]["kind"] == "proxy"
    assert {f["outcome"] for f in files(lines).values()} == {"deleted"}
    assert not any(p.exists() for p in paths)


def test_without_proxy_gsi_storage_refuses(gsi_xrootd: GsiXrootd, tmp_path: Path) -> None:
    """No credential expected by the service and none on the node: the storage's refusal is auth_failed."""
    lfns = [f"{BASE}-gsi-none/00000/f{i}.root" for i in range(3)]
    paths = [gsi_xrootd.server.put(lfn) for lfn in lfns]
    rc, lines = run_with(gsi_xrootd.server, tmp_path / "job", lfns, "", None,
                         env={"X509_USER_PROXY": str(tmp_path / "no-such-proxy")})
    assert rc == EXIT_AUTH, summary(lines)
    assert lines[0]["start"]["credential"] == {"kind": "none"}
    assert {f["outcome"] for f in files(lines).values()} == {"auth_failed"}
    assert all(p.exists() for p in paths)


def test_credential_discovery(tmp_path: Path) -> None:
    """Which credential the worker hands to its tools, and when it refuses to start (auth_failed)."""
    token = tmp_path / "storage.token"
    token.write_text("eyJhbGciOiJFUzI1NiJ9.eyJleHAiOjEwMDAwMDAwMDB9.c2ln")  # exp 2001
    wanted = {"MSUNMERGED_CREDENTIAL": "token", "BEARER_TOKEN_FILE": "storage.token"}
    cred, problem = cr.discover(wanted, str(tmp_path), now=2e9)
    assert cred == cr.Credential("token", str(token)) and "expired at 2001-09-09" in (problem or "")
    assert cr.discover(wanted, str(tmp_path), now=9e8) == (cred, None)
    # Offered by the node but not asked for by the service: used, never a reason to refuse the job.
    assert cr.discover({"BEARER_TOKEN_FILE": str(token)}, "/", now=2e9) == (cred, None)
    cred, problem = cr.discover({"MSUNMERGED_CREDENTIAL": "proxy", "X509_USER_PROXY": "x509up"}, str(tmp_path))
    assert cred.kind == "proxy" and "unreadable" in (problem or "")
    env = cr.tool_env({"XrdSecPROTOCOL": "gsi,ztn"}, cr.Credential("token", str(token)))
    assert env["BEARER_TOKEN_FILE"] == str(token) and env["XrdSecPROTOCOL"] == "gsi,ztn"  # the site's choice
    assert ("BEARER", "TOKEN", token.read_text()) in cr.gfal2_options(env)


def test_a_proxy_is_judged_by_its_certificates_end(tmp_path: Path) -> None:
    """The proxy's notAfter, read with the standard library's ssl module (imported only for a proxy)."""
    ca = TestCA(tmp_path / "ca")
    proxy = ca.proxy(ca.issue("MSUnmerged Test User"), hours=2)
    shutil.copy(proxy, tmp_path / "x509up")
    wanted = {"MSUNMERGED_CREDENTIAL": "proxy", "X509_USER_PROXY": "x509up"}
    end = cr.proxy_expiry(str(proxy))
    assert end is not None and abs(end - (time.time() + 7200)) < 120
    cred, problem = cr.discover(wanted, str(tmp_path))
    assert cred.kind == "proxy" and problem is None
    cred, problem = cr.discover(wanted, str(tmp_path), now=end)
    assert "expired at" in (problem or "") and "x509up" in (problem or "")
    (tmp_path / "x509up").write_text("not a certificate")
    assert cr.proxy_expiry(str(tmp_path / "x509up")) is None  # the storage will judge it
