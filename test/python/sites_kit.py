"""Real CMS sites as the tests meet them: their published configuration files (test/fixtures/sites, copied
unchanged into a SITECONF tree), the RSE, and the PFN of /store/unmerged/ CMS's Rucio gives for deletion.

CMS registers an RSE's protocols from its storage.json (dmwm/CMSRucio `CMSRSE.py`): WebDAV, SRMv2 and XRootD
of access global-rw/global-ro, deletion priority WebDAV 1, SRMv2 2, XRootD 3; a protocol given by a `prefix`
maps an LFN to that prefix + LFN, one given by `rules` carries them (with its chains) to CMS's `cmstfc`
algorithm. `rucio_protocols` builds the same protocol definitions for the test Rucio server (whose `cmstfc`
is in test/scripts/rucio-server.sh); a TFC-era site's trivial file catalog is read the same way.
"""
from __future__ import annotations

import json
import re
import shutil
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from servers import REPO

SITE_FIXTURES = REPO / "test" / "fixtures" / "sites"  # real sites' configuration files, one folder per site

WEIGHTS = {"WebDAV": 1, "SRMv2": 2, "XRootD": 3}  # CMSRSE.py: read, write, delete and TPC priorities
DEFAULT_PORTS = {"gsiftp": 2811, "root": 1094, "davs": 443, "srm": 8443, "dav": 80}
_URL = re.compile(r"^(?P<scheme>\w+)://(?P<host>[A-Za-z0-9.-]+)(?::(?P<port>\d+))?(?P<rest>/.*)?$")
IMPL = "rucio.rse.protocols.gfal.Default"


@dataclass(frozen=True)
class SiteCase:
    """One site as a test meets it. `tree` maps paths in a SITECONF tree to fixture files (below
    test/fixtures/sites), copied unchanged; `written` holds files made by the test where the site's own is not
    published in the repositories the fixtures come from (test/fixtures/README.md)."""

    name: str
    rse: str
    site: str  # where the jobs run: the site named in the site-local-config.xml used
    tree: dict[str, str]
    siteconfig: str  # the jobs' SITECONFIG_PATH, below the SITECONF tree
    storage: tuple[str, str, dict[str, int]]  # what Rucio is registered from: (tree file, volume or "", protocols)
    rucio_pfn: str  # Rucio's delete PFN of /store/unmerged/ for the RSE, as CMSRSE.py registers it
    chosen: tuple[str, str]  # (protocol, or kind of a legacy method, the worker must choose; pfn.choose's rule)
    written: dict[str, str] = field(default_factory=dict)

    def build(self, root: Path) -> Path:
        """The SITECONF tree under `root`; returns the jobs' SITECONFIG_PATH."""
        for dest, source in self.tree.items():
            (root / dest).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(SITE_FIXTURES / source, root / dest)
        for dest, text in self.written.items():
            (root / dest).parent.mkdir(parents=True, exist_ok=True)
            (root / dest).write_text(text)
        for path in [root, *root.rglob("*")]:
            path.chmod(0o755 if path.is_dir() else 0o644)
        return root / self.siteconfig

    def rucio_protocols(self) -> list[dict[str, Any]]:
        """The RSE's protocols as CMS registers them, highest deletion priority first."""
        source, volume, weights = self.storage
        text = (SITE_FIXTURES / self.tree[source]).read_text() if source in self.tree else self.written[source]
        if source.endswith(".json"):
            entry = next(e for e in json.loads(text) if e["rse"] == self.rse and e["volume"] == volume)
            protos = entry["protocols"]
        else:
            protos = tfc_protocols(text)
        made = [cms_protocol(p, protos, weights[p["protocol"]]) for p in protos if p["protocol"] in weights
                and p.get("access", "global-rw") in ("global-rw", "global-ro")]
        return sorted(made, key=lambda p: p["domains"]["wan"]["read"])

    def door(self) -> str:
        """scheme://host:port of Rucio's delete PFN."""
        m = _URL.match(self.rucio_pfn)
        assert m is not None, self.rucio_pfn
        return f"{m.group('scheme')}://{m.group('host')}:{m.group('port') or DEFAULT_PORTS[m.group('scheme')]}"

    def behind(self, local: str) -> "SiteCase":
        """This case with Rucio's door (a real site's host) replaced by `local` (scheme://host:port of a server
        of the tests) in its configuration files and Rucio's PFN; everything else as published."""
        door, tree, written = self.door(), {}, dict(self.written)
        for dest, source in self.tree.items():
            text = (SITE_FIXTURES / source).read_text()
            if door in text:
                written[dest] = text.replace(door, local)
            else:
                tree[dest] = source
        assert set(written) != set(self.written), f"{door} is in no file of {self.name}"
        return replace(self, tree=tree, written=written, rucio_pfn=self.rucio_pfn.replace(door, local))


