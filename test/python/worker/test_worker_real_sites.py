"""Real sites' published configurations (test/fixtures/sites, unchanged) against the PFN CMS's Rucio gives for
deletion: the worker deletes through the stage-out method that serves it, with PFNs inside the agreed root."""
from __future__ import annotations

from pathlib import Path

import pytest

from MSUnmerged.worker import pfn, siteconf, storage
from MSUnmerged.worker.cleanup import MappingDisagrees, choose_method
from MSUnmerged.worker.manifest import Job, parse_manifest
from sites_kit import BY_NAME, CASES, CERN, CERN_WEBDAV, DESY_WEBDAV, FNAL_WEBDAV, LFNS, SiteCase
from worker_kit import manifest, tool_path


def _job(case: SiteCase, rucio: str | None) -> Job:
    man = manifest(LFNS, unmerged_pfn=rucio, mapping_check="rucio" if rucio else "site_config_only")
    man["rse"], man["site"] = case.rse, case.site
    return parse_manifest(man)


def _env(case: SiteCase, tmp_path: Path, tools: tuple[str, ...] = ("xrdfs", "gfal-rm")) -> dict[str, str]:
    return {"SITECONFIG_PATH": str(case.build(tmp_path / "SITECONF")), "PATH": tool_path(tmp_path / "bin", tools)}


@pytest.mark.parametrize("case", CASES + [CERN], ids=[c.name for c in CASES + [CERN]])
def test_each_site_deletes_through_the_method_serving_rucios_pfn(case: SiteCase, tmp_path: Path) -> None:
    got = choose_method(_job(case, case.rucio_pfn), _env(case, tmp_path), LFNS[0])
    assert (got.method.protocol or got.method.kind, got.rule) == case.chosen, got.passed
    assert got.root is not None and pfn.same_place(got.root, case.rucio_pfn)
    assert pfn.root_problem(got.root, "standard", got.rule) is None
    for lfn in LFNS:
        mapped = got.mapper(lfn)
        assert mapped is not None and got.deleter.accepts(mapped)
        assert pfn.pfn_problem(mapped, lfn, got.root, "standard") is None, mapped
        assert mapped == pfn.normalise(case.rucio_pfn) + lfn[len("/store/unmerged/"):]


def test_fnal_webdav_needs_no_gfal2_tool(tmp_path: Path) -> None:
    """FNAL's WebDAV stage-out deletes through the worker's own WebDAV client (worker/webdav.py), with or without
    gfal2's tools on the node; its XRootD method (first) still names its WebDAV door as another protocol."""
    case = BY_NAME["T1_US_FNAL"]
    got = choose_method(_job(case, FNAL_WEBDAV), _env(case, tmp_path, ("xrdfs",)), LFNS[0])
    assert (got.method.protocol, got.rule, got.deleter.name) == ("WebDAV", "same_pfn", "webdav")
    assert "XRootD" in got.passed[0] and "root://cmsdcadisk.fnal.gov//dcache/uscmsdisk/store/unmerged/" in got.passed[0]
    # Without Rucio's PFN: the site's first method, as before.
    first = choose_method(_job(case, None), _env(case, tmp_path / "b"), LFNS[0])
    assert (first.method.protocol, first.rule) == ("XRootD", "first_usable")


@pytest.mark.parametrize("rucio", [
    "davs://cmsdcadisk.fnal.gov:2880/dcache/uscmsdisk/store/data/",  # another path of the same door
    "davs://cmsdcadisk2.fnal.gov:2880/dcache/uscmsdisk/store/unmerged/",  # another host
    "davs://cmsdcadisk.fnal.gov:443/dcache/uscmsdisk/store/unmerged/",  # another port of WebDAV
    "root://cmseos.fnal.gov//eos/uscms/store/unmerged/",  # EOS: no method maps /store/unmerged/ there
])
def test_fnal_refuses_a_rucio_pfn_no_method_agrees_with(rucio: str, tmp_path: Path) -> None:
    case = BY_NAME["T1_US_FNAL"]
    with pytest.raises(MappingDisagrees) as refused:
        choose_method(_job(case, rucio), _env(case, tmp_path), LFNS[0])
    assert "Rucio's is " + rucio in str(refused.value)
    assert refused.value.first.method.protocol == "XRootD"  # what the report's start line describes


