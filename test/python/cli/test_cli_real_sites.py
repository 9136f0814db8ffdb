"""Real CMS sites, configured as published, cleaned end to end by `msunmerged run` (dry run, local backend).

Each site of sites_kit: its SITECONF tree from test/fixtures/sites; the RSE registered in the real Rucio
server as CMS's CMSRSE.py registers it from the site's storage (deletion over WebDAV first, `cmstfc`), so
Rucio answers the service with the WebDAV (or, TFC-era, SRM) delete PFN; ConMon and WMStats over HTTP. The
jobs' workers choose the site's method that serves that PFN and reach the storage: every planned file is
`would_delete` at a PFN below Rucio's, nothing is refused. A dry run through gfal-rm looks at nothing
remote (the report says `checks: none`): no real site is ever contacted.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterator

import pytest

from cli_kit import cli_env, msunmerged
from servers import run_script
from servers.http_fakes import FakeCMSWeb
from servers.rucio import ROOT_PASS, ROOT_USER, RucioServer
from sites_kit import CASES, LFNS, PROTECTED, SiteCase, register

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture(scope="module")
def web() -> Iterator[FakeCMSWeb]:
    run_script("storage-tools.sh")  # gfal-rm, the tool of the sites' WebDAV and SRM stage-out methods
    web = FakeCMSWeb()
    web.protected = list(PROTECTED)
    with web:
        yield web


def _config(work: Path, case: SiteCase, web: FakeCMSWeb, rucio: RucioServer, siteconf: Path) -> dict[str, str]:
    (work / "rucio.pw").write_text(ROOT_PASS + "\n")
    env = cli_env(work, RUCIO__HOST=rucio.url, RUCIO__AUTH_HOST=rucio.url, RUCIO__ACCOUNT="root",
                  RUCIO__AUTH_TYPE="userpass", RUCIO__USERNAME=ROOT_USER, RUCIO__PASSWORD_FILE=str(work / "rucio.pw"),
                  PLANNER__RSE_EXPRESSION=case.rse)
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
                                                        tmp_path: Path) -> None:
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
        assert method["choice"]["rucio_pfn"] == case.rucio_pfn and method["checks"] == "none"
    lines = [json.loads(x) for report in (tmp_path / "state" / "reports" / case.rse).glob("*.jsonl")
             for x in report.read_text().splitlines()]
    reported = {x["lfn"]: x for x in lines if "lfn" in x}
    assert set(reported) == set(planned)
    root = jobs[0]["method"]["unmerged_pfn"]
    for lfn, line in reported.items():
        assert (line["outcome"], line["reason"]) == ("dry_run", None), line
        assert line["pfn"] == root + lfn[len("/store/unmerged/"):]
    assert {x["dir"]: x["outcome"] for x in lines if "dir" in x} and \
        {x["outcome"] for x in lines if "dir" in x} <= {"dry_run"}
