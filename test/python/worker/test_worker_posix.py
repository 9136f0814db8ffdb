"""The worker zipapp against real POSIX folders: deletions, refusals, permissions, kills, deadlines."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Iterator

import pytest

from MSUnmerged.collector import parse_report
from MSUnmerged.worker import deleters
from MSUnmerged.worker.cleanup import Cleanup
from MSUnmerged.worker.deleters import Result, Seen
from MSUnmerged.worker.manifest import parse_manifest
from MSUnmerged.worker.report import ReportWriter
from worker_kit import (AS_NOBODY, put, SYSTEM_PYTHON, dirs, files, make_site, manifest, posix_world, run_worker,
                        summary, world_dir, worker_pyz)

BASE = "/store/unmerged/Run2024F/Muon0/AOD/PromptReco-v1"


@pytest.fixture()
def site() -> Iterator[tuple[Path, Path]]:
    """(storage root, SITECONFIG_PATH) of a POSIX test site, usable by the user nobody."""
    yield from posix_world("msunmerged-posix-")


def test_deletes_files_and_removes_emptied_dirs_leaf_first(site: tuple[Path, Path], tmp_path: Path) -> None:
    storage, sc = site
    lfns = [f"{BASE}/000/380/001/f{i}.root" for i in range(5)] + [f"{BASE}/00000/g{i}.root" for i in range(3)]
    for lfn in lfns:
        put(storage, lfn)
    other = put(storage, f"{BASE}/00001/not-in-job.root")
    gone = lfns[0]
    (storage / gone.lstrip("/")).unlink()  # already deleted by someone else
    remove = [f"{BASE}/000", f"{BASE}/000/380/001", f"{BASE}", f"{BASE}/000/380", f"{BASE}/00000"]
    rc, lines = run_worker(tmp_path / "job", manifest(lfns, remove_dirs=remove), sc)
    out = files(lines)
    assert rc == 0, summary(lines)
    assert out[gone]["outcome"] == "missing"
    assert all(out[lfn]["outcome"] == "deleted" and out[lfn]["attempts"] == 1 for lfn in lfns[1:])
    assert out[lfns[1]]["pfn"] == str(storage) + lfns[1]
    assert not any((storage / lfn.lstrip("/")).exists() for lfn in lfns)
    d = dirs(lines)
    order = [x["dir"] for x in lines if "dir" in x]
    assert order.index(f"{BASE}/000/380/001") < order.index(f"{BASE}/000/380") < order.index(f"{BASE}/000") \
        < order.index(BASE)
    assert d[f"{BASE}/000/380/001"]["outcome"] == "removed" and d[f"{BASE}/00000"]["outcome"] == "removed"
    # The base still holds a file of another job: reported, not an error, and that file is untouched.
    assert d[BASE]["outcome"] == "not_empty" and other.exists()
    s = summary(lines)
    assert s["exit_code"] == 0 and s["summary"]["files"] == {"deleted": 7, "missing": 1}
    assert lines[0]["start"]["method"]["deleter"] == "posix"


def test_dry_run_touches_nothing(site: tuple[Path, Path], tmp_path: Path) -> None:
    storage, sc = site
    lfns = [f"{BASE}/00000/f{i}.root" for i in range(4)]
    paths = [put(storage, lfn) for lfn in lfns]
    rc, lines = run_worker(tmp_path / "job", manifest(lfns, remove_dirs=[f"{BASE}/00000"], dry_run=True), sc)
    assert rc == 0
    assert {x["outcome"] for x in files(lines).values()} == {"dry_run"}
    assert dirs(lines)[f"{BASE}/00000"]["outcome"] == "dry_run"
    assert all(p.exists() for p in paths)


def test_protected_and_invalid_files_are_refused_and_kept(site: tuple[Path, Path], tmp_path: Path) -> None:
    storage, sc = site
    protected_base = f"{BASE}/000/381"
    keep = put(storage, f"{protected_base}/002/keep.root")
    fine = put(storage, f"{BASE}/000/380/001/fine.root")
    outside = storage / "store" / "data" / "x.root"
    outside.parent.mkdir(parents=True)
    outside.write_bytes(b"x")
    lfns = [f"{protected_base}/002/keep.root", f"{BASE}/000/380/001/fine.root", "/store/data/x.root",
            f"{BASE}/000/380/../381/002/keep.root", f"{BASE}//000/x.root", f"{BASE}/000/380/001/fine.root"]
    remove = [f"{BASE}/000/381/002", f"{BASE}/000/381", f"{BASE}/000", f"{BASE}/000/380/001",
              "/store/unmerged/Run2024F",
              f"{BASE}/000/380/001/../../381", "/store/unmerged/Run2024F/ZeroBias/AOD/v1"]
    rc, lines = run_worker(tmp_path / "job", manifest(lfns, remove_dirs=remove, protected=[protected_base + "/"],
                                                      keep_dirs=[f"{BASE}/000"]), sc)
    assert rc == 1
    report = [x for x in lines if "lfn" in x]
    assert [x["outcome"] for x in report if x["outcome"] == "refused"] == ["refused"] * 4
    by_error = {x["lfn"]: x["error"] for x in report if x["outcome"] == "refused"}
    assert by_error[f"{protected_base}/002/keep.root"] == "under a protected directory"
    assert by_error["/store/data/x.root"] == "not under /store/unmerged/"
    assert "'.' or '..'" in by_error[f"{BASE}/000/380/../381/002/keep.root"]
    assert by_error[f"{BASE}//000/x.root"] == "empty path component"
    # Listed twice: deleted once, one outcome line, the repeat counted in the summary.
    assert [x["outcome"] for x in report if x["lfn"] == f"{BASE}/000/380/001/fine.root"] == ["deleted"]
    assert summary(lines)["summary"]["duplicates_ignored"] == 1
    assert keep.exists() and outside.exists() and not fine.exists()
    d = dirs(lines)
    assert d[f"{BASE}/000/381/002"]["outcome"] == "refused"  # under a protected base
    assert d[f"{BASE}/000/381"]["outcome"] == "refused"  # the protected base itself
    assert d[f"{BASE}/000"]["outcome"] == "refused"  # kept, and above the protected base
    assert d["/store/unmerged/Run2024F"]["outcome"] == "refused"  # above the lowest removable level
    assert d["/store/unmerged/Run2024F/ZeroBias/AOD/v1"]["error"] == \
        "holds none of this job's files or retried directories"
    assert d[f"{BASE}/000/380/001"]["outcome"] == "removed"
    assert [d[x]["reason"] for x in (f"{BASE}/000/381/002", f"{BASE}/000/381", f"{BASE}/000",
                                     "/store/unmerged/Run2024F",
                                     f"{BASE}/000/380/001/../../381", "/store/unmerged/Run2024F/ZeroBias/AOD/v1",
                                     f"{BASE}/000/380/001")] == \
        ["protected", "kept", "kept", "above_floor", "invalid_lfn", "not_job_dir", None]
    assert {x["lfn"]: x["reason"] for x in report if x["outcome"] == "refused"} == {
        f"{protected_base}/002/keep.root": "protected", "/store/data/x.root": "invalid_lfn",
        f"{BASE}/000/380/../381/002/keep.root": "invalid_lfn", f"{BASE}//000/x.root": "invalid_lfn"}
    assert (storage / f"{BASE}/000/381/002".lstrip("/")).is_dir()


def test_permission_denied_as_nobody_then_stop_early(site: tuple[Path, Path], tmp_path: Path) -> None:
    storage, sc = site
    writable = [f"{BASE}/00000/w{i}.root" for i in range(3)]
    for lfn in writable:
        put(storage, lfn, owner="nobody")
    readonly = [f"{BASE}/00001/r{i}.root" for i in range(10)]
    for lfn in readonly:
        put(storage, lfn)  # owned by root, folder mode 755: nobody may not unlink
    man = manifest(writable + readonly, remove_dirs=[f"{BASE}/00000", f"{BASE}/00001"], max_consecutive_denied=4)
    rc, lines = run_worker(tmp_path / "job", man, sc, python=SYSTEM_PYTHON, prefix=AS_NOBODY)
    assert rc == 1
    out = files(lines)
    assert [out[lfn]["outcome"] for lfn in writable] == ["deleted"] * 3
    outcomes = [out[lfn]["outcome"] for lfn in readonly]
    # The storage refuses: real EACCES for the first 4, then the job stops and leaves the rest.
    assert outcomes == ["permission_denied"] * 4 + ["not_attempted"] * 6
    assert "Permission denied" in out[readonly[0]]["error"]
    assert all((storage / lfn.lstrip("/")).exists() for lfn in readonly)
    assert {d["outcome"] for d in dirs(lines).values()} == {"not_attempted"}
    assert "storage refused 4 deletions in a row" in summary(lines)["summary"]["error"]


def test_deadline_in_the_past_refuses_the_whole_job(site: tuple[Path, Path], tmp_path: Path) -> None:
    storage, sc = site
    lfns = [f"{BASE}/00000/f{i}.root" for i in range(3)]
    paths = [put(storage, lfn) for lfn in lfns]
    rc, lines = run_worker(tmp_path / "job", manifest(lfns, deadline=time.time() - 60), sc)
    assert rc == 2 and all(p.exists() for p in paths)
    assert {x["outcome"] for x in files(lines).values()} == {"not_attempted"}
    assert "deadline passed" in summary(lines)["summary"]["error"]


def test_a_protected_list_past_its_bound_deletes_nothing(site: tuple[Path, Path], tmp_path: Path) -> None:
    """The manifest's protected list may be used until `protected_until` (jobs.max_protection_age_s): a job that
    starts later (its service stopped past the bound) refuses every file, not_attempted with protection_expired."""
    storage, sc = site
    lfns = [f"{BASE}/00000/f{i}.root" for i in range(3)]
    paths = [put(storage, lfn) for lfn in lfns]
    fetched = time.time() - 120
    rc, lines = run_worker(tmp_path / "job", manifest(lfns, remove_dirs=[f"{BASE}/00000"], protected_at=fetched,
                                                      protected_until=fetched + 60), sc)
    assert rc == 2 and all(p.exists() for p in paths)
    assert {(x["outcome"], x["reason"], x["attempts"]) for x in files(lines).values()} == \
        {("not_attempted", "protection_expired", 0)}
    assert {(d["outcome"], d["reason"]) for d in dirs(lines).values()} == {("not_attempted", "protection_expired")}
    assert "may be used until" in summary(lines)["summary"]["error"]
    # Control: the same files with a list still in its bound are deleted.
    rc, lines = run_worker(tmp_path / "control", manifest(lfns, protected_at=time.time(),
                                                          protected_until=time.time() + 60), sc)
    assert rc == 0 and not any(p.exists() for p in paths)


def test_a_protected_list_that_expires_during_the_job_stops_it(site: tuple[Path, Path], tmp_path: Path) -> None:
    """Checked before each batch: files after the bound are left not_attempted (protection_expired)."""
    storage, sc = site
    lfns = [f"{BASE}/00000/f{i:02d}.root" for i in range(12)]
    for lfn in lfns:
        put(storage, lfn)
    # Paced at 4 operations a second (a look and an unlink a file): two files a second; the list expires 2 s after
    # the worker read its manifest (made then: its start-up, seconds on a busy machine, would eat the 2 s).
    rc, lines = run_worker(tmp_path / "job", lambda: manifest(lfns, max_ops_per_s=4, protected_until=time.time() + 2),
                           sc)
    out = files(lines)
    left = [lfn for lfn in lfns if out[lfn]["outcome"] == "not_attempted"]
    assert rc == 1 and left and len(left) < len(lfns)
    assert {out[lfn]["reason"] for lfn in left} == {"protection_expired"}
    assert all((storage / lfn.lstrip("/")).exists() for lfn in left)
    assert {out[lfn]["outcome"] for lfn in lfns if lfn not in left} == {"deleted"}


def test_a_manifest_without_protected_until_is_refused(site: tuple[Path, Path], tmp_path: Path) -> None:
    storage, sc = site
    path = put(storage, f"{BASE}/00000/f.root")
    man = manifest([f"{BASE}/00000/f.root"])
    del man["task"]["steps"][0]["protected_until"]
    rc, lines = run_worker(tmp_path / "job", man, sc)
    assert rc == 2 and path.exists()
    assert "protected_until is missing" in summary(lines)["summary"]["error"]


def test_unknown_command_is_a_configuration_error(tmp_path: Path) -> None:
    root = world_dir("msunmerged-posix-")
    storage = root / "storage"
    sc = make_site(root, [{"protocol": "posix", "prefix": str(storage)}],
                   [{"volume": "Test_Disk", "protocol": "posix", "command": "rfcp"}])
    path = put(storage, f"{BASE}/00000/f.root")
    rc, lines = run_worker(tmp_path / "job", manifest([f"{BASE}/00000/f.root"]), sc)
    assert rc == 3 and path.exists()
    assert "unknown stage-out command 'rfcp'" in summary(lines)["summary"]["error"]
    rc, lines = run_worker(tmp_path / "job2", manifest([f"{BASE}/00000/f.root"]), root / "nowhere")
    assert rc == 3 and "site-local-config not found" in summary(lines)["summary"]["error"]
    shutil.rmtree(root)


def test_unreadable_manifest_is_refused(tmp_path: Path, site: tuple[Path, Path]) -> None:
    _, sc = site
    man = manifest([f"{BASE}/f.root"])
    man["version"] = 99
    rc, lines = run_worker(tmp_path / "job", man, sc)
    assert rc == 2 and "manifest version 99" in summary(lines)["summary"]["error"]


def _start_big_job(storage: Path, sc: Path, workdir: Path, n: int) -> tuple[subprocess.Popen, list[str]]:
    lfns = [f"{BASE}/{i // 1000:05d}/f{i}.root" for i in range(n)]
    for i in range(0, n, 1000):
        (storage / lfns[i].lstrip("/")).parent.mkdir(parents=True)
    for lfn in lfns:
        open(storage / lfn.lstrip("/"), "wb").close()
    workdir.mkdir()
    (workdir / "manifest.json").write_text(json.dumps(manifest(lfns)))
    proc = subprocess.Popen([sys.executable, str(worker_pyz()), "manifest.json"], cwd=workdir,
                            env={"PATH": os.environ["PATH"], "SITECONFIG_PATH": str(sc)})
    report = workdir / "report.jsonl"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if report.exists() and report.read_bytes().count(b"\n") > 1000:
            return proc, lfns
        time.sleep(0.005)
    raise AssertionError("the worker wrote no file outcomes")


def test_killed_job_leaves_a_valid_partial_report(site: tuple[Path, Path], tmp_path: Path) -> None:
    storage, sc = site
    proc, lfns = _start_big_job(storage, sc, tmp_path / "job", 20_000)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    report = parse_report(tmp_path / "job" / "report.jsonl")
    assert not report.complete and report.start is not None
    assert all("incomplete" in p for p in report.problems)  # at most the line being written
    deleted = {f.lfn for f in report.files if f.outcome == "deleted"}
    assert 1000 <= len(deleted) < len(lfns)
    assert not any((storage / lfn.lstrip("/")).exists() for lfn in deleted)
    gone = sum(1 for lfn in lfns if not (storage / lfn.lstrip("/")).exists())
    # Files deleted but not yet reported: at most the batch in flight when the kill came.
    assert 0 <= gone - len(deleted) <= deleters.PosixDeleter.batch_size


def test_sigterm_stops_cleanly_with_a_summary(site: tuple[Path, Path], tmp_path: Path) -> None:
    storage, sc = site
    proc, lfns = _start_big_job(storage, sc, tmp_path / "job", 20_000)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(60) == 1
    report = parse_report(tmp_path / "job" / "report.jsonl")
    assert report.complete and report.exit_code == 1 and not report.problems
    assert len(report.files) == len(lfns)
    counts = report.counters()
    assert counts["deleted"] + counts["not_attempted"] == len(lfns) and counts["not_attempted"] > 0
    assert "stopped by signal 15" in report.summary["error"]  # type: ignore[index]
    left = sum(1 for lfn in lfns if (storage / lfn.lstrip("/")).exists())
    assert left == counts["not_attempted"]


@pytest.mark.parametrize("python", [sys.executable, SYSTEM_PYTHON])
def test_a_library_that_aborts_at_exit_does_not_crash_a_finished_job(site: tuple[Path, Path], tmp_path: Path,
                                                                     python: str) -> None:
    """A site's C library loaded by a deleter (gfal2's XrdCl) may abort while the interpreter finalises; the
    job ends before that, with its report's exit code. Here a finaliser that aborts stands for the library."""
    storage, sc = site
    lfns = [f"{BASE}/00000/f{i}.root" for i in range(3)]
    paths = [put(storage, lfn) for lfn in lfns]
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    (hooks / "sitecustomize.py").write_text("import atexit, os\natexit.register(os.abort)\n")
    rc, lines = run_worker(tmp_path / "job", manifest(lfns), sc, python=python, env={"PYTHONPATH": str(hooks)})
    assert rc == 0 and summary(lines)["exit_code"] == 0, summary(lines)
    assert not any(p.exists() for p in paths)
    aborts = subprocess.run([python, "-c", "pass"], env={"PYTHONPATH": str(hooks)}, timeout=60)
    assert aborts.returncode == -signal.SIGABRT  # the stand-in does abort a process that finalises


