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
    assert not r.complete and len(r.files) == 2
    assert r.problems == ["line 4: incomplete (no newline; the worker was cut off)"]
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


def v2(**rec: object) -> str:
    """A report v2 file or directory line."""
    return line(**{"pfn": "/p", "error": None, "reason": None, **rec})


def test_report_v2_reasons_sizes_and_directories(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    path.write_text("\n".join([
        line(start={"job_id": "j", "report_version": 2}),
        v2(lfn=L + "a", outcome="deleted", attempts=1, size=1234),
        v2(lfn=L + "b", outcome="refused", attempts=0, size=None, reason="symlink_in_path", error="link at /store/x"),
        v2(lfn=L + "c", outcome="refused", attempts=0, size=None, reason="protected", error="under a protected base"),
        v2(lfn=L + "d", outcome="refused", attempts=0, size=7, reason="modified_since_scan"),
        v2(lfn=L + "e", outcome="not_attempted", attempts=0, size=None, reason="mapping_disagrees"),
        v2(lfn=L + "f", outcome="deleted", attempts=1, size=None, reason="no_such_reason"),  # 7: unknown reason
        v2(lfn=L + "g", outcome="deleted", attempts=1, size=-1),  # 8: negative size
        v2(lfn=L + "h", outcome="deleted", attempts=1, size=True),  # 9: a boolean is no size
        line(lfn=L + "i", pfn="/i", outcome="deleted", error=None, attempts=1),  # 10: v1 line in a v2 report
        v2(dir=L.rstrip("/"), outcome="removed"),
        v2(dir="/store/unmerged/A/B", outcome="refused", reason="symlink_in_path", error="B is a link"),
        v2(dir="/store/unmerged/Z/Y", outcome="removed"),  # not a directory of the job's files
        line(summary={}, exit_code=1),
    ]) + "\n")
    r = parse_report(path)
    assert [p.split(":")[0] for p in r.problems] == ["line 7", "line 8", "line 9", "line 10"]
    assert "unknown reason 'no_such_reason'" in r.problems[0] and "negative size" in r.problems[1]
    assert "wrong type" in r.problems[2] and "missing key 'reason'" in r.problems[3]
    sink = MemorySink()
    lfns = [L + x for x in "abcdefghi"]
    got = Collector(sink).collect("j", lfns, r, JobStatus("j", JobState.FINISHED, "1"))
    rec = sink.outcomes["j"]
    assert rec[L + "a"] == {"lfn": L + "a", "state": "deleted", "error_class": "", "error": "", "attempts": 1,
                            "size": 1234}
    assert (rec[L + "b"]["state"], rec[L + "b"]["error_class"], rec[L + "b"]["error"]) == \
        ("failed", "symlink_in_path", "link at /store/x")
    assert (rec[L + "c"]["state"], rec[L + "c"]["error_class"]) == ("skipped_protected", "protected")
    assert (rec[L + "d"]["state"], rec[L + "d"]["error_class"], rec[L + "d"]["size"]) == \
        ("failed", "modified_since_scan", 7)
    assert (rec[L + "e"]["state"], rec[L + "e"]["error_class"]) == ("unknown", "mapping_disagrees")
    assert sink.dirs["j"] == {
        L.rstrip("/"): {"dir": L.rstrip("/"), "state": "removed", "error_class": "", "error": "", "pfn": "/p"},
        "/store/unmerged/A/B": {"dir": "/store/unmerged/A/B", "state": "refused", "error_class": "symlink_in_path",
                                "error": "B is a link", "pfn": "/p"}}
    assert any("/store/unmerged/Z/Y is not a directory of job j's files or retried directories" in p
               for p in got.problems)


def test_report_v1_still_read_and_unknown_versions_refused(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    path.write_text("\n".join([
        line(start={"job_id": "j", "report_version": 1}),
        line(lfn=L + "a", pfn="/a", outcome="refused", error="under a protected directory", attempts=0),
        line(lfn=L + "b", pfn="/b", outcome="refused", error="empty path component", attempts=0),
        line(dir=L.rstrip("/"), pfn=None, outcome="refused", error="above the lowest removable level"),
        v2(lfn=L + "c", outcome="deleted", attempts=1, size=3),  # 5: v2 keys in a v1 report
    ]) + "\n")
    r = parse_report(path)
    assert r.problems == ["line 5: unexpected keys ['reason', 'size']"]
    assert [ledger_outcome(f)["state"] for f in r.files] == ["skipped_protected", "failed"]
    assert ledger_outcome(r.files[1])["error_class"] == "refused" and r.dirs[0].reason is None
    path.write_text(line(start={"report_version": 3}) + "\n" + v2(lfn=L + "a", outcome="deleted", attempts=1,
                                                                     size=1) + "\n")
    r = parse_report(path)
    assert not r.files and [p.split(":")[0] for p in r.problems] == ["line 1", "line 2"]
    assert all("report version 3 is not understood" in p for p in r.problems)


def test_files_left_for_an_expired_protected_list_keep_no_outcome_and_the_job_stays_open(tmp_path: Path) -> None:
    """protection_expired (the manifest's list past jobs.max_protection_age_s): those files are not recorded (they
    stay planned, their tries unchanged) and the job is not closed: its keeper re-issues it."""
    path = tmp_path / "r.jsonl"
    path.write_text("\n".join([
        line(start={"job_id": "j", "report_version": 2}),
        v2(lfn=L + "a", outcome="deleted", attempts=1, size=3),
        v2(lfn=L + "b", outcome="not_attempted", attempts=0, size=None, reason="protection_expired", error="old"),
        v2(lfn=L + "c", outcome="not_attempted", attempts=0, size=None, reason="protection_expired", error="old"),
        v2(lfn=L + "d", outcome="not_attempted", attempts=0, size=None, error="deadline passed during the job"),
        line(summary={"error": "old"}, exit_code=1),
    ]) + "\n")
    sink = MemorySink()
    got = Collector(sink).collect("j", [L + x for x in "abcd"], parse_report(path),
                                  JobStatus("j", JobState.FINISHED, "1"))
    assert got.reissued == 2 and not got.problems
    assert set(sink.outcomes["j"]) == {L + "a", L + "d"} and sink.outcomes["j"][L + "a"]["state"] == "deleted"
    assert "j" not in sink.closed
    # Without such a line the job is closed as before.
    path.write_text(path.read_text().replace("protection_expired", "mapping_disagrees"))
    got = Collector(sink).collect("j", [L + x for x in "abcd"], parse_report(path),
                                  JobStatus("j", JobState.FINISHED, "1"))
    assert got.reissued == 0 and "j" in sink.closed
    # A directory job refused for it: its directories say so.
    path.write_text("\n".join([
        line(start={"job_id": "d", "report_version": 2}),
        v2(dir=L.rstrip("/"), outcome="not_attempted", reason="protection_expired", error="old"),
        line(summary={"error": "old"}, exit_code=2),
    ]) + "\n")
    got = Collector(sink).collect("d", [], parse_report(path), JobStatus("d", JobState.FINISHED, "1"),
                                  other_dirs=lambda d: True)
    assert got.reissued == 1 and "d" not in sink.closed
