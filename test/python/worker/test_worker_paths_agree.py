"""The worker's path rules (worker/paths.py, standard library only, run at the site) and the planner's
(lfn.py) are written twice on purpose; these properties pin that they give the same answers."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from MSUnmerged import lfn
from MSUnmerged.worker import paths

MAX = paths.MAX_LFN
# Characters that matter to the rules: separators, dots, whitespace (ASCII and Unicode), controls, C1, non-ASCII.
ALPHABET = st.sampled_from(["/", "/", "/", ".", "..", "a", "b", "store", "unmerged", " ", "\t", "\x00", "\x1f",
                            "\x7f", "\x85", "\xa0", "\u2028", "é", "日", "-", "_"])
TEXT = st.lists(ALPHABET, max_size=14).map("".join)
PATH = st.one_of(TEXT, TEXT.map(lambda t: "/store/unmerged/" + t), TEXT.map(lambda t: "/store/" + t))
SET = st.lists(st.one_of(PATH, st.sampled_from(["/", "/store", "/store/unmerged", "/store/unmerged/a//b/"])),
               max_size=6)


@settings(max_examples=3000, deadline=None)
@given(PATH)
def test_a_path_is_canonical_for_both_or_for_neither(path: str) -> None:
    raw = path.encode("utf-8")
    line, reason = lfn.classify_line(raw, MAX)
    planner_ok = reason is None and line == raw  # the planner strips; a canonical plan line has nothing to strip
    assert planner_ok == (paths.problem(path) is None), (path, reason, paths.problem(path))


@settings(max_examples=2000, deadline=None)
@given(SET, PATH)
def test_covers_and_holds_below_agree(members: list[str], path: str) -> None:
    try:
        planner_set = lfn.PrefixSet(members)
    except lfn.ProtectionListError:
        return  # the planner refuses the whole list (fail closed): nothing is planned, nothing to agree on
    worker_set = paths.PathSet(members)
    if paths.problem(path) is not None and path not in ("/store", "/store/unmerged"):
        return  # the worker never asks about a path it refused
    encoded = path.encode("utf-8")
    assert planner_set.covers(encoded) == worker_set.covers(path), (members, path)
    # The planner keeps a directory that holds_below; the worker refuses one at_or_above or covered.
    assert planner_set.holds_below(encoded) == (worker_set.at_or_above(path) or worker_set.covers(path)), \
        (members, path)


@settings(max_examples=1000, deadline=None)
@given(PATH)
def test_depth_agrees(path: str) -> None:
    assert lfn.depth(path.encode("utf-8")) == paths.depth(path)


def test_the_unmerged_root_agrees() -> None:
    assert lfn.UNMERGED == paths.UNMERGED.encode("ascii")


def test_a_base_with_surrounding_space_protects_alike() -> None:
    """Found by the property above: the planner strips a base's surrounding whitespace, so must the worker."""
    base, lfn_ = "/store/unmerged/A/B/C/D-v1 ", "/store/unmerged/A/B/C/D-v1/000/f.root"
    assert lfn.PrefixSet([base]).covers(lfn_.encode()) and paths.PathSet([base]).covers(lfn_)
