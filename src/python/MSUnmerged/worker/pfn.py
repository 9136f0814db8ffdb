"""PFN sanity: where the site config puts /store/unmerged/, which stage-out method agrees with Rucio, and
whether a mapped PFN stays inside the unmerged root.

A mapped PFN is first normalised (`normalise`: the spellings real site configurations produce), then split
into its endpoint (scheme, host, port) and its path. Leading slashes of the path are collapsed
(`root://h//store` and `root://h/store` name one file), nothing else is rewritten: a PFN whose path holds
an empty, '.' or '..' component, or a percent-escaped '.', '/' or '\\', is not canonical and never used.
"""
from __future__ import annotations

import re
from typing import Callable, List, NamedTuple, Optional, Sequence, Tuple

from .paths import OTHER_NAMESPACES, UNMERGED

# Mapped to find the site config's PFN of /store/unmerged/ (the name is stripped from the result).
ROOT_PROBE = "msunmerged-root-probe"
LAYOUTS = ("standard", "site_specific")


def mapping_check(unmerged_pfn: Optional[str]) -> str:
    """A manifest's `mapping_check` (docs/jobs.md): "rucio" when the service gave Rucio's PFN of /store/unmerged/,
    which the worker compares with the site configuration's; else "site_config_only"."""
    return "rucio" if unmerged_pfn is not None else "site_config_only"
# How the stage-out method was chosen (docs/jobs.md, "Which stage-out method"): the report's method.choice.rule.
FIRST_USABLE = "first_usable"  # no Rucio PFN to compare: the site's first usable method
SAME_PFN = "same_pfn"  # the first usable method speaking Rucio's scheme whose root is Rucio's PFN
SAME_NAMESPACE = "same_namespace"  # none speaks Rucio's scheme: same host and path, its catalog names Rucio's PFN
# No stage-out method gives Rucio's PFN: a protocol of the site's storage.json volume of the RSE maps /store/unmerged/
# exactly there (docs/jobs.md, "Which stage-out method").
RUCIO_VOLUME = "rucio_volume"
RUCIO_RULES = (SAME_PFN, SAME_NAMESPACE, RUCIO_VOLUME)  # Rucio vouches for the root
_LOCAL = "file"  # the scheme of a local path (bare or file:)
_URL = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://([^/?#]*)(/.*)?$")
_ESCAPED = re.compile(r"%(2e|2f|5c)", re.IGNORECASE)
# Same endpoint under two names: the scheme spellings tools accept for one protocol, default ports.
_SCHEME = {"xroot": "root", "xroots": "roots", "dav": "http", "davs": "https"}
_PORT = {"root": "1094", "roots": "1094", "http": "80", "https": "443", "srm": "8443", "gsiftp": "2811"}
# Doors of one storage namespace (dCache, EOS, xrootd, StoRM serve the same path through each of them).
_DOORS = frozenset(_PORT)
_SFN = "?SFN="  # an SRM URL's physical path follows its web-service path


class Place(NamedTuple):
    endpoint: str  # "" for a local path (bare or file:///), else "scheme://host:port", normalised
    path: str  # absolute, leading slashes collapsed


def normalise(pfn: str) -> str:
    """One spelling for the forms real site configurations produce: `file:/p` -> `file:///p`, repeated
    slashes inside a path collapsed (a prefix ending in '/', a rule's template joined with its group). The
    slashes leading a URL's path are kept (`root://host//path`). A path holding '://' (a proxy prefix) is
    left as it is (and refused: not canonical). Nothing else changes: '.', '..' and escapes stay to be refused."""
    if pfn[:5].lower() == "file:" and pfn[5:6] == "/" and pfn[6:7] != "/":
        pfn = "file://" + pfn[5:]
    if pfn.startswith("/"):
        head, path, keep = "", pfn, 1
    else:
        m = _URL.match(pfn)
        if m is None or not m.group(3):
            return pfn
        head, path = pfn[:m.start(3)], m.group(3)
        keep = 1 if m.group(1).lower() == _LOCAL else len(path) - len(path.lstrip("/"))
    if "://" in path:
        return pfn
    rest = path.lstrip("/")
    return head + "/" * keep + re.sub("/{2,}", "/", rest)


def split(pfn: str) -> Optional[Place]:
    """(endpoint, path) of a PFN; None when it is neither an absolute path nor scheme://host/path."""
    if pfn.startswith("/"):
        return Place("", "/" + pfn.lstrip("/"))
    if pfn[:6].lower() == "file:/" and pfn[6:7] != "/":  # file:/path, one slash
        return Place("", pfn[5:])
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


