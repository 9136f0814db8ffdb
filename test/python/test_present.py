"""present.py: the readable values the page and the command line both show."""
from __future__ import annotations

import time

from MSUnmerged.present import (WAITING_WORDS, cycle_share, expected_end, next_slice, rate, shares, shares_label, size,
                                span, when)
from MSUnmerged.drainstatus import Waiting


def test_when() -> None:
    assert when(0) == "1970-01-01 00:00:00 UTC"
    assert when(1764582574.9) == time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(1764582574.9))
    assert when(None) == when(True) == when("1") == "never"


def test_size() -> None:
    assert [size(n) for n in (0, 999, 1000, 1_234_567, 5e12, 7e15)] == \
        ["0 B", "999 B", "1.0 kB", "1.2 MB", "5.0 TB", "7,000.0 TB"]


def test_shares_split_failures_from_deletions() -> None:
    assert shares_label({}) == "-"
    # 1,700 planned, 1,400 failed: not a full bar that looks like a clean one.
    c = {"to_delete": 1700, "deleted": 250, "missing": 50, "failed": 1300, "unknown": 100}
    assert shares(c) == {"deleted": 300, "would_delete": 0, "failed": 1400, "skipped_protected": 0, "pending": 0}
    assert shares_label(c) == "18% deleted · 82% failed"
    assert shares_label({"to_delete": 1000, "deleted": 995, "pending": 5}) == "100% deleted · <1% pending"
    assert shares_label({"to_delete": 4, "would_delete": 4}) == "100% would delete"


def test_drain_words() -> None:
    assert set(WAITING_WORDS) == {w.value for w in Waiting}  # every reason has its words
    assert [span(s) for s in (45, 600, 7200, 4 * 86400)] == ["45 s", "10 min", "2.0 h", "4.0 d"]
    assert rate({"rate_files_s": None}) == "-" and rate({"rate_files_s": 133.3}) == "133 files/s"
    assert expected_end({"backlog_files": 0}, 0) == "done"
    assert expected_end({"backlog_files": 5, "expected_end": None}, 0) == "unknown (no rate yet)"
    assert expected_end({"backlog_files": 5, "expected_end": 7200.0}, 0) == f"{when(7200.0)} (in 2.0 h)"
    d = {"slices": 4, "slice": 1, "next_slice_files": 6000, "next_slice_at": 3600.0}
    assert next_slice(d, 0) == f"slice 2 of 4 (6,000 files) at {when(3600.0)} (in 60 min)"
    assert next_slice({"slices": 0}, 0) == ""


def test_cycle_share() -> None:
    assert cycle_share({"to_delete": 10}) == ""
    assert cycle_share({"slices": 3, "slice": 1, "cycle_files": 4, "to_delete": 10_000}) == \
        "4 of 10,000 this cycle (slice 1 of 3)"
