"""PFN sanity rules (MSUnmerged.worker.pfn): canonical form, the unmerged root, endpoint comparison."""
from __future__ import annotations

import posixpath
import urllib.parse

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from MSUnmerged.worker import pfn

LFN = "/store/unmerged/Run2024F/Muon0/AOD/v1/00000/f.root"
ROOT = "root://se.example.org:1094//data/store/unmerged/"


@pytest.mark.parametrize("a,b,same", [
    ("root://se.example.org:1094//store/unmerged/", "root://SE.example.org/store/unmerged", True),
    ("root://se.example.org//store/unmerged/", "xroot://se.example.org:1094//store/unmerged/", True),
    ("root://se.example.org:1095//store/unmerged/", "root://se.example.org//store/unmerged/", False),
    ("davs://se.example.org/store/unmerged/", "https://se.example.org:443/store/unmerged", True),
    ("davs://se.example.org/store/unmerged/", "root://se.example.org/store/unmerged/", False),
    ("/data/store/unmerged/", "file:///data/store/unmerged", True),
    ("/data/store/unmerged/", "/data/store/unmerged/x/..", False),
    ("/data/store/unmerged/", "/Data/store/unmerged/", False),
])
def test_same_place_compares_endpoint_and_path(a: str, b: str, same: bool) -> None:
    assert pfn.same_place(a, b) is same


@pytest.mark.parametrize("mapped,layout,ok", [
    (ROOT[:-1] + LFN[len("/store/unmerged"):], "standard", True),
    ("root://se.example.org:1094/data/store/unmerged" + LFN[len("/store/unmerged"):], "standard", True),
    ("root://se.example.org:1094//data/store/unmerged/Run2024F/../Run2024F/Muon0/AOD/v1/00000/f.root", "standard", False),
    ("root://se.example.org:1094//data/store/unmerged/Run2024F//Muon0/AOD/v1/00000/f.root", "site_specific", False),
    ("root://se.example.org:1094//data/store/unmerged/Run2024F/%2e%2e/Muon0/AOD/v1/00000/f.root", "site_specific", False),
    ("root://se.example.org:1094//data/store/data/Run2024F/Muon0/AOD/v1/00000/f.root", "site_specific", False),
    ("root://other.example.org:1094//data/store/unmerged/Run2024F/Muon0/AOD/v1/00000/f.root", "standard", False),
    ("root://se.example.org:1094//data/store/unmerged/extra/Run2024F/Muon0/AOD/v1/00000/f.root", "standard", False),
    ("root://se.example.org:1094//data/store/unmerged/extra/Run2024F/Muon0/AOD/v1/00000/f.root", "site_specific", True),
    ("root://se.example.org:1094//data/store/unmerged/", "site_specific", False),
])
def test_pfn_problem(mapped: str, layout: str, ok: bool) -> None:
    assert (pfn.pfn_problem(mapped, LFN, ROOT, layout) is None) is ok


def test_root_problem() -> None:
    assert pfn.root_problem(ROOT, "standard") is None
    assert pfn.root_problem("/disk/unmerged/", "site_specific", expected="file:///disk/unmerged") is None
    assert "does not end with" in pfn.root_problem("/disk/unmerged/", "standard")  # type: ignore[operator]
    assert "not a canonical" in pfn.root_problem("/data/store/unmerged/../data/", "site_specific",  # type: ignore[operator]
                                                 expected="/data/store/unmerged/../data/")
    assert "not a canonical" in pfn.root_problem("root://h//", "site_specific", expected="root://h//")  # type: ignore[operator]
    assert "no PFN" in pfn.root_problem(None, "standard")  # type: ignore[operator]
    assert pfn.unmerged_root(lambda lfn: "/data" + lfn) == "/data/store/unmerged/"
    assert pfn.unmerged_root(lambda lfn: "/data/um_" + lfn.rsplit("/", 1)[1]) is None


PART = st.sampled_from(["a", "b", "..", ".", "", "store", "unmerged", "data", "%2e%2e", "x%2Fy"])


@settings(max_examples=500, deadline=None)
@given(parts=st.lists(PART, min_size=1, max_size=8), layout=st.sampled_from(pfn.LAYOUTS),
       slashes=st.sampled_from(["/", "//"]))