def test_a_published_wrong_mapping_is_never_chosen(tmp_path: Path) -> None:
    """KIT's fallback stage-out to DESY maps /store/unmerged/ to .../tier2/store/unmerged/, not where DESY keeps
    it (.../tier2/unmerged/, Rucio's): only the method that agrees with Rucio is used."""
    case = BY_NAME["T2_DE_DESY-from-KIT"]
    env = _env(case, tmp_path)
    cfg = siteconf.parse(siteconf.locate(env))
    fallback = cfg.methods[-1]
    assert fallback.kind == "fallback-stage-out" and fallback.phedex_node == "T2_DE_DESY"
    mapper, _ = storage.method_mapper(fallback, cfg, env, "T2_DE_DESY")
    wrong = pfn.unmerged_root(mapper)  # type: ignore[arg-type]
    assert wrong == "davs://dcache-cms-webdav-wan.desy.de:2880/pnfs/desy.de/cms/tier2/store/unmerged/"
    assert pfn.choose([wrong], DESY_WEBDAV)[0] is None
    got = choose_method(_job(case, DESY_WEBDAV), env, LFNS[0])
    assert (got.method.kind, got.method.storage_site, got.rule) == ("method", "T2_DE_DESY", "same_pfn")
    # Without Rucio the root ends in /unmerged/ but nobody vouches for it: refused in the standard layout.
    alone = choose_method(_job(case, None), env, LFNS[0])
    assert pfn.root_problem(alone.root, "standard", alone.rule) is not None


def test_kit_disk_job_deletes_through_the_webdav_client_without_gfal2(tmp_path: Path) -> None:
    case = BY_NAME["T1_DE_KIT"]
    got = choose_method(_job(case, case.rucio_pfn), _env(case, tmp_path, ("xrdfs",)), LFNS[0])
    assert (got.method.protocol, got.deleter.name) == ("WebDAV", "webdav")


def test_kit_nfs_protocol_written_file_colon_slash(site_fixtures: Path) -> None:
    """CMSRucio's KIT example names its NFS mount `file:/grid/...` (one slash): normalised, it is a local path."""
    entries = storage.load_storage_json(str(site_fixtures / "T1_DE_KIT" / "storage-cmsrucio.json"))
    raw = storage.catalog_for(entries, "T1_DE_KIT", "KIT_dCache").pfn("nfs_v4.1", LFNS[0])  # type: ignore[union-attr]
    assert raw == "file:/grid/fzk.de/mounts/nfs4/data/cms/" + LFNS[0][1:]
    root = pfn.normalise(raw.replace(LFNS[0][len("/store/unmerged/"):], ""))
    assert root == "file:///grid/fzk.de/mounts/nfs4/data/cms/store/unmerged/"
    assert pfn.pfn_problem(pfn.normalise(raw), LFNS[0], root, "standard") is None
    assert pfn.same_place(root, "/grid/fzk.de/mounts/nfs4/data/cms/store/unmerged")


def test_cern_deletes_through_the_webdav_protocol_of_the_volume_rucio_names(tmp_path: Path) -> None:
    """cms-sw/siteconf's T2_CH_CERN stages out through XRootD at cms-xrd-global.cern.ch only: no stage-out method
    gives Rucio's WebDAV PFN (that was mapping_disagrees). Its CERN_EOS volume's WebDAV protocol maps
    /store/unmerged/ to exactly that PFN: the job deletes there with the worker's WebDAV client, and says so."""
    env = _env(CERN, tmp_path)
    cfg = siteconf.parse(siteconf.locate(env))
    staged = [m for m in cfg.methods if m.kind == "method"]
    assert [(m.volume, m.protocol, m.command) for m in staged] == [("CERN_EOS", "XRootD", "xrdcp")]
    mapper, _ = storage.method_mapper(staged[0], cfg, env, "T2_CH_CERN")
    xrootd = pfn.unmerged_root(mapper)  # type: ignore[arg-type]
    assert xrootd == "root://cms-xrd-global.cern.ch//eos/cms/store/unmerged/"
    assert pfn.choose([xrootd], CERN_WEBDAV)[0] is None  # the stage-out method alone disagrees with Rucio
    got = choose_method(_job(CERN, CERN_WEBDAV), env, LFNS[0])
    assert (got.method.kind, got.method.volume, got.method.protocol, got.rule) == ("volume", "CERN_EOS", "WebDAV",
                                                                                 "rucio_volume")
    assert got.deleter.name == got.method.command == "webdav"
    assert "XRootD" in " ".join(got.passed)
    # Another Rucio PFN (another door, or another path): still refused.
    for rucio in ("davs://eoscms2.cern.ch:443/eos/cms/store/unmerged/", "davs://eoscms.cern.ch:443/eos/cms/store/"):
        with pytest.raises(MappingDisagrees):
            choose_method(_job(CERN, rucio), _env(CERN, tmp_path / rucio[-10:].replace("/", "_")), LFNS[0])
