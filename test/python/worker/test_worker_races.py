"""Issue 23: what changes at the site between the worker's look and its unlink. The real worker (Cleanup) and the
real POSIX deleter on a real folder; the attacker acts right after the look of a batch, which no timing of a
separate process can hit every time."""
from __future__ import annotations

import os
import shutil
import time
from pathlib import Path
from typing import Callable, Iterator

import pytest

from MSUnmerged.collector import parse_report
from MSUnmerged.worker import choose, deleters
from MSUnmerged.worker.cleanup import Cleanup
from MSUnmerged.worker.manifest import parse_manifest
from MSUnmerged.worker.report import ReportWriter
from worker_kit import AttackAfterLook, manifest, posix_site, put, world_dir

BASE = "/store/unmerged/Run2024F/Muon0/AOD/PromptReco-v1/000/380"
LFNS = [f"{BASE}/001/f{i}.root" for i in range(4)]


class Attacked(AttackAfterLook, deleters.PosixDeleter):
    """The POSIX deleter; `attack` runs once its look at a batch of files is done, before anything is unlinked."""


@pytest.fixture()
def storage(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    root = world_dir("msunmerged-races-")
    store = root / "storage"
    store.mkdir()
    monkeypatch.setitem(choose.COMMANDS, "cp", [Attacked])  # the site's stage-out command: cp (POSIX)
    monkeypatch.setenv("SITECONFIG_PATH", str(posix_site(root, store)))
    for lfn in LFNS:
        put(store, lfn)
    yield store
    shutil.rmtree(root, ignore_errors=True)


def run(tmp_path: Path, attack: Callable[[], None], dry_run: bool = False, **step: float) -> dict[str, tuple[str, str]]:
    """(outcome, reason) per file of a job over LFNS, the attacker acting after the look."""
    Attacked.attack = staticmethod(attack)  # type: ignore[assignment]
    path = tmp_path / "report.jsonl"
    writer = ReportWriter.open(str(path))
    Cleanup(parse_manifest(manifest(LFNS, dry_run=dry_run, **step)), writer, dict(os.environ)).run()
    writer.close()
    return {f.lfn: (f.outcome, f.reason or "") for f in parse_report(path).files}


def at(storage: Path, lfn: str) -> Path:
    return storage / lfn.lstrip("/")


def test_a_parent_swapped_away_is_path_changed_never_missing(storage: Path, tmp_path: Path) -> None:
    """The issue's run: the directory renamed away between the look and the unlink; the files are still on disk,
    so the record must not say `missing`: `path_changed`, retried."""
    folder = at(storage, f"{BASE}/001")
    out = run(tmp_path, lambda: os.rename(folder, folder.with_name("001.away")))
    assert set(out.values()) == {("refused", "path_changed")}
    assert all((folder.with_name("001.away") / Path(lfn).name).exists() for lfn in LFNS)


def test_a_directory_swapped_in_with_other_files_is_refused(storage: Path, tmp_path: Path) -> None:
    """Another directory with files of the same names (dated back) put in place between the look and the unlink:
    other inodes, refused; neither the swapped-in files nor the looked-at ones are removed."""
    folder = at(storage, f"{BASE}/001")

    def swap() -> None:
        os.rename(folder, folder.with_name("001.away"))
        for lfn in LFNS:
            os.utime(put(storage, lfn), (0, 0))

    out = run(tmp_path, swap)
    assert set(out.values()) == {("refused", "modified_since_scan")}
    assert all(at(storage, lfn).exists() and (folder.with_name("001.away") / Path(lfn).name).exists()
               for lfn in LFNS)


def test_a_file_replaced_by_a_directory_is_refused(storage: Path, tmp_path: Path) -> None:
    victim = at(storage, LFNS[0])

    def replace() -> None:
        os.rename(victim, victim.with_name("moved.root"))
        victim.mkdir()
        (victim / "inside.root").write_bytes(b"x")

    out = run(tmp_path, replace)
    assert out[LFNS[0]] == ("refused", "modified_since_scan")
    assert (victim / "inside.root").exists() and victim.with_name("moved.root").exists()
    assert [out[lfn] for lfn in LFNS[1:]] == [("deleted", "")] * 3


def test_a_dry_run_looks_the_same_and_touches_nothing(storage: Path, tmp_path: Path) -> None:
    out = run(tmp_path, lambda: None, dry_run=True)
    assert set(out.values()) == {("dry_run", "")}
    assert all(at(storage, lfn).exists() for lfn in LFNS)


def test_a_run_directory_moved_in_after_the_scan_is_refused(storage: Path, tmp_path: Path) -> None:
    """Issue 36: after the scan, the run directory is replaced by an older one moved in from /store/data holding
    files of the planned names. A rename keeps the files' ctime and the moved directory's mtime; its ctime moves:
    refused dir_moved_since_scan, nothing of it deleted. The next round (its scan after the move) deletes."""
    folder = at(storage, f"{BASE}/001")
    older = storage / "store" / "data" / "Run2024F" / "001"
    for lfn in LFNS:
        os.utime(put(storage, "/store/data/Run2024F/001/" + Path(lfn).name), (0, 0))
    os.utime(older, (0, 0))
    time.sleep(0.05)
    scan = time.time()
    time.sleep(0.05)
    os.rename(folder, folder.with_name("001.away"))
    os.rename(older, folder)
    out = run(tmp_path, lambda: None, scan_started=scan)
    assert set(out.values()) == {("refused", "dir_moved_since_scan")}
    assert all(at(storage, lfn).exists() for lfn in LFNS)
    time.sleep(0.05)
    out = run(tmp_path, lambda: None, scan_started=time.time())  # the next round
    assert set(out.values()) == {("deleted", "")}


def test_a_later_round_in_the_same_directory_still_deletes(storage: Path, tmp_path: Path) -> None:
    """The control: after the scan, the directory's content changed (a file of it deleted by another job, a new
    file written): its mtime moved with its ctime, the planned files go."""
    scan = time.time()
    time.sleep(0.05)
    at(storage, LFNS[3]).unlink()
    put(storage, f"{BASE}/001/new.root")
    out = run(tmp_path, lambda: None, scan_started=scan)
    assert [out[lfn] for lfn in LFNS[:3]] == [("deleted", "")] * 3
    assert at(storage, f"{BASE}/001/new.root").exists()
