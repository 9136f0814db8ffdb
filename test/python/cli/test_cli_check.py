"""`msunmerged check` tries each part a real instance needs and says what works and what is missing, with the
README's exit codes: against a real SecantusDB, a real Rucio (its RSE list, userpass), ConMon and WMStats served
over HTTP (and HTTPS with client certificates of a test CA), the local batch backend and the machine's HTCondor
pool (its token refused or taken)."""
from __future__ import annotations

import os
import ssl
from pathlib import Path
from typing import Iterator

import pytest

from cli_kit import cli_env, msunmerged
from MSUnmerged import sample
from MSUnmerged.cli import EXIT_AUTH, EXIT_BAD_INPUT, EXIT_OK, EXIT_UNAVAILABLE
from servers import free_port
from servers.http_fakes import FakeCMSWeb
from servers.rucio import ROOT_PASS, ROOT_USER, RucioServer, add_cms_rse
from servers.testca import TestCA

pytestmark = [pytest.mark.integration, pytest.mark.slow]
RSE = "T2_XX_CHECKED"


@pytest.fixture(scope="module")
def web() -> Iterator[FakeCMSWeb]:
    """ConMon with a finished scan of RSE, WMStats with a protected list."""
    server = FakeCMSWeb()
    server.stats = sample.stats_for(RSE, 10)
    server.protected = ["/store/unmerged/A/B/RAW/proc-v1"]
    with server:
        yield server


def instance(work: Path, web: FakeCMSWeb, rucio: RucioServer, mongo_url: str, **settings: str) -> dict[str, str]:
    """The environment of a production-like instance whose every part answers."""
    (work / "rucio.pw").write_text(ROOT_PASS + "\n")
    (work / "hmac.key").write_bytes(os.urandom(20))
    env = cli_env(work, MONGO__URL=mongo_url, MONGO__DATABASE="check", RUCIO__HOST=rucio.url,
                  RUCIO__AUTH_HOST=rucio.url, RUCIO__ACCOUNT="root", RUCIO__AUTH_TYPE="userpass",
                  RUCIO__USERNAME=ROOT_USER, RUCIO__PASSWORD_FILE=str(work / "rucio.pw"),
                  PLANNER__RSE_EXPRESSION=RSE, CONMON__URL=web.conmon_url, WMSTATS__URL=web.wmstats_url,
                  REST__HMAC_KEY_FILE=str(work / "hmac.key"), REST__OPERATOR_LOGINS="alice")
    env.update({f"MSUNMERGED_{k.upper()}": v for k, v in settings.items()})
    return env


def results(stdout: str) -> dict[str, tuple[str, str]]:
    """check -> (result, detail) from the table."""
    out = {}
    for line in stdout.splitlines()[2:]:
        name, _, rest = line.partition("  ")
        result, _, detail = rest.strip().partition(" ")
        out[name.strip()] = (result, detail.strip())
    return out


@pytest.fixture(scope="module")
def registered(rucio_server: RucioServer) -> RucioServer:
    add_cms_rse(rucio_server.admin_client(), RSE)
    return rucio_server


def test_every_part_answers(tmp_path: Path, web: FakeCMSWeb, registered: RucioServer, mongo_url: str) -> None:
    done = msunmerged("check", env=instance(tmp_path, web, registered, mongo_url), timeout=300)
    got = results(done.stdout)
    assert done.returncode == EXIT_OK, done.stdout + done.stderr
    assert {k: v[0] for k, v in got.items()} == {
        "state folder": "ok", "ledger database": "ok", "CMSWEB credential": "off", "Rucio": "ok", "ConMon": "ok",
        "WMStats": "ok", "batch backend": "ok", "jobs' storage credential": "off", "HMAC key": "ok",
        "operator logins": "ok"}, done.stdout
    assert "1 RSEs for 'T2_XX_CHECKED'" in got["Rucio"][1] and "mongo.url 127.0.0.1:" in got["ledger database"][1]
    assert "protected bases" in got["WMStats"][1] and "preflight passed: local" in got["batch backend"][1]


