"""The worker zipapp and the load limits and directory work of issue 27: pacing of storage operations, the look
before deleting turned off (remote storage only), the RSE's path filters re-checked at the site, directories of
earlier plans retried, and the opt-in sweep of old empty directories below the datasets a job cleans."""
from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Iterator

import pytest

from MSUnmerged.worker.pace import Pacer
from test_worker_xrootd import xrootd_site
from worker_kit import dirs, files, manifest, posix_world, put, run_worker, summary, world_dir

BASE = "/store/unmerged/Run2024F/Muon0/AOD/PromptReco-v1"  # a dataset directory: 7 path elements


@pytest.fixture()
def site() -> Iterator[tuple[Path, Path]]:
    """(storage root, SITECONFIG_PATH) of a POSIX test site."""
    yield from posix_world("msunmerged-dirs-")


def make_dir(storage: Path, lfn: str) -> Path:
    """A directory (and its parents) at `lfn`, made now."""
    path = storage / lfn.lstrip("/")
    path.mkdir(parents=True, exist_ok=True)
    return path


def scan_starts() -> float:
    """A scan starting now: what exists is older than it, what is made next is newer (ctime cannot be dated back)."""
    time.sleep(0.02)
    started = time.time()
    time.sleep(0.02)
    return started


def test_pacer_keeps_the_average_rate() -> None:
    now = [100.0]
    waits: list[float] = []

    def sleep(s: float) -> None:
        waits.append(s)
        now[0] += s
    pacer = Pacer(10.0, clock=lambda: now[0], sleep=sleep)
    assert pacer.batch(500) == 10 and Pacer(0).batch(500) == 500
    for _ in range(5):
        pacer.take(10)  # instantaneous batches of 10 operations
    assert now[0] - 100.0 == pytest.approx(4.0)  # the fifth batch starts 4 s after the first
    assert not Pacer(0, clock=lambda: now[0], sleep=sleep).take(1000) and len(waits) == 4


def test_paced_job_spreads_its_operations(site: tuple[Path, Path], tmp_path: Path) -> None:
    storage, sc = site
    lfns = [f"{BASE}/00000/f{i}.root" for i in range(12)]
    for lfn in lfns:
        put(storage, lfn)
    rc, lines = run_worker(tmp_path / "job", manifest(lfns, max_ops_per_s=8.0), sc)
    assert rc == 0 and {x["outcome"] for x in files(lines).values()} == {"deleted"}
    # Batches of 8 (one second of operations): looks of 8, unlinks of 8, looks of 4, then the last 4 unlinks,
    # which may not start before 20 operations' worth of time at 8 a second.
    assert summary(lines)["summary"]["seconds"] >= 20 / 8


def test_path_filters_are_checked_again_at_the_site(site: tuple[Path, Path], tmp_path: Path) -> None:
    storage, sc = site
    logs, other, fine = f"{BASE}/logs/a.tar", "/store/unmerged/Run2024F/Other/AOD/X-v1/000/b.root", f"{BASE}/000/c.root"
    for lfn in (logs, other, fine):
        put(storage, lfn)
    man = manifest([logs, other, fine], remove_dirs=[BASE, f"{BASE}/000"], exclude=[f"{BASE}/logs"],
                   include=["/store/unmerged/Run2024F/Muon0"])
    rc, lines = run_worker(tmp_path / "job", man, sc)
    out, d = files(lines), dirs(lines)
    assert [(out[x]["outcome"], out[x]["reason"]) for x in (logs, other)] == [("refused", "excluded")] * 2
    assert out[fine]["outcome"] == "deleted" and (storage / logs.lstrip("/")).exists()
    assert (d[BASE]["outcome"], d[BASE]["reason"]) == ("refused", "excluded")  # an excluded path below it
    assert d[f"{BASE}/000"]["outcome"] == "removed"
    assert rc == 1  # the refused files


