"""LFN -> PFN mapping from storage.json (and the legacy trivial file catalog), standard library only.

Rules follow WMCore's RucioFileCatalog: a `prefix` protocol maps `/<path>` to `<prefix>/<path>`; a
`rules` protocol tries its rules in order and the first whose `lfn` regex matches wins, `$N` in
`pfn` taking the N-th group; a rule with `chain` first maps the LFN with the chained protocol and
matches its own regex against that result. One difference, for safety: a regex must match the
WHOLE path. A rule that matches only the start of it would map two different LFNs to one PFN, and
a deletion through it could remove the wrong file. Every PFN a method gives is normalised
(pfn.normalise: `file:/p`, repeated slashes from a prefix ending in '/' or a template's join).
"""
from __future__ import annotations

import json
import os
import re
import xml.etree.ElementTree as ET
from typing import Callable, Dict, List, Mapping, Optional, Tuple

from .pfn import normalise
from .siteconf import SiteConfigError, SiteLocalConfig, StageOutMethod, site_dir

STORAGE_OVERRIDE_VAR = "MSUNMERGED_STORAGE_JSON"
MAX_CHAIN = 8
LFN_PREFIX = "lfn-prefix"  # the one protocol of a fallback stage-out's catalog
_GROUP = re.compile(r"\$(\d+)")

Rule = Tuple["re.Pattern[str]", str, Optional[str]]  # (lfn regex, pfn template, chained protocol)
Mapper = Callable[[str], Optional[str]]


class Catalog:
    """The mapping rules of one storage volume, by protocol (all protocols, so chains resolve)."""

    def __init__(self, rules: Dict[str, List[Rule]], site: str = "", volume: str = "",
                 rse: Optional[str] = None) -> None:
        self.rules = rules
        self.site = site
        self.volume = volume
        self.rse = rse

    def pfn(self, protocol: str, lfn: str, _depth: int = 0) -> Optional[str]:
        """Map `lfn` with `protocol`; None when no rule matches."""
        if _depth > MAX_CHAIN:
            raise SiteConfigError(f"chain of protocol {protocol!r} deeper than {MAX_CHAIN} (a loop?)")
        for regex, template, chain in self.rules.get(protocol, ()):
            path: Optional[str] = lfn
            if chain:
                path = self.pfn(chain, lfn, _depth + 1)
                if path is None:
                    continue
            m = regex.fullmatch(path)  # type: ignore[arg-type]
            if m is None:
                continue
            return _GROUP.sub(lambda g: _group(m, int(g.group(1))), template)
        return None

    def mapper(self, protocol: str) -> Mapper:
        return lambda lfn: self.pfn(protocol, lfn)


def _group(m: "re.Match[str]", n: int) -> str:
    try:
        return m.group(n) or ""
    except IndexError:
        raise SiteConfigError(f"rule {m.re.pattern!r} has no group ${n}") from None


def _compile(pattern: str, where: str) -> "re.Pattern[str]":
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise SiteConfigError(f"{where}: bad regular expression {pattern!r}: {exc}") from None


def load_storage_json(path: str) -> list:
    """The list of volume entries in a storage.json."""
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError) as exc:
        raise SiteConfigError(f"cannot read storage description {path}: {exc}") from None
    if not isinstance(data, list):
        raise SiteConfigError(f"{path}: expected a JSON list of volumes")
    return data


def catalog_for(entries: list, site: str, volume: str, where: str = "storage.json") -> Optional[Catalog]:
    """The catalog of the entry for (site, volume), or None when there is none."""
    for entry in entries:
        if not isinstance(entry, dict) or entry.get("site") != site or entry.get("volume") != volume:
            continue
        rules: Dict[str, List[Rule]] = {}
        protocols = entry.get("protocols") or []
        if not isinstance(protocols, list):
            raise SiteConfigError(f"{where}: {site}/{volume}: 'protocols' is not a list")
        for n, proto in enumerate(protocols):
            if not isinstance(proto, dict):
                raise SiteConfigError(f"{where}: {site}/{volume}: protocol entry {n} is not an object")
            name = str(proto.get("protocol", ""))
            if "prefix" in proto:
                rules.setdefault(name, []).append((re.compile(r"/(.*)"), str(proto["prefix"]) + "/$1", None))
            proto_rules = proto.get("rules") or []
            if not isinstance(proto_rules, list):
                raise SiteConfigError(f"{where}: {site}/{volume} protocol {name}: 'rules' is not a list")
            for i, rule in enumerate(proto_rules):
                ctx = f"{where}: {site}/{volume} protocol {name} rule {i}"
                if not isinstance(rule, dict) or "lfn" not in rule or "pfn" not in rule:
                    raise SiteConfigError(f"{ctx}: needs 'lfn' and 'pfn'")
                rules.setdefault(name, []).append(
                    (_compile(str(rule["lfn"]), ctx), str(rule["pfn"]), rule.get("chain") or None))
        return Catalog(rules, site, volume, entry.get("rse"))
    return None