def tfc_protocols(xml: str) -> list[dict[str, Any]]:
    """A trivial file catalog's lfn-to-pfn rules as storage.json protocols with `rules`."""
    protos: dict[str, list[dict[str, str]]] = {}
    for node in ET.fromstring(xml).iter("lfn-to-pfn"):
        rule = {"lfn": node.get("path-match", ""), "pfn": node.get("result", "")}
        if node.get("chain"):
            rule["chain"] = node.get("chain", "")
        protos.setdefault(node.get("protocol", ""), []).append(rule)
    return [{"protocol": name, "access": "global-rw", "rules": rules} for name, rules in protos.items()]


def cms_protocol(proto: dict[str, Any], protos: list[dict[str, Any]], weight: int) -> dict[str, Any]:
    """One Rucio protocol from a storage.json protocol, as CMSRSE.py makes it (its last rule names the endpoint)."""
    url = proto.get("prefix") or proto["rules"][-1]["pfn"]
    m = _URL.match(url)
    assert m is not None, url
    scheme, rest = m.group("scheme"), m.group("rest") or "/"
    ext: dict[str, Any] = {}
    if "?" in rest and "=" in rest:
        cut = rest.index("=") + 1
        ext["web_service_path"], rest = rest[:cut], rest[cut:]
    if proto.get("prefix"):
        prefix = "/" + rest.strip("/") + "/" if rest.strip("/") else "/"
    else:
        prefix = "/"
        ext["tfc_proto"] = proto["protocol"].lower()
        ext["tfc"] = _rules_with_chains(proto["protocol"], protos)
    read_only = proto.get("access") == "global-ro"
    write = None if read_only else weight
    domains = {"wan": {"read": weight, "write": write, "delete": write, "third_party_copy_read": weight,
                       "third_party_copy_write": write},
               "lan": {"read": None, "write": None, "delete": None}}
    return {"scheme": scheme, "hostname": m.group("host"), "port": int(m.group("port") or DEFAULT_PORTS[scheme]),
            "prefix": prefix, "impl": IMPL, "domains": domains, "extended_attributes": ext or None}


def _rules_with_chains(name: str, protos: list[dict[str, Any]]) -> list[dict[str, str]]:
    by_name = {p["protocol"]: p for p in protos}
    out: list[dict[str, str]] = []
    todo, done = [name], set()
    while todo:
        current = todo.pop(0)
        if current in done or current not in by_name:
            continue
        done.add(current)
        for rule in by_name[current].get("rules", []):
            entry = {"proto": current.lower(), "path": rule["lfn"], "out": rule["pfn"]}
            if rule.get("chain"):
                entry["chain"] = rule["chain"].lower()
                todo.append(rule["chain"])
            out.append(entry)
    return out


def register(client: Any, case: SiteCase) -> None:
    """The RSE in the test Rucio server as CMS has it (its site, cmstfc, protocols); an RSE registered before
    (another case of the same RSE) gets this case's protocols instead, as CMSRSE.py's update would give it."""
    from rucio.common.exception import Duplicate

    try:
        client.add_rse(case.rse, rse_type="DISK")
    except Duplicate:
        for old in client.get_protocols(case.rse):
            client.delete_protocols(case.rse, old["scheme"], old["hostname"], old["port"])
    # Not CMS's cms_type, tier or country: other tests select RSEs of the session's server by those.
    for key, value in {"cms_type": "site_fixture", "site": case.site, "lfn2pfn_algorithm": "cmstfc"}.items():
        client.add_rse_attribute(case.rse, key, value)
    for proto in case.rucio_protocols():
        client.add_protocol(case.rse, proto)


def slc(site: str, body: str) -> str:
    """A site-local-config.xml the test writes (the site's own is not published in the fixtures' sources)."""
    return f'<site-local-config>\n <site name="{site}">\n{body} </site>\n</site-local-config>\n'


def legacy(catalog: str, protocol: str, rse: str, command: str = "gfal2") -> str:
    return (f'  <local-stage-out>\n   <command value="{command}"/>\n'
            f'   <catalog url="trivialcatalog_file:/cvmfs/cms.cern.ch/SITECONF/local/PhEDEx/{catalog}'
            f'?protocol={protocol}"/>\n   <phedex-node value="{rse}"/>\n  </local-stage-out>\n')


