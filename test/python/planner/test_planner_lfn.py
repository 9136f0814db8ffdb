"""LFN validation and component-wise prefix matching."""
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from MSUnmerged import lfn
from MSUnmerged.lfn import PrefixSet, ProtectionListError, classify_line, normalise_base

GOOD = b"/store/unmerged/Run2024F/Muon0/AOD/PromptReco-v1/000/380/123/ABC.root"


@pytest.mark.parametrize("raw, reason", [
    (b"/store/mc/Run3/X/AOD/v1/0000/a.root", lfn.OUTSIDE_UNMERGED),
    (b"store/unmerged/a/b.root", lfn.RELATIVE),
    (b"/store/unmerged/a/../b.root", lfn.DOT_COMPONENT),
    (b"/store/unmerged/a/./b.root", lfn.DOT_COMPONENT),
    (b"/store/unmerged//a/b.root", lfn.EMPTY_COMPONENT),
    (b"/store/unmerged/a/b/", lfn.TRAILING_SLASH),
    (b"/store/unmerged/a/b c.root", lfn.CONTROL_OR_SPACE),
    (b"/store/unmerged/a/b\tc.root", lfn.CONTROL_OR_SPACE),
    (b"/store/unmerged/a/b\x00c.root", lfn.CONTROL_OR_SPACE),
    (b"/store/unmerged/a/b\x7fc.root", lfn.CONTROL_OR_SPACE),
    (b"/store/unmerged/a/\xff\xfe.root", lfn.NON_UTF8),
    (b"/store/unmerged/" + b"x" * 2000, lfn.TOO_LONG),
])
def test_invalid_lines_are_classified(raw, reason):
    assert classify_line(raw, 1024) == (None, reason)


@pytest.mark.parametrize("raw", [GOOD, b"  " + GOOD + b"\r\n", b"\t" + GOOD + b" \n"])
def test_crlf_and_surrounding_whitespace_are_tolerated(raw):
    assert classify_line(raw, 1024) == (GOOD, None)


def test_blank_line_is_not_a_file():
    assert classify_line(b" \r\n", 1024) == (None, None)


def test_utf8_non_ascii_is_valid_but_unicode_space_is_not():
    assert classify_line("/store/unmerged/a/é.root".encode(), 1024)[1] is None
    assert classify_line("/store/unmerged/a/b\u00a0c.root".encode(), 1024)[1] == lfn.CONTROL_OR_SPACE


@pytest.mark.parametrize("base, expected", [
    ("/store/unmerged/a/b/", b"/store/unmerged/a/b"),
    ("//store//unmerged/a//b//", b"/store/unmerged/a/b"),
    (" /store/unmerged/a \n", b"/store/unmerged/a"),
    ("/store/data/Run2024/x", b"/store/data/Run2024/x"),  # outside /store/unmerged: still honoured
    ("/", b"/"),
])
def test_bases_are_normalised(base, expected):
    assert normalise_base(base) == expected


@pytest.mark.parametrize("base", ["store/unmerged/a", "/store/unmerged/../mc", "/store/unmerged/./a", "/a/b c"])
def test_uninterpretable_bases_are_refused(base):
    with pytest.raises(ProtectionListError):
        normalise_base(base)


def test_prefix_set_is_component_wise_at_any_depth():
    ps = PrefixSet(["/store/unmerged/E/P/T/proc-v1/", "/store/unmerged/D/P/AOD/Prompt-v1/000/380/123"])
    assert ps.covers(b"/store/unmerged/E/P/T/proc-v1")
    assert ps.covers(b"/store/unmerged/E/P/T/proc-v1/0000/a.root")
    assert not ps.covers(b"/store/unmerged/E/P/T/proc-v10/0000/a.root")
    assert not ps.covers(b"/store/unmerged/E/P/T")
    assert ps.covers(b"/store/unmerged/D/P/AOD/Prompt-v1/000/380/123/x.root")
    assert not ps.covers(b"/store/unmerged/D/P/AOD/Prompt-v1/000/380/124/x.root")
    assert not ps.covers(b"/store/unmerged/D/P/AOD/Prompt-v1/000/380/1234/x.root")