def test_what_is_missing_or_failing_is_named(tmp_path: Path, web: FakeCMSWeb, registered: RucioServer,
                                            mongo_url: str) -> None:
    """A wrong Rucio password, a token that expired, ConMon answering 404, no HMAC key: each line says so, and the
    exit code is the first that applies: 3 (the missing key)."""
    (tmp_path / "bad.pw").write_text("not the password\n")
    expired = tmp_path / "token"
    expired.write_text("eyJhbGciOiJub25lIn0.eyJleHAiOiAxMDAwMDAwMDAwfQ.")  # exp 2001-09-09
    env = instance(tmp_path, web, registered, mongo_url, RUCIO__PASSWORD_FILE=str(tmp_path / "bad.pw"),
                   JOBS__CREDENTIAL="token", JOBS__TOKEN_FILE=str(expired), REST__HMAC_KEY_FILE="",
                   CONMON__URL=web.conmon_url + "/nowhere")
    done = msunmerged("check", env=env, timeout=300)
    got = results(done.stdout)
    assert got["Rucio"][0] == "FAILED" and "rucio: authentication" in got["Rucio"][1], done.stdout
    assert got["ConMon"][0] == "FAILED" and "http_status 404" in got["ConMon"][1], done.stdout
    assert got["jobs' storage credential"][0] == "FAILED" and "expires at 2001-09-09" in got["jobs' storage credential"][1]
    assert got["HMAC key"][0] == "MISSING" and got["WMStats"][0] == "ok" and got["ledger database"][0] == "ok"
    assert done.returncode == EXIT_BAD_INPUT, done.stdout
    # Without the missing key, the credentials come first (4), then the services that did not answer (5).
    env["MSUNMERGED_REST__HMAC_KEY_FILE"] = str(tmp_path / "hmac.key")
    assert msunmerged("check", env=env, timeout=300).returncode == EXIT_AUTH
    del env["MSUNMERGED_JOBS__CREDENTIAL"]
    env["MSUNMERGED_RUCIO__PASSWORD_FILE"] = str(tmp_path / "rucio.pw")
    env["MSUNMERGED_MONGO__URL"] = f"mongodb://127.0.0.1:{free_port()}/"
    done = msunmerged("check", env=env, timeout=300)
    got = results(done.stdout)
    assert got["ledger database"][0] == "FAILED" and done.returncode == EXIT_UNAVAILABLE, done.stdout


def test_a_condor_pool_and_its_token(tmp_path: Path, web: FakeCMSWeb, registered: RucioServer, mongo_url: str,
                                    condor_pool) -> None:  # type: ignore[no-untyped-def]
    """The machine's HTCondor pool: the submitter's token passes the preflight; an empty token folder is refused."""
    env = instance(tmp_path, web, registered, mongo_url, JOBS__BACKEND="condor", CONDOR__POOL="127.0.0.1:9618",
                   CONDOR__TOKEN_DIR=str(condor_pool.token_dir("submitter")), CONDOR__PING_TIMEOUT_S="15")
    done = msunmerged("check", env=env, timeout=300)
    assert done.returncode == EXIT_OK and "preflight passed: condor" in done.stdout, done.stdout + done.stderr
    (tmp_path / "no-tokens").mkdir(mode=0o700)
    env["MSUNMERGED_CONDOR__TOKEN_DIR"] = str(tmp_path / "no-tokens")
    done = msunmerged("check", env=env, timeout=300)
    got = results(done.stdout)
    assert got["batch backend"][0] == "FAILED" and done.returncode == EXIT_AUTH, done.stdout


def test_cmsweb_over_https_and_its_certificate(tmp_path: Path, wmcore_fixtures: Path, registered: RucioServer,
                                               mongo_url: str) -> None:
    """ConMon and WMStats behind a front end that requires a client certificate of its CA: the robot's passes and
    its end date is shown; an expired one is named before anything connects, and ConMon refuses it (exit 4)."""
    ca = TestCA(tmp_path / "pki")
    server, robot, expired = ca.issue("cmsweb test", server=True), ca.issue("robot"), ca.issue("old", expired=True)
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(server.cert, server.key)
    tls.load_verify_locations(ca.ca_file)
    tls.verify_mode = ssl.CERT_REQUIRED
    with FakeCMSWeb.from_fixtures(wmcore_fixtures, tls=tls) as web:
        env = instance(tmp_path, web, registered, mongo_url, AUTH__CERT=str(robot.cert), AUTH__KEY=str(robot.key),
                       AUTH__CA_PATH=str(ca.ca_file))
        done = msunmerged("check", env=env, timeout=300)
        got = results(done.stdout)
        assert done.returncode == EXIT_OK, done.stdout + done.stderr
        assert got["CMSWEB credential"][0] == "ok" and "auth.cert until " in got["CMSWEB credential"][1]
        assert got["ConMon"][0] == got["WMStats"][0] == "ok" and web.peers and set(web.peers) == {"robot"}
        env.update(MSUNMERGED_AUTH__CERT=str(expired.cert), MSUNMERGED_AUTH__KEY=str(expired.key))
        done = msunmerged("check", env=env, timeout=300)
        got = results(done.stdout)
    assert got["CMSWEB credential"][0] == "FAILED" and "expired at" in got["CMSWEB credential"][1], done.stdout
    assert got["ConMon"][0] == "FAILED" and done.returncode == EXIT_AUTH, done.stdout