def test_watchdog_times_out_a_stuck_call_and_goes_on() -> None:
    release = threading.Event()
    stuck_ended: list[bool] = []

    def slow(item: str) -> Result:
        if item == "stuck":
            stuck_ended.append(release.wait(120))  # bounds a hang: a watchdog that waits for it ends here
        return Result(deleters.DELETED)

    try:
        results = deleters.watched_map(slow, ["a", "stuck", "b", "c"], timeout=1.0)
        assert stuck_ended == []  # answered while the stuck call was still stuck: it was not waited for
    finally:
        release.set()
    assert [r.outcome for r in results] == ["deleted", "timeout", "deleted", "deleted"]
    assert results[1].transient


class _Flaky(deleters.Deleter):
    """First answer: timeout for every file (the storage may have deleted it anyway); then the truth."""

    name = "flaky"

    def __init__(self, truth: dict[str, str]) -> None:
        super().__init__(1.0, {})
        self.truth = truth
        self.calls = 0

    def unlink(self, pfns: list[str], looks: list[deleters.Seen]) -> list[Result]:
        self.calls += 1
        if self.calls == 1:
            return [Result(deleters.TIMEOUT, "expired", True)] * len(pfns)
        return [Result(self.truth[p], "e", self.truth[p] == deleters.STORAGE_ERROR) for p in pfns]


