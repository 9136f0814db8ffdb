"""Real CMS sites, configured as published, cleaned end to end by `msunmerged run` (dry run, local backend).

Each site of sites_kit: its SITECONF tree from test/fixtures/sites; the RSE registered in the real Rucio
server as CMS's CMSRSE.py registers it from the site's storage (deletion over WebDAV first, `cmstfc`), so
Rucio answers the service with the WebDAV (or, TFC-era, SRM) delete PFN; ConMon and WMStats over HTTP. The
jobs' workers choose the site's method that serves that PFN and reach the storage: every planned file is
looked at (`gfal-stat`, as every file is before it is deleted) at a PFN below Rucio's and is `would_delete`,
nothing is refused.

The sites' storage cannot run here, and a test must never reach a real site: on the jobs' PATH, `gfal-stat` is
a stand-in for the site's door, answering as gfal-stat does for a file written before the scan and recording
every URL it was asked about (the real gfal-rm is there too: a dry run never runs it). Sites whose Rucio door is
WebDAV are looked at by the worker's own WebDAV client: there the door's scheme, host and port are replaced, in the
site's files and in Rucio, by a local WsgiDAV holding the files (SiteCase.behind); the rest stays as published.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Iterator
from urllib.parse import urlsplit

import pytest

from cli_kit import cli_env, msunmerged
from servers import run_script
from servers.http_fakes import FakeCMSWeb
from servers.rucio import ROOT_PASS, ROOT_USER, RucioServer
from servers.webdav import WebDavServer
from sites_kit import CASES, LFNS, PROTECTED, SiteCase, register

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture(scope="module")
def web() -> Iterator[FakeCMSWeb]:
    run_script("storage-tools.sh")  # gfal-rm, the tool of the sites' WebDAV and SRM stage-out methods
    web = FakeCMSWeb()
    web.protected = list(PROTECTED)
    with web:
        yield web


# The site's door as gfal-stat shows a file (gfal2-util's format, times in UTC), long before any scan.
STAT = """#!/bin/sh
for url; do :; done
echo "$url" >> "{log}"
printf '  File: %s\\n  Size: 1\\tregular file\\n' "$url"
printf 'Access: 2020-01-01 00:00:00.000000\\nModify: 2020-01-01 00:00:00.000000\\nChange: 2020-01-01 00:00:00.000000\\n'
"""


def _door(work: Path) -> str:
    """A PATH whose gfal-stat is the stand-in; it records the URLs in <work>/door/looked-at.txt."""
    (work / "door").mkdir()
    (work / "door" / "gfal-stat").write_text(STAT.format(log=work / "door" / "looked-at.txt"))
    (work / "door" / "gfal-stat").chmod(0o755)
    return f"{work / 'door'}:{os.environ.get('PATH', '/usr/bin:/bin')}"


def _config(work: Path, case: SiteCase, web: FakeCMSWeb, rucio: RucioServer, siteconf: Path) -> dict[str, str]:
    (work / "rucio.pw").write_text(ROOT_PASS + "\n")
    env = cli_env(work, RUCIO__HOST=rucio.url, RUCIO__AUTH_HOST=rucio.url, RUCIO__ACCOUNT="root",
                  RUCIO__AUTH_TYPE="userpass", RUCIO__USERNAME=ROOT_USER, RUCIO__PASSWORD_FILE=str(work / "rucio.pw"),
                  PLANNER__RSE_EXPRESSION=case.rse)
    env["PATH"] = _door(work)
    Path(env["MSUNMERGED_CONFIG"]).write_text(f"""
[conmon]
url = "{web.conmon_url}"
[wmstats]
url = "{web.wmstats_url}"
[jobs.sites.{case.rse}]
site = "{case.site}"
siteconfig = "{siteconf}"
""")
    return env


def _json(*args: str, env: dict[str, str]) -> Any:
    """A command's --json output: `jobs` answers one envelope, `files` one JSON object a line."""
    done = msunmerged(*args, "--json", env=env)
    assert done.returncode == 0, done.stderr
    if args[0] == "files":
        return [json.loads(line) for line in done.stdout.splitlines()]
    return json.loads(done.stdout)["result"]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_site_as_published_gets_its_jobs_to_the_storage(case: SiteCase, web: FakeCMSWeb, rucio_server: RucioServer,
                                                        wsgidav_server: WebDavServer, tmp_path: Path) -> None:
    webdav = case.rucio_pfn.startswith("davs://")
    if webdav:  # the worker's own WebDAV client looks: Rucio's door is the local WsgiDAV holding the files
        case = case.behind(wsgidav_server.url)
        below = urlsplit(case.rucio_pfn).path
        for lfn in LFNS:
            path = wsgidav_server.data / below.strip("/") / lfn[len("/store/unmerged/"):]
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(b"x")
            os.utime(path, (1577836800, 1577836800))  # 2020-01-01, long before any scan
    register(rucio_server.admin_client(), case)
    rucio = rucio_server.source(tmp_path)
    assert rucio.unmerged_pfn(case.rse) == case.rucio_pfn  # Rucio answers as CMS's does
    siteconf = case.build(tmp_path / "SITECONF")
    web.add_rse(case.rse, LFNS)
    env = _config(tmp_path, case, web, rucio_server, siteconf)

    ran = msunmerged("run", "--rse", case.rse, "--wait", "120", env=env, timeout=300)
    assert ran.returncode == 0, ran.stderr
    assert json.loads(ran.stdout)["action"] == "new_generation"

    planned = [lfn for lfn in LFNS if not lfn.startswith(PROTECTED[0] + "/")]
    files = {f["lfn"]: f for f in _json("files", "--rse", case.rse, "--limit", "0", env=env)}
    assert {lfn: f["state"] for lfn, f in files.items()} == {lfn: "would_delete" for lfn in planned}
    jobs = _json("jobs", "--rse", case.rse, env=env)
    assert jobs and all(j["exit_code"] == 0 for j in jobs), jobs
    for job in jobs:
        method = job["method"]
        assert (method.get("protocol") or method["kind"], method["choice"]["rule"]) == case.chosen
        assert method["choice"]["rucio_pfn"] == case.rucio_pfn
        assert method["deleter"] == ("webdav" if webdav else "gfal-rm")
    lines = [json.loads(x) for report in (tmp_path / "state" / "reports" / case.rse).glob("*.jsonl")
             for x in report.read_text().splitlines()]
    reported = {x["lfn"]: x for x in lines if "lfn" in x}
    assert set(reported) == set(planned)
    root = jobs[0]["method"]["unmerged_pfn"]
    for lfn, line in reported.items():
        assert (line["outcome"], line["reason"]) == ("dry_run", None), line
        assert line["pfn"] == root + lfn[len("/store/unmerged/"):]
    if webdav:  # a dry run: every file still there, and the worker wrote nothing (no probe)
        assert all((wsgidav_server.data / urlsplit(x["pfn"]).path.strip("/")).exists() for x in reported.values())
        assert not [p for p in (wsgidav_server.data / urlsplit(root).path.strip("/")).iterdir() if "probe" in p.name]
    else:  # the storage was asked about exactly these files, at those PFNs
        looked = (tmp_path / "door" / "looked-at.txt").read_text().split()
        assert sorted(looked) == sorted(x["pfn"] for x in reported.values())
    assert {x["dir"]: x["outcome"] for x in lines if "dir" in x} and \
        {x["outcome"] for x in lines if "dir" in x} <= {"dry_run"}
