"""Several processes on one embedded database: a CLI command next to `serve`, two `run`s at once.

Real processes (the installed launcher), the real SecantusDB and ConMon/WMStats served over HTTP.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Iterator

import pytest

from cli_kit import cli_env, msunmerged, recorded_server, servers_on, start
from MSUnmerged.cli import EXIT_INTERRUPTED, EXIT_OK
from MSUnmerged.embedded_mongo import EmbeddedMongo, EmbeddedMongoError
from MSUnmerged.samplesite import DEMO_RSE, DEMO_SITE
from MSUnmerged.sources.offline import PROTECTED_FILE, dump_file
from rest.rest_kit import offline_site
from servers import free_port
from servers.http_fakes import FakeCMSWeb
from servers.rucio import ROOT_PASS, ROOT_USER, RucioServer, add_cms_rse

pytestmark = pytest.mark.integration

# Upper case: the generic schema of the test Rucio server takes no other RSE names.
RSES = ("T2_XX_CLISHAREDA", "T2_XX_CLISHAREDB")
COUNTRY = "XD"  # only these RSEs on the session's shared Rucio server


@pytest.fixture(scope="module")
def rucio_rses(rucio_server: RucioServer) -> RucioServer:
    """The two RSEs in the real Rucio server: the service asks it for the RSE list and, for every job,
    the PFN of /store/unmerged/ (a run without an answer submits nothing)."""
    admin = rucio_server.admin_client()
    for rse in RSES:
        add_cms_rse(admin, rse, site=DEMO_SITE, country=COUNTRY, posix=True)
    return rucio_server


@pytest.fixture()
def site(tmp_path: Path, rucio_rses: RucioServer) -> Iterator[tuple[FakeCMSWeb, dict[str, str]]]:
    """ConMon and WMStats serving two RSEs on the sample site (dry run), the real Rucio server, and the
    commands' environment."""
    sources, _, siteconf = offline_site(tmp_path)
    web = FakeCMSWeb()
    web.protected = json.loads((sources / PROTECTED_FILE).read_text())["result"]
    lfns = dump_file(sources, DEMO_RSE).read_text().split()
    for rse in RSES:
        web.add_rse(rse, lfns)
    sites = "".join(f'[jobs.sites.{rse}]\nsite = "{DEMO_SITE}"\nsiteconfig = "{siteconf}"\n' for rse in RSES)
    with web:
        (tmp_path / "rucio.pw").write_text(ROOT_PASS + "\n")
        env = cli_env(tmp_path, REST__PORT=str(free_port()), RUCIO__HOST=rucio_rses.url,
                      RUCIO__AUTH_HOST=rucio_rses.url, RUCIO__ACCOUNT="root", RUCIO__AUTH_TYPE="userpass",
                      RUCIO__USERNAME=ROOT_USER, RUCIO__PASSWORD_FILE=str(tmp_path / "rucio.pw"),
                      PLANNER__RSE_EXPRESSION=f"country={COUNTRY}", GUARDS__CHECK_LINE_COUNT="false")
        Path(env["MSUNMERGED_CONFIG"]).write_text(f"""
[conmon]
url = "{web.conmon_url}"
[wmstats]
url = "{web.wmstats_url}"
{sites}""")
        yield web, env


def http_status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=10) as answer:
            return answer.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:  # not listening yet
        return 0


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)


