"""guards.check_plan_lines: a plan file is accepted only when every line, read as bytes and split on b"\\n" only, is
exactly a canonical LFN below /store/unmerged; its fast path agrees with the line-by-line check."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from MSUnmerged import guards, lfn

PIECES = [b"/store/unmerged/", b"/store/data/", b"a", b"B9", b"-_", b"/", b"//", b".", b"..", b"\r", b"\x07",
          b" ", b"\t", b"\xc3\xa9", b"\xff", b"\x7f"]


def line_by_line(data: bytes, max_length: int) -> bool:
    return all(guards.line_problem(raw, max_length) is None for raw in guards.split_lines(data))


@settings(max_examples=400, deadline=None)
@given(lines=st.lists(st.lists(st.sampled_from(PIECES), max_size=8).map(b"".join), max_size=6),
       max_length=st.sampled_from([20, 1024]))
def test_the_fast_path_agrees_with_the_line_check(lines: list[bytes], max_length: int) -> None:
    data = b"".join(x + b"\n" for x in lines)
    try:
        n = guards.check_plan_lines(data, max_length, "jobs/x")
        accepted = True
    except guards.GuardTripped as exc:
        assert exc.reason == guards.PLAN_MODIFIED
        accepted = False
    assert accepted == line_by_line(data, max_length)
    if accepted:
        assert n == len(lines)


@pytest.mark.parametrize("bad, reason", [
    (b"/store/unmerged/a/b.root\r/store/unmerged/c/d.root", lfn.CONTROL_OR_SPACE),  # one line, never two
    (b"/store/unmerged/a/b.root\r", lfn.CONTROL_OR_SPACE),
    (b"", lfn.CONTROL_OR_SPACE),
    (b"/store/unmerged/../data/x", lfn.DOT_COMPONENT),
    (b"/store/data/x.root", lfn.OUTSIDE_UNMERGED),
    (b" /store/unmerged/a/b.root", lfn.CONTROL_OR_SPACE),
])
def test_a_bad_line_is_named_with_its_reason(bad: bytes, reason: str) -> None:
    with pytest.raises(guards.GuardTripped) as caught:
        guards.check_plan_lines(b"/store/unmerged/a/ok.root\n" + bad + b"\n", 1024, "jobs/job-000001.txt")
    assert caught.value.detail.startswith(f"jobs/job-000001.txt line 2 is not a valid LFN ({reason})")


def test_a_plan_to_apply_must_be_of_the_current_scan() -> None:
    """Issue 23: apply compares the plan's generation and scan start with ConMon's current scan."""
    scan = guards.check_scan({"status": "done", "start_time": 900.0, "end_time": 1000.0, "files": 3}, 48, 1000.0)
    assert scan == guards.Scan(1000.0, 900.0, 3)
    guards.check_plan_scan(1000.0, 900.0, scan)
    for generation, started, reason in [(None, None, guards.PLAN_SCAN_UNKNOWN), (1000.0, None, guards.PLAN_SCAN_UNKNOWN),
                                        (1000.0 + 30 * 86400, 900.0, guards.PLAN_NOT_FROM_CURRENT_SCAN),
                                        (1000.0, 900.0 + 10 * 86400, guards.PLAN_NOT_FROM_CURRENT_SCAN)]:
        with pytest.raises(guards.GuardTripped) as tripped:
            guards.check_plan_scan(generation, started, scan)
        assert tripped.value.reason == reason