def unmerged_root(mapper: Callable[[str], Optional[str]], area: str = UNMERGED) -> Optional[str]:
    """The site config's PFN of /store/unmerged/ (or another `area` ending in '/'), ending in '/'; None when it
    gives none."""
    pfn = mapper(area + ROOT_PROBE)
    if pfn is None or not pfn.endswith("/" + ROOT_PROBE):
        return None
    return pfn[:-len(ROOT_PROBE)]


class Namespace(NamedTuple):
    area: str  # one of OTHER_NAMESPACES
    root: str  # the site config's PFN of it
    endpoint: str  # that PFN split once (it is compared with every file's)
    path: str  # its path without a trailing slash


Namespaces = List[Namespace]


def namespace_roots(mapper: Callable[[str], Optional[str]]) -> Namespaces:
    """The PFNs the site config gives for CMS's other namespaces (those it maps to a PFN it can split)."""
    out = []
    for area in OTHER_NAMESPACES:
        root = unmerged_root(mapper, area)
        place = split(normalise(root)) if root is not None else None
        if root is not None and place is not None:
            out.append(Namespace(area, root, place.endpoint, place.path.rstrip("/")))
    return out


def _inside(endpoint: str, path: str, top_endpoint: str, top: str) -> bool:
    """True when (endpoint, path) is the directory (top_endpoint, top) or below it; paths without trailing '/'."""
    return endpoint == top_endpoint and (path == top or path.startswith(top + "/"))


def holds_namespace(root: str, namespaces: Namespaces) -> Optional[str]:
    """Why the PFN area `root` (a method's PFN of /store/unmerged/, or unmerged_root) must not anchor deletions:
    it holds the site config's PFN of another namespace. None when it holds none."""
    top = split(normalise(root))
    for ns in namespaces:
        if top is None or _inside(ns.endpoint, ns.path, top.endpoint, top.path.rstrip("/")):
            return "the PFN area %s holds %s, the site config's PFN of %s" % (root, ns.root, ns.area)
    return None


def other_lfn(pfn: str, lfn: str, mapper: Callable[[str], Optional[str]], namespaces: Namespaces) -> Optional[str]:
    """Why `pfn` (the mapping of `lfn`, normalised) must not be deleted though it is inside the unmerged root: it
    holds or is another namespace's PFN, it is also the PFN of an LFN outside /store/unmerged/, or `lfn` names a
    /store/ path below /store/unmerged/ (a dump of a storage top: /store/unmerged/store/data/...). None otherwise.
    The LFNs tried: `pfn` read below each namespace's PFN, and each /store/... tail of its path."""
    if lfn.startswith(UNMERGED + "store/"):
        return "%s names a /store/ path below %s (a dump of a storage top?)" % (lfn, UNMERGED)
    place = split(pfn)
    if place is None:
        return None
    endpoint, path = place.endpoint, place.path.rstrip("/")
    below = path + "/"
    candidates = []
    for ns in namespaces:  # inlined _inside both ways: this runs for every file
        if ns.endpoint != endpoint:
            continue
        if ns.path == path or ns.path.startswith(below):  # a directory at or above another namespace's PFN
            return "PFN %s holds %s, the site config's PFN of %s" % (pfn, ns.root, ns.area)
        if path.startswith(ns.path + "/"):
            candidates.append(ns.area + path[len(ns.path) + 1:])
    at = path.find("/store/")
    while at >= 0:
        if not path.startswith(UNMERGED, at):
            candidates.append(path[at:])
        at = path.find("/store/", at + 1)
    for other in candidates:
        got = mapper(other)
        if got is not None and same_place(got, pfn):
            return "PFN %s is also the site config's PFN of %s" % (pfn, other)
    return None


def form_problem(root: str) -> Optional[str]:
    """Why `root` is not a canonical absolute PFN of a directory other than '/', or None."""
    place = split(root)
    if place is None or place.path.rstrip("/") == "" or not _canonical(place.path.rstrip("/")):
        return "%s is not a canonical absolute PFN of a directory other than /" % root
    return None