def test_directories_of_earlier_plans_are_retried(site: tuple[Path, Path], tmp_path: Path) -> None:
    storage, sc = site
    emptied, emptied_parent = make_dir(storage, f"{BASE}/000/111"), f"{BASE}/000"
    put(storage, f"{BASE}/001/still-here.root")
    put(storage, f"{BASE}/002/p/x.root")
    retry = [f"{BASE}/000/111", emptied_parent, f"{BASE}/001", f"{BASE}/002", "/store/unmerged/Run2024F"]
    man = manifest([], retry_dirs=retry, protected=[f"{BASE}/002/p"], keep_dirs=[f"{BASE}/002"],
                   dir_floor_depth=7)
    rc, lines = run_worker(tmp_path / "job", man, sc)
    d = dirs(lines)
    assert d[f"{BASE}/000/111"]["outcome"] == d[emptied_parent]["outcome"] == "removed" and not emptied.exists()
    assert d[f"{BASE}/001"]["outcome"] == "not_empty"
    assert (d[f"{BASE}/002"]["outcome"], d[f"{BASE}/002"]["reason"]) == ("refused", "kept")
    assert (d["/store/unmerged/Run2024F"]["outcome"], d["/store/unmerged/Run2024F"]["reason"]) == \
        ("refused", "above_floor")
    assert (storage / "store/unmerged/Run2024F").is_dir() and rc == 1  # the unexpected above_floor refusal


def test_a_directory_job_removes_the_emptied_parents_it_is_given_and_nothing_else(site: tuple[Path, Path],
                                                                                 tmp_path: Path) -> None:
    """A directory job of the dump that planned its directories is given, as make_job gives them, the plan's
    removable directories holding its retried ones, and the retried ones among them: they are its own (no
    not_job_dir); a given directory holding none of them is still refused, and so is one that holds only a
    retried directory refused itself."""
    storage, sc = site
    retried = [make_dir(storage, f"{BASE}/000/111"), make_dir(storage, f"{BASE}/000/112")]
    put(storage, f"{BASE}/001/another-job.root")
    stranger, bad_parent = make_dir(storage, f"{BASE}/002"), make_dir(storage, f"{BASE}/003")
    bad = f"{BASE}/003/./x"  # not canonical: refused, and the directory above it is no directory of the job
    given = [f"{BASE}/000/111", f"{BASE}/000", BASE, f"{BASE}/002", f"{BASE}/003"]
    man = manifest([], remove_dirs=given, retry_dirs=[f"{BASE}/000/111", f"{BASE}/000/112", bad], dir_floor_depth=7)
    rc, lines = run_worker(tmp_path / "job", man, sc)
    d = dirs(lines)
    assert {x: d[x]["outcome"] for x in (f"{BASE}/000/111", f"{BASE}/000/112", f"{BASE}/000", BASE)} == {
        f"{BASE}/000/111": "removed", f"{BASE}/000/112": "removed", f"{BASE}/000": "removed", BASE: "not_empty"}
    assert not any(p.exists() for p in retried) and not (storage / f"{BASE}/000".lstrip("/")).exists()
    assert [(d[x]["outcome"], d[x]["reason"]) for x in (f"{BASE}/002", f"{BASE}/003", bad)] == [
        ("refused", "not_job_dir"), ("refused", "not_job_dir"), ("refused", "invalid_lfn")]
    assert stranger.is_dir() and bad_parent.is_dir() and rc == 1  # the unexpected refusals
    order = [x["dir"] for x in lines if "dir" in x]
    assert order.index(f"{BASE}/000/111") < order.index(f"{BASE}/000") < order.index(BASE)