def test_an_accepted_pfn_never_resolves_outside_the_root(parts: list[str], layout: str, slashes: str) -> None:
    """Whatever a rule produces, a PFN that passes resolves (normpath, unquoted) strictly below the root."""
    mapped = "root://se.example.org:1094" + slashes + "data/store/unmerged/" + "/".join(parts)
    if pfn.pfn_problem(mapped, "/store/unmerged/" + "/".join(parts), ROOT, layout) is None:
        resolved = posixpath.normpath(urllib.parse.unquote(pfn.split(mapped).path))  # type: ignore[union-attr]
        assert resolved.startswith("/data/store/unmerged/") and resolved != "/data/store/unmerged"


DESY = "davs://dcache-cms-webdav-wan.desy.de:2880/pnfs/desy.de/cms/tier2/unmerged/"


@pytest.mark.parametrize("root,rule,ok", [
    (DESY, pfn.SAME_PFN, True),  # DESY: agreed by Rucio
    (DESY, pfn.SAME_NAMESPACE, True),
    (DESY, pfn.FIRST_USABLE, False),  # nobody vouches for a root outside .../store/unmerged/
    ("/storage/", pfn.SAME_PFN, False),  # the storage top, even if Rucio said so
    ("/storage/unmerged-not/", pfn.SAME_PFN, False),
    ("/storage/data/", pfn.SAME_PFN, False),
    ("/storage/store/unmerged/", pfn.FIRST_USABLE, True),
])
def test_standard_layout_accepts_an_unmerged_root_only_with_rucio(root: str, rule: str, ok: bool) -> None:
    assert (pfn.root_problem(root, "standard", rule) is None) is ok


def test_site_specific_layout_needs_exactly_the_configured_root() -> None:
    assert pfn.root_problem("root://h:1094//disk/tmp/", "site_specific", pfn.FIRST_USABLE, "root://h//disk/tmp") is None
    for expected in (None, "root://h//disk/tmp/unmerged/", "root://h//disk/", "root://other//disk/tmp/"):
        assert "unmerged_root" in pfn.root_problem("root://h//disk/tmp/", "site_specific",  # type: ignore[operator]
                                                  pfn.SAME_PFN, expected)


@pytest.mark.parametrize("raw,normal", [
    ("file:/grid/fzk.de/mounts/nfs4/data/cms/store/unmerged/a", "file:///grid/fzk.de/mounts/nfs4/data/cms/store/unmerged/a"),
    ("FILE:/d/store/unmerged/a", "file:///d/store/unmerged/a"),
    ("root://h:1094//data//store/unmerged/a", "root://h:1094//data/store/unmerged/a"),  # prefix ending in '/'
    ("root://h:1094//store/unmerged/a", "root://h:1094//store/unmerged/a"),  # xrootd's // kept
    ("/store//unmerged/a", "/store/unmerged/a"),  # a template joined with its group: /store/$1
    ("//data///store/unmerged/a", "/data/store/unmerged/a"),
    ("davs://h:2880/pnfs//store/unmerged/", "davs://h:2880/pnfs/store/unmerged/"),
    ("srm://h:8443/srm/managerv2?SFN=/pnfs//store/unmerged/a", "srm://h:8443/srm/managerv2?SFN=/pnfs/store/unmerged/a"),
    ("file://localhost//d//store/unmerged/a", "file://localhost/d/store/unmerged/a"),
    # Left as they are, to be refused: '..', escapes, a proxy prefix.
    ("/d/store/unmerged/../data/a", "/d/store/unmerged/../data/a"),
    ("/d/store/unmerged/%2e%2e/a", "/d/store/unmerged/%2e%2e/a"),
    ("root://p:1094//root://h:1094//store/unmerged/a", "root://p:1094//root://h:1094//store/unmerged/a"),
])
def test_normalise(raw: str, normal: str) -> None:
    assert pfn.normalise(raw) == normal
    assert pfn.normalise(normal) == normal


@pytest.mark.parametrize("bad", ["/d/store/unmerged/a/../../../data/x", "/d/store/unmerged/a/%2E%2E/x",
                                 "root://h//d/store/unmerged/./a", "root://p:1094//root://h:1094//store/unmerged/a/x"])
def test_normalised_pfns_that_leave_the_root_are_still_refused(bad: str) -> None:
    root = pfn.normalise(bad.split("/store/unmerged/")[0] + "/store/unmerged/")
    assert pfn.pfn_problem(pfn.normalise(bad), "/store/unmerged/a/x", root, "site_specific") is not None


FNAL_ROOTS = ["root://cmsdcadisk.fnal.gov//dcache/uscmsdisk/store/unmerged/",
              "srm://cmsdcadisk.fnal.gov:8443/srm/managerv2?SFN=/dcache/uscmsdisk/store/unmerged/",
              "davs://cmsdcadisk.fnal.gov:2880/dcache/uscmsdisk/store/unmerged/"]
