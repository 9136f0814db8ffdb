"""The order a cycle starts its RSEs in (service/rses.py order_rses): largest ConMon scan first, ties by name,
an RSE of unknown size before all others."""
from __future__ import annotations

from typing import Any

from MSUnmerged.guards import scan_files
from MSUnmerged.service.rses import order_rses


def scan(files: Any) -> dict[str, Any]:
    return {"status": "done", "end_time": 1.0, "files": files, "directories": 7}


def test_largest_first_and_ties_by_name() -> None:
    stats = {"T2_AA": scan(10), "T2_BB": scan(5_000_000), "T2_CC": scan(100_000), "T2_DD": scan(100_000),
             "T2_EE": scan(0)}
    assert order_rses(["T2_EE", "T2_DD", "T2_AA", "T2_CC", "T2_BB"], stats) == \
        ["T2_BB", "T2_CC", "T2_DD", "T2_AA", "T2_EE"]


def test_unknown_sizes_go_first_by_name() -> None:
    stats: dict[str, Any] = {
        "T2_BIG": scan(1_000_000), "T2_SMALL": scan(3),
        "T2_RUNNING": {"status": "started", "end_time": None},  # no `files` yet
        "T2_BOOL": scan(True),  # a bool is not a count
        "T2_TEXT": scan("500"), "T2_FLOAT": scan(5e6), "T2_NULL": scan(None),
        "T2_ODD": ["not", "a", "scan"],
    }
    names = ["T2_SMALL", "T2_BIG", "T2_TEXT", "T2_ODD", "T2_NOSCAN", "T2_NULL", "T2_FLOAT", "T2_BOOL", "T2_RUNNING"]
    assert order_rses(names, stats) == ["T2_BOOL", "T2_FLOAT", "T2_NOSCAN", "T2_NULL", "T2_ODD", "T2_RUNNING",
                                        "T2_TEXT", "T2_BIG", "T2_SMALL"]


def test_without_stats_the_order_is_by_name_and_each_rse_once() -> None:
    assert order_rses(["T2_ZZ", "T2_AA", "T2_MM", "T2_AA"], {}) == ["T2_AA", "T2_MM", "T2_ZZ"]
    assert order_rses([], {"T2_AA": scan(1)}) == []


def test_scan_files_is_the_guards_count() -> None:
    assert [scan_files(s) for s in (scan(12), scan(0), scan(True), scan(False), scan(1.0), scan("12"), {}, None,
                                    [("files", 3)])] == [12, 0, None, None, None, None, None, None, None]