def test_transient_errors_are_retried_with_bounded_attempts(tmp_path: Path) -> None:
    job = parse_manifest(manifest(["/store/unmerged/a/b/c/d/f.root"], retries=2, backoff_s=0.01))
    cleanup = Cleanup(job, ReportWriter.open(str(tmp_path / "r.jsonl")), {})
    flaky = _Flaky({"x": deleters.DELETED, "gone": deleters.MISSING, "bad": deleters.STORAGE_ERROR,
                    "no": deleters.DENIED})
    got = cleanup._with_retries(flaky, [("l1", "x"), ("l2", "gone"), ("l3", "bad"), ("l4", "no")], [Seen(size=1)] * 4)
    assert [(r.outcome, n) for r, n in got] == [("deleted", 2), ("deleted", 2), ("storage_error", 3),
                                                ("permission_denied", 2)]
    # Missing after an attempt that timed out: that attempt deleted it.
    assert "gone after an earlier attempt" in got[1][0].error  # type: ignore[operator]
    assert flaky.calls == 3


@pytest.mark.parametrize("dry_run", [False, True])
def test_a_line_naming_a_directory_or_a_fifo_is_not_a_file(site: tuple[Path, Path], tmp_path: Path,
                                                           dry_run: bool) -> None:
    """Issue 23: a plan line may name a directory (or a fifo): the look refuses it as not_a_file and nothing in
    it is touched; a link to a directory is a link and only the link goes. A dry run reports the same."""
    storage, sc = site
    inside = put(storage, f"{BASE}/000/380/001/inside.root")
    fifo = storage / f"{BASE}/000/fifo".lstrip("/")
    os.mkfifo(fifo)
    plain = put(storage, f"{BASE}/000/plain.root")
    link = storage / f"{BASE}/000/link".lstrip("/")
    link.symlink_to(inside.parent, target_is_directory=True)
    lfns = [f"{BASE}/000/380", f"{BASE}/000/380/001", f"{BASE}/000/fifo", f"{BASE}/000/plain.root", f"{BASE}/000/link"]
    rc, lines = run_worker(tmp_path / "job", manifest(lfns, dry_run=dry_run), sc)
    out = files(lines)
    assert rc == 1
    assert [(out[x]["outcome"], out[x]["reason"]) for x in lfns[:3]] == [("refused", "not_a_file")] * 3
    assert "is a directory, not a file" in out[lfns[0]]["error"] and "is a fifo" in out[lfns[2]]["error"]
    assert [out[x]["outcome"] for x in lfns[3:]] == ["dry_run" if dry_run else "deleted"] * 2
    assert inside.exists() and fifo.exists() and plain.exists() == dry_run and link.is_symlink() == dry_run


