"""LFN validation and component-wise prefix matching."""
import pytest

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
