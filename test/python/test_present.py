"""present.py: the readable values the page and the command line both show."""
from __future__ import annotations

import time

from MSUnmerged.present import cycle_share, progress, size, when


def test_when() -> None:
    assert when(0) == "1970-01-01 00:00:00 UTC"
    assert when(1764582574.9) == time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(1764582574.9))
    assert when(None) == when(True) == when("1") == "never"


def test_size() -> None:
    assert [size(n) for n in (0, 999, 1000, 1_234_567, 5e12, 7e15)] == \
        ["0 B", "999 B", "1.0 kB", "1.2 MB", "5.0 TB", "7,000.0 TB"]


def test_progress() -> None:
    assert progress({}) == (0.0, "-")
    assert progress({"to_delete": 4, "pending": 1}) == (0.75, "75%")
    frac, label = progress({"to_delete": 4, "would_delete": 4})
    assert frac == 0.0 and label == "0% (dry run: 4 would be deleted)"


def test_cycle_share() -> None:
    assert cycle_share({"to_delete": 10}) == ""
    assert cycle_share({"slices": 3, "slice": 1, "cycle_files": 4, "to_delete": 10_000}) == \
        "4 of 10,000 this cycle (slice 1 of 3)"
