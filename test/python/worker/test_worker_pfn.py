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
    assert "ends" not in (pfn.root_problem("/disk/unmerged/", "site_specific") or "")
    assert "does not end with" in pfn.root_problem("/disk/unmerged/", "standard")  # type: ignore[operator]
    assert "not a canonical" in pfn.root_problem("/data/store/unmerged/../data/", "site_specific")  # type: ignore[operator]
    assert "not a canonical" in pfn.root_problem("root://h//", "site_specific")  # type: ignore[operator]
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