def wait_for(cond, timeout: float, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, what
        time.sleep(0.1)


def test_cli_next_to_serve_uses_its_database(site: tuple[FakeCMSWeb, dict[str, str]], tmp_path: Path) -> None:
    _, env = site
    state = tmp_path / "state"
    status_url = f"http://127.0.0.1:{env['MSUNMERGED_REST__PORT']}/ms-unmerged/data/status"
    # serve's own polling loop leaves the two RSEs to the commands run next to it.
    serve = start("serve", env={**env, "MSUNMERGED_PLANNER__SKIP_RSES": ",".join(RSES)}, log=tmp_path / "serve.log")
    try:
        wait_for(lambda: serve.poll() is None and recorded_server(state) is not None
                 and http_status(status_url) == 200, 90, "serve did not come up")
        server = recorded_server(state)
        # Short commands and a whole `run` next to it: each one attaches to serve's database.
        looked = msunmerged("status", env=env)
        assert looked.returncode == 0 and looked.stderr == "", looked.stderr  # no line about the database it used
        ran = msunmerged("run", "--rse", RSES[0], "--wait", "60", env=env)
        assert ran.returncode == 0, ran.stderr
        assert json.loads(ran.stdout)["action"] == "new_generation"
        listed = msunmerged("status", env=env)
        assert listed.returncode == 0 and RSES[0] in listed.stdout
        assert "left running" not in ran.stderr  # serve started it: leaving it to serve is nothing to report
        assert recorded_server(state) == server and servers_on(state) == [server["pid"]]
        assert http_status(status_url) == 200  # the service still reaches its ledger
    finally:
        stop(serve)
    assert serve.returncode == EXIT_OK, (tmp_path / "serve.log").read_text()[-2000:]  # SIGTERM: a clean stop
    assert servers_on(state) == [] and recorded_server(state) is None  # its last user stopped it


def test_two_runs_share_one_database(site: tuple[FakeCMSWeb, dict[str, str]], tmp_path: Path) -> None:
    """The first run starts the database and ends while the second still works: the second finishes."""
    web, env = site
    state = tmp_path / "state"
    first = start("run", "--rse", RSES[0], "--wait", "60", env=env, log=tmp_path / "first.log")
    second = None
    try:
        wait_for(lambda: any(r[0] == "stats" for r in web.requests), 60, "the first run never asked ConMon")
        web.fault("stats", delay_s=6, times=1)  # the second run is still at work when the first ends
        second = start("run", "--rse", RSES[1], "--wait", "60", env=env, log=tmp_path / "second.log")
        assert first.wait(90) == 0, (tmp_path / "first.log").read_text()[-2000:]
        first_log = (tmp_path / "first.log").read_text()
        assert second.poll() is None and "left running for its other users" in first_log
        assert second.wait(90) == 0, (tmp_path / "second.log").read_text()[-2000:]
    finally:
        for proc in (first, second):
            if proc is not None:
                stop(proc)
    for log in ("first.log", "second.log"):
        result = json.loads((tmp_path / f"{log}.out").read_text())
        assert result["action"] == "new_generation" and result["reason"] != "ledger_unavailable", result
    assert servers_on(state) == [] and recorded_server(state) is None


def test_server_of_killed_users_is_stale_and_replaced(tmp_path: Path) -> None:
    """Its only user killed (-9): nobody holds the lock, so the next user stops that server and starts anew."""
    state = tmp_path / "state"
    owner = subprocess.Popen([sys.executable, "-c", "import sys, time; from MSUnmerged.embedded_mongo import "
                              "EmbeddedMongo; EmbeddedMongo(sys.argv[1]).start(); print('up', flush=True); "
                              "time.sleep(600)", str(state)], stdout=subprocess.PIPE, text=True,
                             env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert owner.stdout is not None and owner.stdout.readline() == "up\n"
    left = recorded_server(state)
    owner.kill()
    owner.wait(10)
    assert servers_on(state) == [left["pid"]]  # the server outlived its killed user
    server = EmbeddedMongo(state)
    server.start()
    try:
        assert servers_on(state) == [recorded_server(state)["pid"]] != [left["pid"]]
    finally:
        server.stop()
    assert servers_on(state) == []


def test_failed_start_leaves_nothing_running(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        with pytest.raises(EmbeddedMongoError, match="in use by another program"):
            EmbeddedMongo(tmp_path / "state", port=busy.getsockname()[1]).start(timeout=30)
    assert servers_on(tmp_path / "state") == [] and recorded_server(tmp_path / "state") is None
    with pytest.raises(EmbeddedMongoError, match="did not listen"):  # started, then given up: stopped
        EmbeddedMongo(tmp_path / "state").start(timeout=0.2)
    assert servers_on(tmp_path / "state") == [] and recorded_server(tmp_path / "state") is None


def test_terminated_command_stops_the_database_it_started(site: tuple[FakeCMSWeb, dict[str, str]],
                                                          tmp_path: Path) -> None:
    web, env = site
    state = tmp_path / "state"
    web.fault("stats", delay_s=30)  # the run waits on ConMon, its database up
    run = start("run", "--rse", RSES[0], env=env, log=tmp_path / "run.log")
    try:
        wait_for(lambda: any(r[0] == "stats" for r in web.requests), 60, "the run never asked ConMon")
        assert len(servers_on(state)) == 1
        run.send_signal(signal.SIGTERM)
        assert run.wait(30) == EXIT_INTERRUPTED, (tmp_path / "run.log").read_text()[-2000:]
    finally:
        stop(run)
    assert "Traceback" not in (tmp_path / "run.log").read_text()
    assert servers_on(state) == [] and recorded_server(state) is None
