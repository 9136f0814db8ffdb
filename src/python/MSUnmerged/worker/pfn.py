"""PFN sanity: where the site config puts /store/unmerged/, and whether a mapped PFN stays inside it.

A PFN is split into its endpoint (scheme, host, port) and its path. Leading slashes of the path
are collapsed (`root://h//store` and `root://h/store` name one file), nothing else is rewritten:
a PFN whose path holds an empty, '.' or '..' component, or a percent-escaped '.', '/' or '\\', is
not canonical and never used.
"""
from __future__ import annotations

import re
from typing import Callable, NamedTuple, Optional

from .paths import UNMERGED

# Mapped to find the site config's PFN of /store/unmerged/ (the name is stripped from the result).
ROOT_PROBE = "msunmerged-root-probe"
LAYOUTS = ("standard", "site_specific")
_URL = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://([^/?#]*)(/.*)?$")
_ESCAPED = re.compile(r"%(2e|2f|5c)", re.IGNORECASE)
# Same endpoint under two names: the scheme spellings tools accept for one protocol, default ports.
_SCHEME = {"xroot": "root", "xroots": "roots", "dav": "http", "davs": "https"}
_PORT = {"root": "1094", "roots": "1094", "http": "80", "https": "443", "srm": "8443", "gsiftp": "2811"}


class Place(NamedTuple):
    endpoint: str  # "" for a local path (bare or file:///), else "scheme://host:port", normalised
    path: str  # absolute, leading slashes collapsed


def split(pfn: str) -> Optional[Place]:
    """(endpoint, path) of a PFN; None when it is neither an absolute path nor scheme://host/path."""
    if pfn.startswith("/"):
        return Place("", "/" + pfn.lstrip("/"))
    m = _URL.match(pfn)
    if m is None or not m.group(3):
        return None
    scheme, host, path = m.group(1).lower(), m.group(2).lower(), "/" + m.group(3).lstrip("/")
    if scheme == "file":
        return Place("", path) if host in ("", "localhost") else None
    scheme = _SCHEME.get(scheme, scheme)
    if ":" not in host.rpartition("@")[2].rpartition("]")[2] and scheme in _PORT:
        host += ":" + _PORT[scheme]
    return Place(scheme + "://" + host, path)


def _canonical(path: str) -> bool:
    return not _ESCAPED.search(path) and all(p not in ("", ".", "..") for p in path[1:].split("/"))


def unmerged_root(mapper: Callable[[str], Optional[str]]) -> Optional[str]:
    """The site config's PFN of /store/unmerged/ (ending in '/'), or None when it gives none."""
    pfn = mapper(UNMERGED + ROOT_PROBE)
    if pfn is None or not pfn.endswith("/" + ROOT_PROBE):
        return None
    return pfn[:-len(ROOT_PROBE)]


def root_problem(root: Optional[str], layout: str) -> Optional[str]:
    """Why `root` (unmerged_root's answer) cannot anchor deletions, or None.

    "standard" layout: its path ends with /store/unmerged/ (a rule sending the whole of
    /store/unmerged/ elsewhere, e.g. into /store/data/, moves the root with it)."""
    if root is None:
        return "the site config maps %s%s to no PFN ending in that name" % (UNMERGED, ROOT_PROBE)
    place = split(root)
    if place is None or place.path == "/" or not _canonical(place.path[:-1]):
        return "the site config's PFN of %s (%s) is not a canonical absolute PFN" % (UNMERGED, root)
    if layout != "site_specific" and not place.path.endswith(UNMERGED):
        return "the site config's PFN of %s (%s) does not end with %s (pfn_layout standard)" % (
            UNMERGED, root, UNMERGED)
    return None


def same_place(a: str, b: str) -> bool:
    """True when two PFNs of a directory name the same endpoint and path (trailing slash ignored)."""
    pa, pb = split(a), split(b)
    return pa is not None and pb is not None and pa.endpoint == pb.endpoint \
        and pa.path.rstrip("/") == pb.path.rstrip("/")


def pfn_problem(pfn: str, lfn: str, root: str, layout: str) -> Optional[str]:
    """Why `pfn` (the mapping of `lfn`) is not a safe place to delete, or None.

    Always: canonical, same endpoint as the unmerged root, strictly below its path. "standard"
    layout also: exactly the root's PFN followed by the LFN's path below /store/unmerged/ (with
    root_problem: the PFN's path ends with the whole LFN).
    """
    place, top = split(pfn), split(root)
    if place is None or top is None:
        return "PFN %r is not an absolute path or URL" % pfn
    if not _canonical(place.path):
        return "PFN %s is not canonical ('.', '..', empty or escaped components)" % pfn
    base = top.path.rstrip("/") + "/"
    if place.endpoint != top.endpoint or not place.path.startswith(base) or len(place.path) == len(base):
        return "PFN %s is not below the site's PFN of %s (%s)" % (pfn, UNMERGED, root)
    if layout != "site_specific" and place.path != base + lfn[len(UNMERGED):]:
        return "PFN %s is not %s followed by the LFN's path below %s" % (pfn, root, UNMERGED)
    return None


def below_root(pfn: str, root: str) -> str:
    """The part of a checked PFN's path below the unmerged root ("a/b/f.root")."""
    place, top = split(pfn), split(root)
    assert place is not None and top is not None
    return place.path[len(top.path.rstrip("/")) + 1:]