def test_a_job_whose_files_all_became_protected_is_done_not_partial(site: tuple[Path, Path], tmp_path: Path) -> None:
    """Files refused because they became protected after planning are the check working (the ledger records them
    skipped_protected): exit 0, not 1 "partial" (issue 39). Any other refusal beside them still makes it partial."""
    storage, sc = site
    lfns = [f"{BASE}/00000/p{i}.root" for i in range(3)]
    for lfn in lfns:
        put(storage, lfn)
    rc, lines = run_worker(tmp_path / "job", manifest(lfns, protected=[f"{BASE}/00000"]), sc)
    assert rc == 0 and {x["reason"] for x in files(lines).values()} == {"protected"}
    assert summary(lines)["summary"]["files"] == {"refused": 3}
    assert all((storage / x.lstrip("/")).exists() for x in lfns)
    rc, lines = run_worker(tmp_path / "job2", manifest([*lfns, "/store/data/x.root"], protected=[f"{BASE}/00000"]), sc)
    assert rc == 1 and files(lines)["/store/data/x.root"]["reason"] == "invalid_lfn"


def test_a_protected_list_that_expires_before_the_directories_leaves_them(site: tuple[Path, Path],
                                                                           tmp_path: Path) -> None:
    """Checked before each directory too: a directory job (no file) paced at one removal a second, its list
    expiring after 2.5 s, removes the first directories only; the others are left not_attempted
    (protection_expired), so that the service sends them again with a fresh list."""
    storage, sc = site
    wanted = [f"{BASE}/0000{i}" for i in range(6)]
    for directory in wanted:
        (storage / directory.lstrip("/")).mkdir(parents=True)
    rc, lines = run_worker(tmp_path / "job", manifest([], retry_dirs=wanted, max_ops_per_s=1,
                                                      protected_until=time.time() + 2.5), sc)
    out = dirs(lines)
    left = [d for d in wanted if out[d]["outcome"] == "not_attempted"]
    assert left and {out[d]["reason"] for d in left} == {"protection_expired"}
    assert all((storage / d.lstrip("/")).is_dir() for d in left)
    assert rc in (1, 2)  # partial, or refused whole when the worker started past the bound on a busy machine