FNAL_RUCIO = "davs://cmsdcadisk.fnal.gov:2880/dcache/uscmsdisk/store/unmerged/"


# FNAL's storage.json volume: each of its protocols names the other doors of the same namespace.
FNAL_DOORS = [[r for r in FNAL_ROOTS if r != root] for root in FNAL_ROOTS]


@pytest.mark.parametrize("roots,rucio,doors,expected", [
    (FNAL_ROOTS, FNAL_RUCIO, None, (2, pfn.SAME_PFN)),  # FNAL: the WebDAV method, third in its list
    (FNAL_ROOTS, None, None, (0, pfn.FIRST_USABLE)),
    (FNAL_ROOTS[:2], FNAL_RUCIO, FNAL_DOORS[:2], (0, pfn.SAME_NAMESPACE)),  # no WebDAV tool: same host and path
    (FNAL_ROOTS[1:2], FNAL_RUCIO, FNAL_DOORS[1:2], (0, pfn.SAME_NAMESPACE)),  # SRM: the path after ?SFN=
    (FNAL_ROOTS[:1], "https://cmsdcadisk.fnal.gov:2880/dcache/uscmsdisk/store/unmerged", FNAL_DOORS[:1],
     (0, pfn.SAME_NAMESPACE)),
    # A wrong first method, a right later one of the same protocol.
    (["davs://cmsdcadisk.fnal.gov:2880/dcache/other/store/unmerged/", FNAL_RUCIO], FNAL_RUCIO, None, (1, pfn.SAME_PFN)),
    (["/data/elsewhere/store/unmerged/", "file:///data/store/unmerged/"], "file://localhost/data/store/unmerged/",
     None, (1, pfn.SAME_PFN)),
])
def test_choose(roots: list, rucio: object, doors: object, expected: tuple) -> None:
    assert pfn.choose(roots, rucio, doors) == expected  # type: ignore[arg-type]


@pytest.mark.parametrize("roots", [
    # A method speaking Rucio's protocol disagrees: no other protocol's mapping is taken instead.
    ["davs://cmsdcadisk.fnal.gov:2880/dcache/other/store/unmerged/", FNAL_ROOTS[0]],
    # Another path, another host, a look-alike host, a local path, a proxy prefix.
    ["root://cmsdcadisk.fnal.gov//dcache/uscmsdisk/store/data/"],
    ["root://cmsdcadisk.fnal.gov//dcache/uscmsdisk/store/unmerged/x/"],
    ["root://cmseos.fnal.gov//dcache/uscmsdisk/store/unmerged/"],
    ["root://cmsdcadisk.fnal.gov.evil.org//dcache/uscmsdisk/store/unmerged/"],
    ["/dcache/uscmsdisk/store/unmerged/"],
    ["dcap://cmsdcadisk.fnal.gov/dcache/uscmsdisk/store/unmerged/"],  # not a door of the namespace rule
    ["root://p:1094//root://cmsdcadisk.fnal.gov//dcache/uscmsdisk/store/unmerged/"],
    [None],
    [],
])
def test_choose_refuses_every_other_mapping(roots: list) -> None:
    # Even with the site's catalog naming Rucio's PFN.
    index, why = pfn.choose(roots, FNAL_RUCIO, [[FNAL_RUCIO]] * len(roots))
    assert index is None and why


@pytest.mark.parametrize("doors", [None, [[]], [[None]], [["davs://cmsdcadisk.fnal.gov:2880/dcache/other/store/unmerged/"]],
                                   [["davs://other.fnal.gov:2880/dcache/uscmsdisk/store/unmerged/"]]])
def test_same_namespace_needs_the_sites_catalog_to_name_rucios_pfn(doors: object) -> None:
    """Same host and path alone is not enough: an xrootd site on 127.0.0.1 is not a WebDAV door on 127.0.0.1:443
    unless the site's own catalog says so (test_worker_xrootd: the existing refusal holds)."""
    assert pfn.choose(FNAL_ROOTS[:1], FNAL_RUCIO, doors)[0] is None  # type: ignore[arg-type]


def test_same_namespace() -> None:
    assert pfn.same_namespace(FNAL_ROOTS[0], FNAL_RUCIO) and pfn.same_namespace(FNAL_ROOTS[1], FNAL_ROOTS[0])
    assert not pfn.same_namespace(FNAL_RUCIO.replace("uscmsdisk", "uscmsdisk/.."), FNAL_RUCIO)
    assert not pfn.same_namespace("/dcache/uscmsdisk/store/unmerged/", "file:///dcache/uscmsdisk/store/unmerged/")