_PARTS = st.sampled_from(["store", "unmerged", "a", "b", "ab", "0000", "x.root"])


@settings(max_examples=600, deadline=None)
@given(bases=st.lists(st.lists(_PARTS, min_size=1, max_size=5), max_size=6),
       path=st.lists(st.sampled_from(["store", "unmerged", "a", "b", "ab", "0000", "x.root", ""]), max_size=7),
       absolute=st.booleans())
def test_covers_is_a_base_equal_to_a_leading_part_of_the_path(bases, path, absolute):
    """`covers` (which walks from the top and stops where the path leaves the bases' tree) answers as the
    definition does: some base equals the path or the path up to one of its slashes, on any path given."""
    ps = PrefixSet(["/" + "/".join(base) for base in bases])
    raw = ("/" if absolute else "") + "/".join(path)
    target = raw.encode()
    leading = {target} | {target[:i] for i in range(1, len(target)) if target[i:i + 1] == b"/"}
    assert ps.covers(target) == bool(leading & ps.prefixes)


def test_dir_state_and_holds_below():
    ps = PrefixSet(["/store/unmerged/A/B/C/D/0000/f1.root", "/store/unmerged/X/Y/Z/W"])
    assert ps.dir_state(b"/store/unmerged/A/B/C/D/0000") == PrefixSet.SOME
    assert ps.dir_state(b"/store/unmerged/X/Y/Z/W/0000") == PrefixSet.ALL
    assert ps.dir_state(b"/store/unmerged/X/Y/Z/V") == PrefixSet.NONE
    for d in (b"/store", b"/store/unmerged", b"/store/unmerged/A/B/C/D", b"/store/unmerged/A/B/C/D/0000",
              b"/store/unmerged/X/Y/Z/W", b"/store/unmerged/X/Y/Z/W/0000"):
        assert ps.holds_below(d), d
    assert not ps.holds_below(b"/store/unmerged/X/Y/Z/V")
    assert not ps.holds_below(b"/store/unmerged/A/B/C/D/0001")


def test_root_base_protects_everything():
    ps = PrefixSet(["/"])
    assert ps.covers(GOOD) and ps.dir_state(b"/store/unmerged/a") == PrefixSet.ALL


def test_prepared_by_list_builds_each_list_once_and_a_changed_list_anew():
    built = []
    prepared = lfn.PreparedByList(lambda items: built.append(items) or PrefixSet(items), keep=2)
    first = ["/store/unmerged/a", "/store/unmerged/b"]
    index = prepared(first)
    assert prepared(list(first)) is index  # an equal list, another object: the same index
    assert len(built) == 1
    # Any change (an entry more, fewer, another order, one character) is never served the old index.
    for changed in (first + ["/store/unmerged/c"], first[:1], first[::-1], ["/store/unmerged/a", "/store/unmerged/bb"]):
        other = prepared(changed)
        assert other is not index and other.prefixes == frozenset(normalise_base(p) for p in changed)
    assert not prepared(["/store/unmerged/a", "/store/unmerged/bb"]).covers(b"/store/unmerged/b/x.root")
    assert len(built) == 5


def test_prepared_by_list_keeps_no_refusal_and_only_the_last_lists():
    calls = []
    prepared = lfn.PreparedByList(lambda items: calls.append(1) or PrefixSet(items), keep=1)
    for _ in range(2):  # a refused list is refused every time, never remembered as anything
        with pytest.raises(ProtectionListError):
            prepared(["relative/path"])
    a = prepared(["/store/unmerged/a"])
    prepared(["/store/unmerged/b"])
    assert prepared(["/store/unmerged/a"]) is not a  # evicted: built again
    assert len(calls) == 5


def test_prepared_by_list_tells_apart_lists_a_separator_would_join():
    prepared = lfn.PreparedByList(lambda items: list(items), keep=4)
    joined = [prepared(["/a", "/b"]), prepared(["/a\n/b"]), prepared(["/a\x00/b"]), prepared(["/a/b"])]
    assert [len(made) for made in joined] == [2, 1, 1, 1] and len({id(made) for made in joined}) == 4
    assert prepared(("/a", "/b")) is joined[0]  # the same content from a tuple: the same preparation