# The form T2_US_Vanderbilt's catalog used (`/+store(.*)` -> `/store/$1` gives /store//unmerged/); its own
# storage.xml is not in the fixtures' sources, its site-local-config.xml is.
VANDERBILT_TFC = """<storage-mapping>
  <lfn-to-pfn protocol="direct" path-match="/+store(.*)" result="/store/$1"/>
  <lfn-to-pfn protocol="srmv2" path-match="(.*)" chain="direct" result="srm://se1.accre.vanderbilt.edu:6288/srm/v2/server?SFN=$1"/>
</storage-mapping>
"""

FNAL_WEBDAV = "davs://cmsdcadisk.fnal.gov:2880/dcache/uscmsdisk/store/unmerged/"
KIT_WEBDAV = "davs://cmswebdav-kit-disk.gridka.de:2880/pnfs/gridka.de/cms/disk-only/store/unmerged/"
DESY_WEBDAV = "davs://dcache-cms-webdav-wan.desy.de:2880/pnfs/desy.de/cms/tier2/unmerged/"
FNAL_TREE = {"T1_US_FNAL/JobConfig/site-local-config.xml": "T1_US_FNAL/site-local-config.xml",
             "T1_US_FNAL/storage.json": "T1_US_FNAL/storage.json"}
KIT_TREE = {"T1_DE_KIT/JobConfig/site-local-config.xml": "T1_DE_KIT/site-local-config.xml",
            "T1_DE_KIT/storage.json": "T1_DE_KIT/storage.json"}
STORAGE_JSON = "storage.json"


def _tfc_case(site: str, rse: str, protocol: str, pfn: str) -> SiteCase:
    """A TFC-era site: its published catalog, a site-local-config.xml with one <local-stage-out> using it."""
    return SiteCase(f"{site}-tfc", rse, site, {f"{site}/PhEDEx/storage.xml": f"{site}/storage.xml"}, site,
                    (f"{site}/PhEDEx/storage.xml", "", {protocol: 1}), pfn, ("local-stage-out", "same_pfn"),
                    written={f"{site}/JobConfig/site-local-config.xml": slc(site, legacy("storage.xml", protocol, rse))})


