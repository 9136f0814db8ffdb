"""Site configuration parsing on the real samples in test/fixtures/sites, used as they are."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from MSUnmerged.worker import siteconf, storage
from MSUnmerged.worker.cleanup import ConfigProblem, choose_method
from MSUnmerged.worker.manifest import Job, parse_manifest
from worker_kit import manifest, tool_path

LFN = "/store/unmerged/Run3Summer23DRPremix/TTtoLNu2Q/AODSIM/130X_v2/00000/F00D.root"
REL = LFN[1:]


@pytest.fixture(scope="module")
def siteconf_dir(site_fixtures: Path) -> Path:
    return site_fixtures


def test_every_fixture_file_parses(siteconf_dir: Path) -> None:
    xmls = sorted(siteconf_dir.rglob("site-local-config*.xml"))
    jsons = sorted(siteconf_dir.rglob("storage*.json"))
    tfcs = sorted(siteconf_dir.rglob("storage.xml"))
    assert len(xmls) + len(jsons) + len(tfcs) == len([p for p in siteconf_dir.rglob("*") if p.is_file()])
    for path in tfcs:
        catalog, _ = storage.load_tfc(f"trivialcatalog_file:{path}?protocol=direct", {})
        assert catalog.rules, path
    for path in xmls:
        cfg = siteconf.parse(str(path))
        assert cfg.site and cfg.methods, path
    for path in jsons:
        entries = storage.load_storage_json(str(path))
        for e in entries:
            cat = storage.catalog_for(entries, e["site"], e["volume"], str(path))
            assert cat is not None and set(cat.rules) == {p["protocol"] for p in e["protocols"]}


def test_kit_stage_out_methods(siteconf_dir: Path) -> None:
    cfg = siteconf.parse(str(siteconf_dir / "T1_DE_KIT" / "site-local-config.xml"))
    assert cfg.site == "T1_DE_KIT" and cfg.subsite is None
    kinds = [(m.kind, m.command, m.volume, m.protocol) for m in cfg.methods]
    # <method> without command: WMCore's default gfal2; then the legacy forms, in that order.
    assert kinds == [("method", "gfal2", "KIT_dCache", "WebDAV"), ("local-stage-out", "gfal2", "", ""),
                     ("fallback-stage-out", "gfal2", "", "")]
    local, fallback = cfg.methods[1], cfg.methods[2]
    assert local.catalog.endswith("storage_disk.xml?protocol=davs") and local.phedex_node == "T1_DE_KIT_Disk"
    assert fallback.lfn_prefix == "davs://dcache-cms-webdav-wan.desy.de:2880/pnfs/desy.de/cms/tier2"
    assert fallback.phedex_node == "T2_DE_DESY"
    chained = siteconf.parse(str(siteconf_dir / "T1_DE_KIT" / "site-local-config-chained.xml"))
    assert (chained.methods[0].volume, chained.methods[0].protocol) == ("KIT_MSS", "WebDAV")


def test_fnal_methods_with_commands_and_options(siteconf_dir: Path) -> None:
    cfg = siteconf.parse(str(siteconf_dir / "T1_US_FNAL" / "site-local-config-misc.xml"))
    assert cfg.site == "T1_US_FNAL"
    assert [(m.command, m.option, m.protocol) for m in cfg.methods if m.kind == "method"] == [
        ("xrdcp", "-p", "XRootD"), ("gfal2", "", "SRMv2"), ("gfal2", "", "WebDAV")]
    legacy = [m for m in cfg.methods if m.kind == "local-stage-out"]
    assert legacy[0].command == "test-copy" and legacy[0].phedex_node == "T1_US_FNAL_Disk"


KIT_EXPECTED = [
    ("KIT_dCache", "WebDAV", LFN, "davs://cmswebdav-kit-disk.gridka.de:2880/pnfs/gridka.de/cms/disk-only/" + REL),
    ("KIT_dCache", "XRootD", LFN, "root://cmsxrootd-kit-disk.gridka.de:1094//" + REL),
    ("KIT_dCache", "xrootd-module", LFN, "/pnfs/gridka.de/cms/disk-only/" + REL),
    ("KIT_dCache", "xrootd-module", "/store/test/xrootd/T1_DE_KIT/store/a.root",
     "/pnfs/gridka.de/cms/disk-only/store/a.root"),
    # Chained rules of the tape volume: pnfs first, then the protocol's own rule.
    ("KIT_MSS", "pnfs", LFN, "/pnfs/gridka.de/cms/tape/" + REL),
    ("KIT_MSS", "WebDAV", LFN, "davs://cmswebdav-kit-tape.gridka.de:2880/pnfs/gridka.de/cms/tape/" + REL),
    ("KIT_MSS", "SRMv2", LFN, "srm://cmssrm-kit-tape.gridka.de:8443/srm/managerv2?SFN=/pnfs/gridka.de/cms/tape/" + REL),
    ("KIT_MSS", "WebDAV", "/store/temp/user/x/y.root",
     "davs://cmswebdav-kit-tape.gridka.de:2880/pnfs/gridka.de/cms/disk-only/store/temp/user/x/y.root"),
]
DESY_EXPECTED = [
    ("pnfs", LFN, "/pnfs/desy.de/cms/tier2/unmerged/" + LFN[len("/store/unmerged/"):]),
    ("pnfs", "/store/temp/a.root", "/pnfs/desy.de/cms/tier2/temp/a.root"),
    ("pnfs", "/store/data/a.root", "/pnfs/desy.de/cms/tier2/store/data/a.root"),
    ("WebDAV", LFN, "davs://dcache-cms-webdav-wan.desy.de:2880/pnfs/desy.de/cms/tier2/unmerged/"
     + LFN[len("/store/unmerged/"):]),
    ("SRMv2", LFN, "srm://dcache-se-cms.desy.de:8443/srm/managerv2?SFN=/pnfs/desy.de/cms/tier2/unmerged/"
     + LFN[len("/store/unmerged/"):]),
    ("XRootD", LFN, "root://dcache-cms-xrootd.desy.de:1094//" + REL),
]
FNAL_EXPECTED = [
    ("FNAL_dCache_EOS", "XRootD", LFN, "root://cmsdcadisk.fnal.gov//dcache/uscmsdisk/" + REL),
    ("FNAL_dCache_EOS", "XRootD", "/store/temp/user/a.root", "root://cmseos.fnal.gov//eos/uscms/store/temp/user/a.root"),
    ("FNAL_dCache_EOS", "SRMv2", LFN, "srm://cmsdcadisk.fnal.gov:8443/srm/managerv2?SFN=/dcache/uscmsdisk/" + REL),
    ("FNAL_dCache_EOS", "WebDAV", LFN, "davs://cmsdcadisk.fnal.gov:2880/dcache/uscmsdisk/" + REL),
    ("FNAL_MSS", "SRMv2", LFN, "srm://cmsdcatape.fnal.gov:8443/srm/managerv2?SFN=/11/" + REL),
]


@pytest.mark.parametrize("volume,protocol,lfn,pfn", KIT_EXPECTED)
def test_kit_pfns(siteconf_dir: Path, volume: str, protocol: str, lfn: str, pfn: str) -> None:
    entries = storage.load_storage_json(str(siteconf_dir / "T1_DE_KIT" / "storage.json"))
    assert storage.catalog_for(entries, "T1_DE_KIT", volume).pfn(protocol, lfn) == pfn  # type: ignore[union-attr]


@pytest.mark.parametrize("protocol,lfn,pfn", DESY_EXPECTED)
def test_desy_pfns(siteconf_dir: Path, protocol: str, lfn: str, pfn: str) -> None:
    entries = storage.load_storage_json(str(siteconf_dir / "T2_DE_DESY" / "storage.json"))
    assert storage.catalog_for(entries, "T2_DE_DESY", "DESY_dCache").pfn(protocol, lfn) == pfn  # type: ignore[union-attr]


@pytest.mark.parametrize("volume,protocol,lfn,pfn", FNAL_EXPECTED)
def test_fnal_pfns(siteconf_dir: Path, volume: str, protocol: str, lfn: str, pfn: str) -> None:
    entries = storage.load_storage_json(str(siteconf_dir / "T1_US_FNAL" / "storage.json"))
    assert storage.catalog_for(entries, "T1_US_FNAL", volume).pfn(protocol, lfn) == pfn  # type: ignore[union-attr]


def test_rule_must_match_the_whole_path() -> None:
    import re
    cat = storage.Catalog({"p": [(re.compile(r"/+store/(\w+)"), "/x/$1", None),
                                 (re.compile(r"/+(.*)"), "/y/$1", None)]})
    # The first rule matches only the start of the LFN: it is skipped, never truncating the path.
    assert cat.pfn("p", "/store/unmerged/a.root") == "/y/store/unmerged/a.root"
    assert cat.pfn("p", "/store/abc") == "/x/abc"
    assert cat.pfn("nope", "/store/abc") is None


def _layout(tmp_path: Path, fixtures: Path, xml: str, storage_json: str, site: str) -> Path:
    """A SITECONFIG_PATH tree holding fixture files (paths below test/fixtures/sites) unchanged."""
    sc = tmp_path / "SITECONF" / site
    (sc / "JobConfig").mkdir(parents=True)
    shutil.copyfile(fixtures / xml, sc / "JobConfig" / "site-local-config.xml")
    shutil.copyfile(fixtures / storage_json, sc / "storage.json")
    return sc


@pytest.fixture()
def fake_tools(tmp_path: Path) -> str:
    return tool_path(tmp_path / "bin")


def _job(rse: str, site: str) -> Job:
    m = manifest([LFN])
    m["rse"], m["site"] = rse, site
    return parse_manifest(m)


def test_choose_first_usable_method_fnal(tmp_path: Path, siteconf_dir: Path, fake_tools: str) -> None:
    sc = _layout(tmp_path, siteconf_dir, "T1_US_FNAL/site-local-config-misc.xml", "T1_US_FNAL/storage.json",
                 "T1_US_FNAL")
    got = choose_method(_job("T1_US_FNAL_Disk", "T1_US_FNAL"), {"SITECONFIG_PATH": str(sc), "PATH": fake_tools}, LFN)
    assert (got.method.protocol, got.method.command, got.deleter.name, got.rule) == ("XRootD", "xrdcp", "xrootd",
                                                                                     "first_usable")
    assert got.mapper(LFN) == "root://cmsdcadisk.fnal.gov//dcache/uscmsdisk/" + REL
    assert got.deleter.split(got.mapper(LFN)) == ("root://cmsdcadisk.fnal.gov", "/dcache/uscmsdisk/" + REL)


def test_kit_chained_tape_method_only_for_the_tape_rse(tmp_path: Path, siteconf_dir: Path, fake_tools: str) -> None:
    sc = _layout(tmp_path, siteconf_dir, "T1_DE_KIT/site-local-config-chained.xml", "T1_DE_KIT/storage.json",
                 "T1_DE_KIT")
    env = {"SITECONFIG_PATH": str(sc), "PATH": fake_tools}
    got = choose_method(_job("T1_DE_KIT_Tape", "T1_DE_KIT"), env, LFN)
    assert got.method.volume == "KIT_MSS" and got.deleter.name == "webdav"  # WebDAV: the worker's own client
    assert got.mapper(LFN) == "davs://cmswebdav-kit-tape.gridka.de:2880/pnfs/gridka.de/cms/tape/" + REL
    # A job for the disk RSE never deletes through the tape endpoint, nor through DESY's fallback.
    with pytest.raises(ConfigProblem) as err:
        choose_method(_job("T1_DE_KIT_Disk", "T1_DE_KIT"), env, LFN)
    assert "is RSE 'T1_DE_KIT_Tape', the job is for 'T1_DE_KIT_Disk'" in str(err.value)
    assert "is for 'T2_DE_DESY'" in str(err.value)


def test_legacy_local_stage_out_with_trivial_file_catalog(tmp_path: Path, siteconf_dir: Path, fake_tools: str) -> None:
    sc = _layout(tmp_path, siteconf_dir, "T1_DE_KIT/site-local-config-chained.xml", "T1_DE_KIT/storage.json",
                 "T1_DE_KIT")
    (sc / "PhEDEx").mkdir()
    (sc / "PhEDEx" / "storage_disk.xml").write_text(
        '<storage-mapping><lfn-to-pfn protocol="davs" path-match="/+store/(.*)" '
        'result="davs://cmswebdav-kit-disk.gridka.de:2880/pnfs/gridka.de/cms/disk-only/store/$1"/></storage-mapping>')
    got = choose_method(_job("T1_DE_KIT_Disk", "T1_DE_KIT"), {"SITECONFIG_PATH": str(sc), "PATH": fake_tools}, LFN)
    assert got.method.kind == "local-stage-out"
    assert got.mapper(LFN) == "davs://cmswebdav-kit-disk.gridka.de:2880/pnfs/gridka.de/cms/disk-only/" + REL


def test_site_mismatch_and_unknown_command(tmp_path: Path, siteconf_dir: Path, fake_tools: str) -> None:
    sc = _layout(tmp_path, siteconf_dir, "T1_US_FNAL/site-local-config-misc.xml", "T1_US_FNAL/storage.json",
                 "T1_US_FNAL")
    with pytest.raises(ConfigProblem, match="belongs to site 'T1_US_FNAL', the job is for 'T2_CH_CERN'"):
        choose_method(_job("T1_US_FNAL_Disk", "T2_CH_CERN"), {"SITECONFIG_PATH": str(sc), "PATH": fake_tools}, LFN)
    xml = sc / "JobConfig" / "site-local-config.xml"
    xml.write_text(xml.read_text().replace('command="xrdcp"', 'command="frobnicate"'))
    env = {"SITECONFIG_PATH": str(sc), "PATH": str(tmp_path / "empty")}
    # No tool on the node: only the WebDAV method, through the worker's own client, is usable.
    got = choose_method(_job("T1_US_FNAL_Disk", "T1_US_FNAL"), env, LFN)
    assert (got.method.protocol, got.deleter.name) == ("WebDAV", "webdav")
    passed = " | ".join(got.passed)
    assert "unknown stage-out command 'frobnicate'" in passed and "gfal-rm not found on PATH" in passed
    xml.write_text(xml.read_text().replace('protocol="WebDAV"/>', 'protocol="WebDAV" command="frobnicate"/>'))
    with pytest.raises(ConfigProblem) as err:
        choose_method(_job("T1_US_FNAL_Disk", "T1_US_FNAL"), env, LFN)
    assert "unknown stage-out command 'frobnicate'" in str(err.value)
    assert "unknown stage-out command 'test-copy'" in str(err.value)


def test_storage_json_of_a_subsite_is_one_level_up(tmp_path: Path, siteconf_dir: Path) -> None:
    site = tmp_path / "SITECONF" / "T1_DE_KIT"
    sub = site / "KIT-HoreKa"
    (sub / "JobConfig").mkdir(parents=True)
    shutil.copyfile(siteconf_dir / "T1_DE_KIT" / "storage.json", site / "storage.json")
    env = {"SITECONFIG_PATH": str(sub)}
    assert storage.storage_json_path(env, "T1_DE_KIT", "KIT-HoreKa", "T1_DE_KIT") == str(site / "storage.json")
    # No <subsite> element, but no storage.json here either: the parent's is used.
    assert storage.storage_json_path(env, "T1_DE_KIT", None, "T1_DE_KIT") == str(site / "storage.json")
    assert storage.storage_json_path({"SITECONFIG_PATH": str(site)}, "T1_DE_KIT", None, "T2_DE_DESY") == \
        str(tmp_path / "SITECONF" / "T2_DE_DESY" / "storage.json")


def test_missing_or_broken_site_config_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(siteconf.SiteConfigError, match="SITECONFIG_PATH is not set"):
        siteconf.locate({})
    with pytest.raises(siteconf.SiteConfigError, match="site-local-config not found"):
        siteconf.locate({"SITECONFIG_PATH": str(tmp_path)})
    bad = tmp_path / "bad.xml"
    bad.write_text("<site-local-config><site name='X'>")
    with pytest.raises(siteconf.SiteConfigError, match="cannot read site-local-config"):
        siteconf.parse(str(bad))
    assert siteconf.locate({"MSUNMERGED_SITE_LOCAL_CONFIG": str(bad)}) == str(bad)