@pytest.mark.parametrize("dry_run", [False, True])
def test_sweep_removes_old_empty_directories_below_the_dataset(site: tuple[Path, Path], tmp_path: Path,
                                                              dry_run: bool) -> None:
    storage, sc = site
    job_file = f"{BASE}/000/100/f.root"
    put(storage, job_file)
    nested = [make_dir(storage, f"{BASE}/001/a/b/c"), storage / f"{BASE}/001/a/b".lstrip("/"),
              storage / f"{BASE}/001/a".lstrip("/"), storage / f"{BASE}/001".lstrip("/")]
    linked = make_dir(storage, f"{BASE}/003")
    os.symlink("/etc", linked / "link")
    protected = make_dir(storage, f"{BASE}/004/keep")
    excluded = make_dir(storage, f"{BASE}/005")
    other_dataset = make_dir(storage, "/store/unmerged/Run2024F/Muon0/AOD/Other-v1/000")
    moved = make_dir(storage, f"{BASE}/006/old")
    scan = scan_starts()
    young = make_dir(storage, f"{BASE}/002")  # made after the scan started: a job may be about to write there
    os.rename(moved, storage / f"{BASE}/006/moved-in".lstrip("/"))  # renamed after the scan: its ctime moved
    man = manifest([job_file], remove_dirs=[f"{BASE}/000/100", f"{BASE}/000"], scan_started=scan, dry_run=dry_run,
                   sweep_empty_dirs=True, dir_floor_depth=7, protected=[f"{BASE}/004/keep"],
                   keep_dirs=[f"{BASE}/004"], exclude=[f"{BASE}/005"])
    rc, lines = run_worker(tmp_path / "job", man, sc)
    assert rc == 0, summary(lines)
    assert lines[0]["start"]["method"]["sweep"] == "on"
    d = dirs(lines)
    swept = {f"{BASE}/001/a/b/c", f"{BASE}/001/a/b", f"{BASE}/001/a", f"{BASE}/001"}
    assert {k for k, v in d.items() if v["outcome"] == ("dry_run" if dry_run else "removed")} == \
        swept | {f"{BASE}/000/100", f"{BASE}/000"}
    order = [x["dir"] for x in lines if "dir" in x]
    assert order.index(f"{BASE}/001/a/b/c") < order.index(f"{BASE}/001/a/b") < order.index(f"{BASE}/001")
    assert all(p.is_dir() == dry_run for p in nested)
    # Never touched or reported: too young, renamed in after the scan (and so its parent), holding a link,
    # protected, excluded, another dataset, the dataset directory itself.
    for kept in (young, storage / f"{BASE}/006/moved-in".lstrip("/"), linked, protected, protected.parent, excluded,
                 other_dataset, storage / BASE.lstrip("/")):
        assert kept.is_dir() and not any(str(kept).endswith(x) for x in d), kept
    assert os.path.islink(linked / "link")


def test_sweep_is_off_unless_asked(site: tuple[Path, Path], tmp_path: Path) -> None:
    storage, sc = site
    job_file = f"{BASE}/000/f.root"
    put(storage, job_file)
    empty = make_dir(storage, f"{BASE}/009")
    rc, lines = run_worker(tmp_path / "job", manifest([job_file], scan_started=scan_starts()), sc)
    assert rc == 0 and empty.is_dir() and not dirs(lines) and lines[0]["start"]["method"]["sweep"] == "off"


@pytest.mark.integration
def test_look_turned_off_skips_the_remote_stat_only(xrootd_server, site: tuple[Path, Path], tmp_path: Path) -> None:
    """Remote storage: no stat per file, so a file modified after the scan is deleted (docs/jobs.md says so);
    local storage keeps its look (the walk that refuses links), whatever the setting."""
    started = scan_starts()
    new = f"{BASE}-look/00000/new.root"
    xrootd_server.put(new)  # written after the scan started
    sc = xrootd_site(world_dir("msunmerged-xrd-"), xrootd_server.url, "xrdcp")
    rc, lines = run_worker(tmp_path / "remote", manifest([new], scan_started=started, look_before_delete=False), sc,
                           prefix=["nsenter", "-t", str(xrootd_server.pid), "-n"])
    assert lines[0]["start"]["method"]["checks"] == "none" and rc == 0
    assert files(lines)[new]["outcome"] == "deleted" and not (xrootd_server.data / new.lstrip("/")).exists()
    storage, posix = site
    put(storage, new)
    rc, lines = run_worker(tmp_path / "local", manifest([new], scan_started=started, look_before_delete=False), posix)
    assert lines[0]["start"]["method"]["checks"] == "lstat"
    assert (files(lines)[new]["outcome"], files(lines)[new]["reason"]) == ("refused", "modified_since_scan")