CASES = [
    # FNAL: XRootD first, then SRMv2, then WebDAV; Rucio deletes over WebDAV.
    SiteCase("T1_US_FNAL", "T1_US_FNAL_Disk", "T1_US_FNAL", FNAL_TREE, "T1_US_FNAL",
             ("T1_US_FNAL/storage.json", "FNAL_dCache_EOS", WEIGHTS), FNAL_WEBDAV, ("WebDAV", "same_pfn")),
    SiteCase("T1_US_FNAL-misc", "T1_US_FNAL_Disk", "T1_US_FNAL",
             {**FNAL_TREE, "T1_US_FNAL/JobConfig/site-local-config.xml": "T1_US_FNAL/site-local-config-misc.xml"},
             "T1_US_FNAL", ("T1_US_FNAL/storage.json", "FNAL_dCache_EOS", WEIGHTS), FNAL_WEBDAV,
             ("WebDAV", "same_pfn")),
    SiteCase("T1_DE_KIT", "T1_DE_KIT_Disk", "T1_DE_KIT", KIT_TREE, "T1_DE_KIT",
             ("T1_DE_KIT/storage.json", "KIT_dCache", WEIGHTS), KIT_WEBDAV, ("WebDAV", "same_pfn")),
    SiteCase("T1_DE_KIT-subsite", "T1_DE_KIT_Disk", "T1_DE_KIT",
             {"T1_DE_KIT/KIT-T3/JobConfig/site-local-config.xml": "T1_DE_KIT/KIT-T3/site-local-config.xml",
              "T1_DE_KIT/storage.json": "T1_DE_KIT/storage.json"}, "T1_DE_KIT/KIT-T3",
             ("T1_DE_KIT/storage.json", "KIT_dCache", WEIGHTS), KIT_WEBDAV, ("WebDAV", "same_pfn")),
    # CMSRucio's example storage.json of KIT (another WebDAV door, an nfs protocol written file:/...).
    SiteCase("T1_DE_KIT-cmsrucio", "T1_DE_KIT_Disk", "T1_DE_KIT",
             {**KIT_TREE, "T1_DE_KIT/storage.json": "T1_DE_KIT/storage-cmsrucio.json"}, "T1_DE_KIT",
             ("T1_DE_KIT/storage.json", "KIT_dCache", WEIGHTS),
             "davs://cmswebdav-kit.gridka.de:2880/pnfs/gridka.de/cms/disk-only/store/unmerged/", ("WebDAV", "same_pfn")),
    # DESY's storage through KIT's published stage-out to it (jobs at KIT); /store/unmerged/ is .../tier2/unmerged/.
    SiteCase("T2_DE_DESY-from-KIT", "T2_DE_DESY", "T1_DE_KIT",
             {"T1_DE_KIT/JobConfig/site-local-config.xml": "T1_DE_KIT/site-local-config-to-desy.xml",
              "T1_DE_KIT/storage.json": "T1_DE_KIT/storage.json", "T2_DE_DESY/storage.json": "T2_DE_DESY/storage.json"},
             "T1_DE_KIT", ("T2_DE_DESY/storage.json", "DESY_dCache", WEIGHTS), DESY_WEBDAV, ("WebDAV", "same_pfn")),
    # DESY's jobs at DESY: its storage.json with a site-local-config.xml naming its WebDAV stage-out.
    SiteCase("T2_DE_DESY", "T2_DE_DESY", "T2_DE_DESY", {"T2_DE_DESY/storage.json": "T2_DE_DESY/storage.json"},
             "T2_DE_DESY", ("T2_DE_DESY/storage.json", "DESY_dCache", WEIGHTS), DESY_WEBDAV, ("WebDAV", "same_pfn"),
             written={"T2_DE_DESY/JobConfig/site-local-config.xml": slc(
                 "T2_DE_DESY", '  <stage-out>\n   <method volume="DESY_dCache" protocol="WebDAV"/>\n  </stage-out>\n')}),
    # Vanderbilt's published site-local-config.xml (srmv2 local stage-out through its catalog, srmv2-lcg fallback).
    SiteCase("T3_US_Vanderbilt", "T3_US_Vanderbilt", "T3_US_Vanderbilt",
             {"T3_US_Vanderbilt/JobConfig/site-local-config.xml": "T3_US_Vanderbilt/site-local-config.xml"},
             "T3_US_Vanderbilt", ("T3_US_Vanderbilt/PhEDEx/storage.xml", "", {"srmv2": 1}),
             "srm://se1.accre.vanderbilt.edu:6288/srm/v2/server?SFN=/store//unmerged/", ("local-stage-out", "same_pfn"),
             written={"T3_US_Vanderbilt/PhEDEx/storage.xml": VANDERBILT_TFC}),
    _tfc_case("T2_US_Florida", "T2_US_Florida", "srm",
              "srm://srm.ihepa.ufl.edu:8443/srm/v2/server?SFN=/cms/data/store/unmerged/"),
    _tfc_case("T2_ES_IFCA", "T2_ES_IFCA", "srmv2", "srm://storm.ifca.es:8444/srm/managerv2?SFN=/cms/store/unmerged/"),
    _tfc_case("T2_PT_NCG_Lisbon", "T2_PT_NCG_Lisbon", "srmv2",
              "srm://srm01.ncg.ingrid.pt:8444/srm/managerv2?SFN=/cms/store/unmerged/"),
    _tfc_case("T2_US_Nebraska", "T2_US_Nebraska", "srmv2",
              "srm://dcache07.unl.edu:8443/srm/v2/server?SFN=/mnt/hadoop/user/uscms01/pnfs/unl.edu/data4/cms/store/unmerged/"),
]
BY_NAME = {c.name: c for c in CASES}
# CERN (cms-sw/siteconf's published T2_CH_CERN): stage-out through XRootD at the global redirector only, while
# Rucio deletes over the WebDAV door its CERN_EOS volume declares; no stage-out method gives that PFN, the volume
# does (rule rucio_volume). Not in CASES: the CLI tests look at each case's files through its door.
CERN_WEBDAV = "davs://eoscms.cern.ch:443/eos/cms/store/unmerged/"
CERN = SiteCase("T2_CH_CERN", "T2_CH_CERN", "T2_CH_CERN",
                {"T2_CH_CERN/JobConfig/site-local-config.xml": "T2_CH_CERN/site-local-config.xml",
                 "T2_CH_CERN/storage.json": "T2_CH_CERN/storage.json"}, "T2_CH_CERN",
                ("T2_CH_CERN/storage.json", "CERN_EOS", WEIGHTS), CERN_WEBDAV, ("WebDAV", "rucio_volume"))
# Files of a real dump's shape on every site (one dataset; the planner's protected bases keep one of them).
DATASET = "/store/unmerged/Run3Summer23DRPremix/TTtoLNu2Q/AODSIM/130X_v2"
LFNS = [f"{DATASET}/00000/F00D{i}.root" for i in range(4)] + [f"{DATASET}/00001/BEEF.root",
                                                              f"{DATASET}-kept/00000/KEEP.root"]
PROTECTED = [f"{DATASET}-kept"]

