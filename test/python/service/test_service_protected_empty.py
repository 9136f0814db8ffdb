"""An empty protected list from WMStats (or Tier-0 WMStats), as it answers while restarting, is the guard
docs/operations.md names, `protected_list_empty`: the RSE is guarded, nothing is planned or submitted (it still
fails closed), and the reason is not the malformed-answer `wmstats_bad_content`.

run_once against a real SecantusDB, the real LocalBackend, and WMStats served over HTTP (servers.http_fakes).
"""
from __future__ import annotations

import pytest
from pathlib import Path
from pymongo.database import Database

from MSUnmerged.config import AuthConfig, WMStatsConfig
from MSUnmerged.sources.offline import OfflineSources
from MSUnmerged.sources.wmstats import WMStatsClient
from servers.http_fakes import FakeCMSWeb
from service_kit import write_sources
from test_service_run import RSE, make_service

pytestmark = pytest.mark.integration


class WMStatsSources(OfflineSources):
    """Offline sources whose protected list is read over HTTP from a server playing both WMStats."""

    def __init__(self, directory: Path, web: FakeCMSWeb) -> None:
        super().__init__(directory)
        self.wmstats = WMStatsClient(WMStatsConfig(url=web.wmstats_url, t0_url=web.t0_url, retries=0,
                                                   backoff_s=0.01), AuthConfig())

    def protected(self) -> list[str]:
        return self.wmstats.protected_lfns()


@pytest.mark.parametrize("endpoint", ["protectedlfns", "t0/protectedlfns"])
def test_an_empty_protected_list_guards_the_rse(tmp_path: Path, mongo_db: Database, endpoint: str) -> None:
    src = write_sources(tmp_path / "src", [RSE], files=200)
    with FakeCMSWeb() as web:
        web.protected = web.t0_protected = ["/store/unmerged/A/B/RAW/proc-v1"]  # the other source answers a list
        web.fault(endpoint, body=b'{"result": []}')
        svc = make_service(tmp_path, mongo_db, src, sources=WMStatsSources(src, web))
        try:
            result = svc.runner.run_once(RSE)
        finally:
            svc.stop()
    assert (result.state, result.reason) == ("guarded", "protected_list_empty"), result
    doc = svc.ledger.base.rse(RSE)
    assert (doc["state"], doc["reason"]) == ("guarded", "protected_list_empty")
    assert result.submitted == 0 and mongo_db.jobs.count_documents({}) == 0
    assert svc.runner.jobs.backend.submissions() == []
