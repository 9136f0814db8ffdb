"""Tables and values as the commands print them off a terminal (pipes, scripts)."""
from __future__ import annotations

import io

from MSUnmerged.cli.output import cell, moment, table

LFN = "/store/unmerged/Era/Primary/AOD/Proc-v1/000/" + "x" * 150 + ".root"


def test_table_keeps_long_lfns_and_brackets_whole() -> None:
    out = io.StringIO()
    table([(LFN, "failed", {"storage_error": 2, "timeout": 10_000}, "[3011] Unable to remove; [bold]x[/bold]"),
           ("/store/unmerged/a", "deleted", {}, None)], ("LFN", "state", "failed by class", "error"), out)
    lines = out.getvalue().splitlines()
    assert lines[0].split() == ["LFN", "state", "failed", "by", "class", "error"] and set(lines[1]) == {"─"}
    assert lines[2].startswith(LFN + " ") and lines[2].endswith("[3011] Unable to remove; [bold]x[/bold]")
    assert "storage_error 2, timeout 10,000" in lines[2]
    assert lines[3].split() == ["/store/unmerged/a", "deleted", "-", "-"]
    assert all(line == line.rstrip() for line in lines)


def test_values_and_times() -> None:
    assert [cell(v) for v in (None, "", {}, [], 1234567, True, ["a", 2])] == ["-", "-", "-", "-", "1,234,567",
                                                                             "yes", "a, 2"]
    assert moment(1_796_032_174, now=1_796_032_174 + 300) == "2026-11-30 09:49:34 UTC (5 min ago)"
    assert moment(1_796_032_174, now=1_796_032_174 + 3 * 86400).endswith("(3.0 d ago)")
    assert moment(None) == "-"
