"""The worker reads site configurations as CMS's own parser does: WMCore's RucioFileCatalog, TrivialFileCatalog
and SiteLocalConfig (PyPI `wmcore`, installed without its dependencies into a folder of its own) against the
worker's storage and siteconf modules, on every real site's fixture, every protocol and a set of LFNs.

The worker's PFN is WMCore's after the normalisation it documents (pfn.normalise: `file:/p`, repeated slashes);
the raw forms that differ are listed by the test so that none goes unnoticed."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from MSUnmerged.worker import pfn, siteconf, storage
from sites_kit import CASES, LFNS, VANDERBILT_TFC, tfc_protocols
from wmcore_kit import ask

pytestmark = [pytest.mark.integration, pytest.mark.slow]

# Not "/store/unmerged/" itself: WMCore leaves "$1" in a result whose group is empty; the worker maps a probe
# name below it instead (pfn.unmerged_root).
PROBES = LFNS + ["/store/unmerged/msunmerged-root-probe", "/store/temp/user/jdoe/a.root",
                 "/store/data/Run2024F/Muon0/AOD/v1/000/380/001/a.root", "/store/test/xrootd/T1_DE_KIT/store/mc/a.root",
                 "/store/unmerged/SAM/testSRM/SAM-dcache07.unl.edu/x.root", "/store/user/jdoe/x.root",
                 "/store/unmerged/logs/prod/2024/1/1/x.tar", "/store/PhEDEx_LoadTest07/LoadTest07_FNAL_A_B_C"]
# Answers a list of requests (stdin, JSON) with WMCore's own code; one JSON list on stdout.
WMCORE = """
import json, os, sys
from WMCore.Storage.RucioFileCatalog import readRFC
from WMCore.Storage.SiteLocalConfig import SiteLocalConfig
from WMCore.Storage.TrivialFileCatalog import readTFC

def answer(req):
    if req["kind"] == "rfc":
        rfc = readRFC(req["file"], req["site"], req["volume"], req["protocol"])
        return [rfc.matchLFN(req["protocol"], lfn) for lfn in req["lfns"]]
    if req["kind"] == "tfc":
        tfc = readTFC(req["file"])
        return [tfc.matchLFN(req["protocol"], lfn) for lfn in req["lfns"]]
    os.environ["SITECONFIG_PATH"] = req["siteconfig"]
    cfg = SiteLocalConfig(req["file"])
    return {"site": cfg.siteName, "subsite": cfg.subSiteName, "stageOuts": cfg.stageOuts,
            "local": cfg.localStageOut, "fallback": cfg.fallbackStageOut}

out = []
for req in json.load(sys.stdin):
    try:
        out.append(answer(req))
    except Exception as exc:
        out.append({"error": "%s: %s" % (type(exc).__name__, exc)})
