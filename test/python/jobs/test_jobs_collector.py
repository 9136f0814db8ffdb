"""Collector: strict report parsing (bad lines rejected by number, the rest kept) and ledger outcomes."""
from __future__ import annotations

import json
from pathlib import Path

from MSUnmerged.collector import Collector, MemorySink, ledger_outcome, parse_report
from MSUnmerged.jobs.backend import JobState, JobStatus

L = "/store/unmerged/A/B/C/D/"


def line(**rec: object) -> str:
    return json.dumps(rec)


def test_strict_parsing_keeps_good_lines(tmp_path: Path) -> None:
    good = {"pfn": "/x", "error": None, "attempts": 1}
    text = "\n".join([
        line(start={"job_id": "j"}),
        line(lfn=L + "a", outcome="deleted", **good),
        line(lfn=L + "b", outcome="exploded", **good),  # 3: unknown outcome
        "{not json",  # 4
        line(lfn=L + "c", outcome="missing", pfn=None, error="gone", attempts="1"),  # 5: wrong type
        line(lfn=L + "d", outcome="permission_denied", pfn="/d", error="EACCES", attempts=2),
        line(lfn=L + "a", outcome="deleted", **good),  # 7: second outcome
        line(dir=L + "x", pfn="/x", outcome="not_empty", error=None),
        line(lfn=L + "e", outcome="deleted", extra=1, **good),  # 9: unexpected key
        line(summary={"files": {}}, exit_code=1),
        line(lfn=L + "f", outcome="deleted", **good),  # 11: after the summary
    ]) + "\n"
    path = tmp_path / "r.jsonl"
    path.write_text(text)
    r = parse_report(path)
    assert [f.lfn for f in r.files] == [L + "a", L + "d"] and r.complete and r.exit_code == 1
    assert [p.split(":")[0] for p in r.problems] == ["line 3", "line 4", "line 5", "line 7", "line 9", "line 11"]
    assert "unknown file outcome 'exploded'" in r.problems[0] and "wrong type" in r.problems[2]
    assert "second outcome" in r.problems[3] and "unexpected keys ['extra']" in r.problems[4]
    assert r.counters() == {"deleted": 1, "permission_denied": 1} and r.dir_counters() == {"not_empty": 1}


def test_cut_off_report_and_collection(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    path.write_text(line(start={}) + "\n" + line(lfn=L + "a", pfn="/a", outcome="deleted", error=None, attempts=1)
                    + "\n" + line(lfn=L + "z", pfn="/z", outcome="deleted", error=None, attempts=1) + "\n"
                    + '{"lfn": "' + L + 'b", "pf')
    r = parse_report(path)
    assert not r.complete and len(r.files) == 2 and r.problems == ["line 4: incomplete (no newline; the worker was cut off)"]
    sink = MemorySink()
    got = Collector(sink).collect("j1", [L + "a", L + "b"], r, JobStatus("j1", JobState.FAILED, "b", "killed"))
    # A file the job did not hold is never recorded; unreported files are left to close_job (unknown).
    assert list(sink.outcomes["j1"]) == [L + "a"] and got.recorded == 1
    assert any(f"{L}z is not a file of job j1" in p for p in got.problems)
    state, reason = sink.closed["j1"]
    assert state == "failed" and "killed" in reason and "cut off" in reason


def test_ledger_states() -> None:
    from MSUnmerged.collector import FileOutcome
    def o(outcome: str, error: str = "e") -> dict:
        return ledger_outcome(FileOutcome(L + "f", "/p", outcome, error, 1, 1))
    assert o("dry_run")["state"] == "would_delete" and o("deleted")["error"] == ""
    assert (o("permission_denied")["state"], o("permission_denied")["error_class"]) == ("failed", "permission_denied")
    assert o("refused", "under a protected directory")["state"] == "skipped_protected"
    assert (o("refused", "empty path component")["state"], o("refused")["error_class"]) == ("failed", "refused")
    assert o("not_attempted")["state"] == "unknown"
