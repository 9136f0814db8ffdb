"""Reads the site's site-local-config.xml: site name and stage-out methods (standard library only)."""
from __future__ import annotations

import os
import xml.etree.ElementTree as ET
from typing import List, Mapping, Optional

# Test and operator overrides of the site-local-config.xml location, checked in this order.
OVERRIDE_VARS = ("MSUNMERGED_SITE_LOCAL_CONFIG", "WMAGENT_SITE_CONFIG_OVERRIDE")
# Where CMS software is on a worker node (CVMFS); $CMS_PATH/SITECONF/local links to the node's site.
CMS_PATH = "/cvmfs/cms.cern.ch"
# WMCore's default when a <stage-out><method> names no command.
DEFAULT_COMMAND = "gfal2"


class SiteConfigError(Exception):
    """The site configuration is missing or cannot be used; the message says which file and why."""


class StageOutMethod:
    """One way to reach the site storage: new-style <method> or legacy local/fallback stage-out."""

    def __init__(self, kind: str, command: str, option: str = "", volume: str = "", protocol: str = "",
                 storage_site: str = "", catalog: str = "", lfn_prefix: str = "", phedex_node: str = "") -> None:
        self.kind = kind  # "method", "local-stage-out" or "fallback-stage-out"
        self.command = command
        self.option = option
        self.volume = volume
        self.protocol = protocol
        self.storage_site = storage_site
        self.catalog = catalog  # legacy: trivialcatalog_file:<path>?protocol=<p>
        self.lfn_prefix = lfn_prefix  # legacy fallback: PFN = prefix + LFN
        self.phedex_node = phedex_node

    def describe(self) -> dict:
        """The non-empty attributes, for the report."""
        return {k: v for k, v in vars(self).items() if v}

    def __repr__(self) -> str:
        return f"StageOutMethod({self.describe()})"


class SiteLocalConfig:
    """What the worker needs from site-local-config.xml."""

    def __init__(self, path: str, site: str, subsite: Optional[str], methods: List[StageOutMethod]) -> None:
        self.path = path
        self.site = site
        self.subsite = subsite
        self.methods = methods


def _attr(node: Optional[ET.Element], name: str = "value") -> str:
    return (node.get(name) or "").strip() if node is not None else ""


def parse(path: str) -> SiteLocalConfig:
    """Parse one site-local-config.xml; methods come in the order a job tries them:
    every <stage-out><method>, then <local-stage-out>, then <fallback-stage-out>."""
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError) as exc:
        raise SiteConfigError(f"cannot read site-local-config {path}: {exc}") from None
    site_node = root if root.tag == "site" else root.find("site")
    if site_node is None or not site_node.get("name"):
        raise SiteConfigError(f"{path}: no <site name=...> element")
    site = site_node.get("name", "").strip()
    sub = site_node.find("subsite")
    subsite = _attr(sub, "name") or None
    methods: List[StageOutMethod] = []
    stage_out = site_node.find("stage-out")
    if stage_out is not None:
        for m in stage_out.findall("method"):
            methods.append(StageOutMethod(
                "method", command=_attr(m, "command") or DEFAULT_COMMAND, option=_attr(m, "option"),
                volume=_attr(m, "volume"), protocol=_attr(m, "protocol"),
                storage_site=_attr(m, "site") or site))
    local = site_node.find("local-stage-out")
    if local is not None:
        methods.append(StageOutMethod(
            "local-stage-out", command=_attr(local.find("command")), option=_attr(local.find("option")),
            catalog=_attr(local.find("catalog"), "url"), phedex_node=_attr(local.find("phedex-node")),
            storage_site=site))
    fallback = site_node.find("fallback-stage-out")
    if fallback is not None:
        methods.append(StageOutMethod(
            "fallback-stage-out", command=_attr(fallback.find("command")), option=_attr(fallback.find("option")),
            lfn_prefix=_attr(fallback.find("lfn-prefix")), phedex_node=_attr(fallback.find("phedex-node")),
            storage_site=site))
    return SiteLocalConfig(path, site, subsite, methods)


def locate(env: Mapping[str, str]) -> str:
    """Path of site-local-config.xml: an override variable, else <site config>/JobConfig/ (site_dir)."""
    for var in OVERRIDE_VARS:
        if env.get(var):
            if not os.path.isfile(env[var]):
                raise SiteConfigError(f"{var}={env[var]} does not name an existing file")
            return env[var]
    base = site_dir(env)
    path = os.path.join(base, "JobConfig", "site-local-config.xml")
    if not os.path.isfile(path):
        if not env.get("SITECONFIG_PATH"):
            raise SiteConfigError(f"SITECONFIG_PATH is not set (nor {', '.join(OVERRIDE_VARS)}) and CMS's "
                                  f"default {path} does not exist")
        raise SiteConfigError(f"site-local-config not found: {path}")
    return path


def site_dir(env: Mapping[str, str]) -> str:
    """The node's site configuration folder: $SITECONFIG_PATH (the service's per-site setting or the pilot's),
    else CMS's default $CMS_PATH/SITECONF/local, resolved (it is a link to the site's folder, whose parent
    holds the other sites' folders)."""
    if env.get("SITECONFIG_PATH"):
        return env["SITECONFIG_PATH"]
    return os.path.realpath(os.path.join(env.get("CMS_PATH") or CMS_PATH, "SITECONF", "local"))
