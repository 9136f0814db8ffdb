"""wiring.build_service from the configuration alone: OfflineSources, the ledger on the test server, and
two RSEs routed to two sites, each run by its own LocalBackend with that site's configuration."""
from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from pymongo import MongoClient

from MSUnmerged.config import Config
from MSUnmerged.jobs.local import LocalBackend
from MSUnmerged.sources.offline import RSE_ATTRIBUTES_FILE, OfflineSources, dump_file
from MSUnmerged.wiring import build_service
from MSUnmerged.ledger import FileState, Ledger
from service_kit import files_left, make_site, write_sources

pytestmark = pytest.mark.integration
RSES = ["T2_XX_Alpha_Disk", "T2_YY_Beta"]


def test_build_service_routes_two_rses_to_two_sites(tmp_path: Path, mongo_url: str, mongo_client: MongoClient) -> None:
    src = write_sources(tmp_path / "src", RSES, files=300)
    config = Config()
    config.service.state_dir = str(tmp_path / "state")
    config.service.dry_run = False
    config.planner.files_per_job = 100
    config.mongo.url = mongo_url
    config.mongo.database = f"wiring_{uuid.uuid4().hex[:8]}"
    config.jobs.backend = "local"
    storages = {rse: make_site(tmp_path, src, rse, config) for rse in RSES}
    for rse in RSES:  # LocalBackend.from_config finds a site's configuration through any RSE of that site
        config.jobs.sites[rse].site = rse.split("_Disk")[0]
    try:
        with build_service(config, sources=OfflineSources(src)) as svc:
            results = {rse: svc.runner.run_once(rse, wait_s=60) for rse in RSES}
            routed = dict(svc.runner.jobs.backend._backends)  # type: ignore[attr-defined]
            db = svc.ledger.base.db
            for rse in RSES:
                assert results[rse].action == "new_generation" and results[rse].submitted > 0, results[rse]
                deleted = {d["lfn"] for d in Ledger(db).reads.file_records(rse, state="deleted")}
                assert deleted and deleted == {d["lfn"] for d in Ledger(db).reads.file_records(rse)}
                everything = set(dump_file(src, rse).read_text().split())
                assert files_left(storages[rse]) == everything - deleted
                assert {j["site"] for j in db.jobs.find({"rse": rse})} == {config.jobs.sites[rse].site}
        assert sorted(routed) == sorted(("local", config.jobs.sites[rse].site) for rse in RSES)
        assert all(isinstance(b, LocalBackend) for b in routed.values())
        assert {b.siteconfig for b in routed.values()} == {config.jobs.sites[rse].siteconfig for rse in RSES}
    finally:
        mongo_client.drop_database(config.mongo.database)


def test_site_from_the_rse_attribute_where_configured(tmp_path: Path, mongo_url: str,
                                                       mongo_client: MongoClient) -> None:
    """jobs.site_attribute: the RSE's attribute (here the offline sources' rse_attributes.json) names the site
    its jobs carry and the backend they are routed to; the worker there accepts them as its site's."""
    rse = "T2_XX_Gamma_Disk"
    src = write_sources(tmp_path / "src", [rse], files=120)
    (src / RSE_ATTRIBUTES_FILE).write_text(json.dumps({rse: {"site": "T2_ZZ_Moved", "tier": "2"}}))
    config = Config()
    config.service.state_dir = str(tmp_path / "state")
    config.service.dry_run = False
    config.mongo.url = mongo_url
    config.mongo.database = f"wiring_{uuid.uuid4().hex[:8]}"
    config.jobs.site_attribute = "site"
    storage = make_site(tmp_path, src, rse, config)  # its site-local-config.xml names T2_ZZ_Moved
    try:
        with build_service(config, sources=OfflineSources(src)) as svc:
            result = svc.runner.run_once(rse, wait_s=60)
            assert result.action == "new_generation" and result.submitted > 0, result
            assert {j["site"] for j in svc.ledger.base.db.jobs.find({"rse": rse})} == {"T2_ZZ_Moved"}
            assert list(svc.runner.jobs.backend._backends) == [("local", "T2_ZZ_Moved")]  # type: ignore[attr-defined]
            deleted = {d["lfn"] for d in svc.ledger.reads.file_records(rse, state=FileState.DELETED)}
            assert deleted and files_left(storage) == set(dump_file(src, rse).read_text().split()) - deleted
    finally:
        mongo_client.drop_database(config.mongo.database)