def storage_json_path(env: Mapping[str, str], site: str, subsite: Optional[str], storage_site: str) -> str:
    """Where storage.json is (WMCore's storageJsonPath): $SITECONFIG_PATH, one level up for a sub-site,
    and ../<site> for the storage of another site."""
    if env.get(STORAGE_OVERRIDE_VAR):
        return env[STORAGE_OVERRIDE_VAR]
    base = site_dir(env)
    up = [".."] if subsite else []
    if storage_site != site:
        up = up + ["..", storage_site]
    path = os.path.normpath(os.path.join(base, *up, "storage.json"))
    if not subsite and storage_site == site and not os.path.exists(path):
        parent = os.path.normpath(os.path.join(base, "..", "storage.json"))  # a sub-site without <subsite>
        if os.path.exists(parent):
            return parent
    return path


def load_tfc(url: str, env: Mapping[str, str]) -> Tuple[Catalog, str]:
    """Legacy trivial file catalog: `trivialcatalog_file:<path>?protocol=<p>` -> (catalog, protocol)."""
    if not url.startswith("trivialcatalog_file:"):
        raise SiteConfigError(f"unsupported catalog URL {url!r}")
    path, _, query = url[len("trivialcatalog_file:"):].partition("?")
    protocol = ""
    for part in query.split("&"):
        key, _, value = part.partition("=")
        if key == "protocol":
            protocol = value
    if not os.path.exists(path) and "/SITECONF/local/" in path and env.get("SITECONFIG_PATH"):
        path = os.path.join(env["SITECONFIG_PATH"], path.split("/SITECONF/local/", 1)[1])
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError) as exc:
        raise SiteConfigError(f"cannot read trivial file catalog {path}: {exc}") from None
    rules: Dict[str, List[Rule]] = {}
    for node in root.iter("lfn-to-pfn"):
        name = node.get("protocol", "")
        match, result = node.get("path-match"), node.get("result")
        if match is None or result is None:
            raise SiteConfigError(f"{path}: lfn-to-pfn needs path-match and result")
        # Matched against the whole path, like storage.json rules (see the module note).
        rules.setdefault(name, []).append((_compile(match, path), result, node.get("chain") or None))
    return Catalog(rules), protocol


def method_catalog(method: StageOutMethod, cfg: SiteLocalConfig, env: Mapping[str, str],
                   rse: str) -> Tuple[Optional[Catalog], str]:
    """(catalog, protocol) when the method can map LFNs for `rse`, else (None, reason). The catalog holds every
    protocol of the method's storage.json volume or trivial file catalog (a fallback's lfn-prefix: that one)."""
    if method.kind == "method":
        if not method.volume or not method.protocol:
            return None, "stage-out method without volume or protocol"
        path = storage_json_path(env, cfg.site, cfg.subsite, method.storage_site)
        if not os.path.exists(path):
            return None, f"storage.json not found at {path}"
        catalog = catalog_for(load_storage_json(path), method.storage_site, method.volume, path)
        if catalog is None:
            return None, f"{path} has no volume {method.volume!r} of site {method.storage_site!r}"
        if catalog.rse != rse:
            # The job was planned for one RSE: never delete through another one's endpoint.
            return None, f"volume {method.volume!r} is RSE {catalog.rse!r}, the job is for {rse!r}"
        if method.protocol not in catalog.rules:
            return None, f"volume {method.volume!r} has no protocol {method.protocol!r}"
        return catalog, method.protocol
    if method.phedex_node != rse:
        return None, f"{method.kind} is for {method.phedex_node or 'an unnamed node'!r}, the job is for {rse!r}"
    if method.kind == "local-stage-out":
        if not method.catalog:
            return None, "local-stage-out without catalog"
        return load_tfc(method.catalog, env)
    if not method.lfn_prefix:
        return None, "fallback-stage-out without lfn-prefix"
    return Catalog({LFN_PREFIX: [(re.compile(r"(/.*)"), method.lfn_prefix + "$1", None)]}), LFN_PREFIX


def method_mapper(method: StageOutMethod, cfg: SiteLocalConfig, env: Mapping[str, str],
                  rse: str) -> Tuple[Optional[Mapper], str]:
    """(mapper, "") when the method can map LFNs for `rse` (its PFNs normalised), else (None, reason)."""
    catalog, protocol = method_catalog(method, cfg, env, rse)
    return (None, protocol) if catalog is None else (normalised(catalog, protocol), "")


def normalised(catalog: Catalog, protocol: str) -> Mapper:
    """The catalog's mapping with `protocol`, every PFN normalised (pfn.normalise)."""
    def mapper(lfn: str) -> Optional[str]:
        got = catalog.pfn(protocol, lfn)
        return None if got is None else normalise(got)
    return mapper