print(json.dumps(out))
"""


def same_pfns(ours: list[Any], theirs: list[Any], where: str, raw: list[str]) -> None:
    for lfn, mine, wm in zip(PROBES, ours, theirs):
        assert mine == (None if wm is None else pfn.normalise(wm)), f"{where} {lfn}: worker {mine}, WMCore {wm}"
        if wm is not None and wm != mine:
            raw.append(f"{where} {lfn}: {wm}")


def test_storage_json_pfns_equal_wmcores(site_fixtures: Path, wmcore: str) -> None:
    requests, ours = [], []
    for path in sorted(site_fixtures.rglob("storage*.json")):
        entries = storage.load_storage_json(str(path))
        for entry in entries:
            catalog = storage.catalog_for(entries, entry["site"], entry["volume"], str(path))
            assert catalog is not None
            for proto in entry["protocols"]:
                name = proto["protocol"]
                requests.append({"kind": "rfc", "file": str(path), "site": entry["site"], "volume": entry["volume"],
                                 "protocol": name, "lfns": PROBES})
                ours.append((f"{path.relative_to(site_fixtures)} {entry['volume']} {name}",
                             [_normalised(catalog.pfn(name, lfn)) for lfn in PROBES]))
    raw: list[str] = []
    for (where, mine), theirs in zip(ours, ask(wmcore, WMCORE, requests)):
        assert not isinstance(theirs, dict), f"{where}: {theirs}"
        same_pfns(mine, theirs, where, raw)
    assert len(requests) >= 30
    # The raw forms normalisation changes: a prefix that ends in '/' (KIT's XRootD) and `file:/` (CMSRucio's nfs).
    assert raw and all("//" in line.split(": ", 1)[1].split("://", 1)[-1] or "file:/" in line for line in raw), raw


def test_trivial_file_catalog_pfns_equal_wmcores(site_fixtures: Path, wmcore: str, tmp_path: Path) -> None:
    vanderbilt = tmp_path / "vanderbilt-storage.xml"
    vanderbilt.write_text(VANDERBILT_TFC)
    requests, ours = [], []
    for path in [*sorted(site_fixtures.rglob("storage.xml")), vanderbilt]:
        catalog, _ = storage.load_tfc(f"trivialcatalog_file:{path}?protocol=direct", {})
        for proto in tfc_protocols(path.read_text()):
            name = proto["protocol"]
            requests.append({"kind": "tfc", "file": str(path), "protocol": name, "lfns": PROBES})
            ours.append((f"{path.name} {name}", [_normalised(catalog.pfn(name, lfn)) for lfn in PROBES]))
    raw: list[str] = []
    for (where, mine), theirs in zip(ours, ask(wmcore, WMCORE, requests)):
        assert not isinstance(theirs, dict), f"{where}: {theirs}"
        same_pfns(mine, theirs, where, raw)
    assert any("/store//unmerged/" in line for line in raw)  # Vanderbilt's form, normalised by the worker


def test_site_local_config_methods_equal_wmcores(site_fixtures: Path, wmcore: str, tmp_path: Path) -> None:
    """Every published site-local-config.xml: the same stage-out methods, in the same order, with the same
    volume, protocol, command, option and storage site; the same legacy local and fallback stage-outs."""
    cases = {(c.tree[k], c.name): c for c in CASES for k in c.tree if k.endswith("site-local-config.xml")}
    requests, ours = [], []
    for (fixture, name), case in sorted(cases.items()):
        sc = case.build(tmp_path / name)
        path = site_fixtures / fixture
        requests.append({"kind": "slc", "file": str(path), "siteconfig": str(sc)})
        ours.append((fixture, siteconf.parse(str(path))))
    checked = 0
    for (fixture, cfg), theirs in zip(ours, ask(wmcore, WMCORE, requests)):
        if "error" in theirs:  # WMCore reads a stage-out's RSE from storage.json, and fails without one
            assert fixture.startswith("T3_US_Vanderbilt") and "storage.json" in theirs["error"], theirs
            continue
        assert (cfg.site, cfg.subsite) == (theirs["site"], theirs["subsite"])
        methods = [m for m in cfg.methods if m.kind == "method"]
        assert [(m.volume, m.protocol, m.command, m.option or None, m.storage_site) for m in methods] == \
            [(s["volume"], s["protocol"], s["command"], s["option"], s["storageSite"]) for s in theirs["stageOuts"]]
        local = [m for m in cfg.methods if m.kind == "local-stage-out"]
        assert [(m.command, m.catalog, m.phedex_node) for m in local] == \
            [(theirs["local"].get("command"), theirs["local"].get("catalog"), theirs["local"].get("phedex-node"))]
        fallback = [m for m in cfg.methods if m.kind == "fallback-stage-out"]
        assert [(m.command, m.lfn_prefix, m.phedex_node) for m in fallback] == \
            [(f.get("command"), f.get("lfn-prefix"), f.get("phedex-node")) for f in theirs["fallback"]]
        checked += 1
    assert checked >= 5


def _normalised(got: Any) -> Any:
    return None if got is None else pfn.normalise(got)