def root_problem(root: Optional[str], layout: str, rule: str = FIRST_USABLE,
                 expected: Optional[str] = None) -> Optional[str]:
    """Why `root` (unmerged_root's answer) cannot anchor deletions, or None.

    "standard" layout: its path ends with /store/unmerged/ (a rule sending the whole of /store/unmerged/
    elsewhere, e.g. into /store/data/, moves the root with it), or its last component is `unmerged` and
    Rucio agreed with it (`rule` in RUCIO_RULES: DESY's /pnfs/desy.de/cms/tier2/unmerged/).
    "site_specific": it is exactly `expected`, the operator's jobs.sites.<RSE>.unmerged_root."""
    if root is None:
        return "the site config maps %s%s to no PFN ending in that name" % (UNMERGED, ROOT_PROBE)
    if form_problem(root) is not None:
        return "the site config's PFN of %s (%s) is not a canonical absolute PFN" % (UNMERGED, root)
    path = split(root).path  # type: ignore[union-attr]
    if layout == "site_specific":
        if expected is None or not same_place(root, expected):
            return "the site config's PFN of %s (%s) is not the configured unmerged_root (%s)" % (
                UNMERGED, root, expected)
    elif not path.endswith(UNMERGED) and not (path.rstrip("/").endswith("/unmerged") and rule in RUCIO_RULES):
        return "the site config's PFN of %s (%s) does not end with %s, nor with /unmerged/ agreed by Rucio " \
               "(pfn_layout standard)" % (UNMERGED, root, UNMERGED)
    return None


def same_place(a: str, b: str) -> bool:
    """True when two PFNs of a directory name the same endpoint and path (trailing slash ignored)."""
    pa, pb = split(normalise(a)), split(normalise(b))
    return pa is not None and pb is not None and pa.endpoint == pb.endpoint \
        and pa.path.rstrip("/") == pb.path.rstrip("/")


def scheme(pfn: str) -> str:
    """The PFN's protocol as compared (xroot = root, davs = https, ...); "file" for a local path."""
    place = split(normalise(pfn))
    return (place.endpoint.split("://", 1)[0] or _LOCAL) if place is not None else ""


def _door(place: Place) -> Tuple[str, str]:
    """(host, physical path) of a remote PFN on a storage door; ("", "") otherwise."""
    proto, _, host = place.endpoint.partition("://")
    path = place.path.split(_SFN, 1)[1] if _SFN in place.path else place.path
    if proto not in _DOORS or not path.startswith("/") or not _canonical(path.rstrip("/") or "/x"):
        return "", ""
    return host.rpartition("@")[2].rsplit(":", 1)[0], "/" + path.strip("/")


def same_namespace(a: str, b: str) -> bool:
    """True when two PFNs of a directory reach the same physical path on the same host through storage doors
    (xrootd, WebDAV, SRM, GridFTP) of possibly different protocols and ports."""
    pa, pb = split(normalise(a)), split(normalise(b))
    if pa is None or pb is None:
        return False
    da, db = _door(pa), _door(pb)
    return bool(da[0]) and da == db


def choose(roots: Sequence[Optional[str]], rucio: Optional[str],
           doors: Optional[Sequence[Sequence[Optional[str]]]] = None) -> Tuple[Optional[int], str]:
    """Which of the usable stage-out methods (their PFNs of /store/unmerged/, in the site's order) to delete
    through, and the rule (FIRST_USABLE, SAME_PFN, SAME_NAMESPACE); (None, why) when none agrees with `rucio`.

    Without Rucio's PFN: the first. Else among the methods speaking Rucio's scheme, the first whose root is
    Rucio's PFN. Only when none speaks it: the first that reaches Rucio's host and physical path
    (same_namespace) through a catalog (storage.json volume, trivial file catalog) one of whose other protocols
    maps /store/unmerged/ to Rucio's PFN exactly (`doors[i]`: their roots): the site's own configuration
    confirms that Rucio's door and the method's serve one namespace."""
    if rucio is None:
        return (0, FIRST_USABLE) if roots else (None, "no usable stage-out method")
    wanted = scheme(rucio)
    speaking = [i for i, root in enumerate(roots) if root is not None and scheme(root) == wanted]
    for i in speaking:
        if same_place(roots[i], rucio):  # type: ignore[arg-type]
            return i, SAME_PFN
    if speaking:
        return None, "no usable method speaking %s maps %s to Rucio's PFN %s" % (wanted, UNMERGED, rucio)
    for i, root in enumerate(roots):
        confirmed = any(door is not None and same_place(door, rucio) for door in (doors[i] if doors else ()))
        if root is not None and confirmed and same_namespace(root, rucio):
            return i, SAME_NAMESPACE
    return None, "no usable method speaks %s, and none reaches the host and path of Rucio's PFN %s through a " \
                 "catalog that names that PFN" % (wanted, rucio)


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
