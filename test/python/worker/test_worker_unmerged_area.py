"""Deletion never leaves the physical unmerged area (POSIX, the real zipapp, real files and links).

Each test builds a site storage holding links and hostile storage.json rules, snapshots the whole
tree without following links, runs the worker for real and checks that only the plain deletable
files (and their emptied directories) under the physical /store/unmerged/ went.
"""
from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from typing import Any, Iterator

import pytest

from worker_kit import (HOSTILE, VOLUME, changes, dirs, files, hostile_site, make_site, manifest, posix_site, put,
                        run_worker, snapshot, summary, world_dir)

BASE = "/store/unmerged/Run2024F/Muon0/AOD/PromptReco-v1"
LINKED = "/store/unmerged/Run2024F/Linked/AOD/v1"


class Area:
    """A test site: <top>/storage/store/{unmerged,data}, <top>/outside, and its SITECONFIG_PATH."""

    def __init__(self, top: Path) -> None:
        self.top = top
        self.storage = top / "storage"
        self.unmerged = self.storage / "store" / "unmerged"
        self.data = self.storage / "store" / "data"
        self.outside = top / "outside"
        for d in (self.storage, self.unmerged, self.data, self.outside):
            d.mkdir(parents=True, exist_ok=True)
        self.sc = posix_site(top, self.storage)

    def at(self, lfn: str) -> Path:
        return self.storage / lfn.lstrip("/")

    def check(self, before: dict[str, tuple], gone: set[Path], physical: Path | None = None) -> None:
        """Exactly `gone` disappeared, all of it in the physical unmerged area; nothing else changed."""
        lost, changed = changes(before, snapshot(self.top))
        assert lost == {str(p) for p in gone}
        assert not changed
        real = os.path.realpath(physical or self.unmerged) + "/"
        assert all(os.path.realpath(p.parent).startswith(real) for p in gone)


@pytest.fixture()
def area() -> Iterator[Area]:
    top = world_dir("msunmerged-area-")
    yield Area(top)
    shutil.rmtree(top, ignore_errors=True)


def _links(area: Area) -> dict[str, Any]:
    """The tree of the issue: a dataset directory linked into /store/data, a run directory linked
    (relatively) outside the storage, a file link to an outside file, and plain files."""
    plain = [f"{BASE}/00000/f{i}.root" for i in range(3)]
    for lfn in plain:
        put(area.storage, lfn)
    target = area.data / "Run2024F" / "Linked" / "AOD" / "v1"
    put(area.data, "/Run2024F/Linked/AOD/v1/00000/d0.root")
    area.at(LINKED).parent.mkdir(parents=True)
    area.at(LINKED).symlink_to(target, target_is_directory=True)
    put(area.outside, "/run/001/o.root")
    run = area.at(f"{BASE}/000/380")
    run.parent.mkdir(parents=True)
    run.symlink_to(os.path.relpath(area.outside / "run", run.parent), target_is_directory=True)
    secret = area.outside / "secret.root"
    secret.write_bytes(b"secret")
    area.at(f"{BASE}/00000/link.root").symlink_to(secret)
    return {"plain": plain, "through": [f"{LINKED}/00000/d0.root", f"{BASE}/000/380/001/o.root"],
            "link": f"{BASE}/00000/link.root",
            "dirs": [f"{BASE}/00000", f"{BASE}/000/380/001", f"{BASE}/000/380", f"{BASE}/000", f"{LINKED}/00000", LINKED]}


@pytest.mark.parametrize("dry_run", [False, True])
def test_no_link_is_followed(area: Area, tmp_path: Path, dry_run: bool) -> None:
    tree = _links(area)
    before = snapshot(area.top)
    lfns = tree["plain"] + tree["through"] + [tree["link"]]
    rc, lines = run_worker(tmp_path / "job", manifest(lfns, remove_dirs=tree["dirs"], dry_run=dry_run), area.sc)
    assert rc == 1, summary(lines)
    out = files(lines)
    good = "dry_run" if dry_run else "deleted"
    assert [(out[x]["outcome"], out[x]["reason"], out[x]["size"]) for x in tree["plain"]] == [(good, None, 1)] * 3
    # A file that is a link: only the link goes (its size is the link's own).
    assert out[tree["link"]]["outcome"] == good and out[tree["link"]]["size"] == len(str(area.outside / "secret.root"))
    for lfn in tree["through"]:
        assert (out[lfn]["outcome"], out[lfn]["reason"]) == ("refused", "symlink_in_path"), out[lfn]
    d = dirs(lines)
    for x in tree["dirs"][1:3] + tree["dirs"][4:]:
        assert (d[x]["outcome"], d[x]["reason"]) == ("refused", "symlink_in_path"), d[x]
    assert d[f"{BASE}/00000"]["outcome"] == ("dry_run" if dry_run else "removed")
    assert d[f"{BASE}/000"]["outcome"] == ("dry_run" if dry_run else "not_empty")
    gone = set() if dry_run else {area.at(x) for x in tree["plain"] + [tree["link"], f"{BASE}/00000"]}
    area.check(before, gone)


def test_unmerged_root_that_is_a_link_refuses_everything(area: Area, tmp_path: Path) -> None:
    put(area.data, "/Run2024F/Muon0/AOD/PromptReco-v1/00000/f.root")
    area.unmerged.rmdir()
    area.unmerged.symlink_to(area.data, target_is_directory=True)  # /store/unmerged -> /store/data
    before = snapshot(area.top)
    rc, lines = run_worker(tmp_path / "job", manifest([f"{BASE}/00000/f.root"], remove_dirs=[f"{BASE}/00000"]),
                           area.sc)
    assert rc == 1
    assert files(lines)[f"{BASE}/00000/f.root"]["reason"] == "symlink_in_path"
    assert dirs(lines)[f"{BASE}/00000"]["reason"] == "symlink_in_path"
    area.check(before, set())


def test_links_above_the_unmerged_root_are_the_sites_layout(area: Area, tmp_path: Path) -> None:
    lfns = [f"{BASE}/00000/f{i}.root" for i in range(2)]
    for lfn in lfns:
        put(area.storage, lfn)
    mnt = area.top / "mnt"
    mnt.symlink_to(area.storage, target_is_directory=True)  # /mnt/storage -> /data at many sites
    sc = make_site(area.top, [{"protocol": "posix", "prefix": str(mnt)}],
                   [{"volume": VOLUME, "protocol": "posix", "command": "cp"}])
    rc, lines = run_worker(tmp_path / "job", manifest(lfns, remove_dirs=[f"{BASE}/00000"]), sc)
    assert rc == 0, summary(lines)
    assert {x["outcome"] for x in files(lines).values()} == {"deleted"}
    assert not area.at(f"{BASE}/00000").exists()


def _plant(area: Area, n: int = 2) -> tuple[list[str], list[str]]:
    """Job files in 00000 and 00001, each also present under /store/data/ (where a bad rule points)."""
    ok = [f"{BASE}/00000/f{i}.root" for i in range(n)]
    other = [f"{BASE}/00001/g{i}.root" for i in range(n)]
    for lfn in ok + other:
        put(area.storage, lfn)
        put(area.data, lfn[len("/store/unmerged"):])
    return ok, other


@pytest.mark.parametrize("variant", HOSTILE)
@pytest.mark.parametrize("dry_run", [False, True])
def test_hostile_storage_json_deletes_nothing_outside(area: Area, tmp_path: Path, variant: str, dry_run: bool) -> None:
    ok, other = _plant(area)
    area.sc = hostile_site(area.top, str(area.storage), "posix", "cp", variant)
    before = snapshot(area.top)
    man = manifest(ok + other, remove_dirs=[f"{BASE}/00000", f"{BASE}/00001"], dry_run=dry_run)
    rc, lines = run_worker(tmp_path / "job", man, area.sc)
    assert rc == 1, summary(lines)
    out, d = files(lines), dirs(lines)
    refused = other if variant == "one_dataset" else ok + other
    for lfn in refused:
        assert (out[lfn]["outcome"], out[lfn]["reason"]) == ("refused", "pfn_outside_unmerged"), out[lfn]
    # The one_dataset rule sends only files to /store/data; the directory itself maps inside.
    assert d[f"{BASE}/00001"]["reason"] == (None if variant == "one_dataset" else "pfn_outside_unmerged")
    fine = [x for x in ok + other if x not in refused]
    assert {out[x]["outcome"] for x in fine} <= {"dry_run" if dry_run else "deleted"}
    gone = {area.at(x) for x in fine} | ({area.at(f"{BASE}/00000")} if fine else set())
    area.check(before, set() if dry_run else gone)


@pytest.mark.parametrize("dry_run", [False, True])
def test_rucio_disagreeing_refuses_the_whole_job(area: Area, tmp_path: Path, dry_run: bool) -> None:
    ok, other = _plant(area)
    put(area.outside, "/store/unmerged" + ok[0][len("/store/unmerged"):])  # where the bad prefix points
    area.sc = make_site(area.top, [{"protocol": "posix", "prefix": str(area.outside)}],
                        [{"volume": VOLUME, "protocol": "posix", "command": "cp"}])
    before = snapshot(area.top)
    man = manifest(ok + other, remove_dirs=[f"{BASE}/00000"], unmerged_pfn=f"{area.unmerged}/", mapping_check="rucio",
                   dry_run=dry_run)
    rc, lines = run_worker(tmp_path / "job", man, area.sc)
    assert rc == 3
    assert {(x["outcome"], x["reason"]) for x in lines if "lfn" in x or "dir" in x} == {("refused", "mapping_disagrees")}
    assert lines[0]["start"]["method"]["unmerged_pfn"] == f"{area.outside}/store/unmerged/"
    assert "Rucio's is" in summary(lines)["summary"]["error"]
    area.check(before, set())


@pytest.mark.parametrize("rucio", ["file://{u}", "{u}/", "file://localhost{u}//"])
def test_rucio_agreeing_lets_the_job_run(area: Area, tmp_path: Path, rucio: str) -> None:
    ok, _ = _plant(area)
    man = manifest(ok, unmerged_pfn=rucio.format(u=area.unmerged), mapping_check="rucio")
    rc, lines = run_worker(tmp_path / "job", man, area.sc)
    assert rc == 0, summary(lines)
    assert not any(area.at(x).exists() for x in ok)


def test_site_specific_layout_relaxes_only_the_lfn_suffix(area: Area, tmp_path: Path) -> None:
    disk = area.storage / "unmerged-disk"
    ok = [f"{BASE}/00000/f{i}.root" for i in range(2)]
    other = [f"{BASE}/00001/g0.root"]
    for lfn in ok:
        put(disk, lfn[len("/store/unmerged"):])
    for lfn in other:
        put(area.data, lfn[len("/store/unmerged"):])
    area.sc = make_site(area.top, [{"protocol": "posix", "rules": [
        {"lfn": "/+store/unmerged/(.*/00001/.*)", "pfn": f"{area.storage}/store/data/$1"},
        {"lfn": "/+store/unmerged/(.*)", "pfn": f"{disk}/$1"}]}], [{"volume": VOLUME, "protocol": "posix", "command": "cp"}])
    before = snapshot(area.top)
    rc, lines = run_worker(tmp_path / "std", manifest(ok + other), area.sc)
    assert rc == 1 and {x["reason"] for x in files(lines).values()} == {"pfn_outside_unmerged"}
    assert "does not end with /store/unmerged/" in files(lines)[ok[0]]["error"]
    area.check(before, set())
    rc, lines = run_worker(tmp_path / "site", manifest(ok + other, pfn_layout="site_specific", unmerged_root=f"{disk}/"),
                           area.sc)
    out = files(lines)
    assert rc == 1 and [out[x]["outcome"] for x in ok] == ["deleted"] * 2
    assert out[other[0]]["reason"] == "pfn_outside_unmerged" and "not below" in out[other[0]]["error"]
    area.check(before, {disk / x[len("/store/unmerged/"):] for x in ok}, physical=disk)


@pytest.mark.parametrize("dry_run", [False, True])
def test_files_modified_since_the_scan_are_refused(area: Area, tmp_path: Path, dry_run: bool) -> None:
    """Written after the scan started, or (issue 23) recreated with the old mtime set back, or a new file renamed
    into place with an old mtime: the ctime tells, and the file stays. A dry run reports the same refusals."""
    old = [f"{BASE}/00000/old{i}.root" for i in range(2)]
    new = [f"{BASE}/00000/new{i}.root" for i in range(2)]
    rewritten, renamed = f"{BASE}/00000/rewritten.root", f"{BASE}/00000/renamed.root"
    for lfn in old + [rewritten, renamed]:
        put(area.storage, lfn)
    started = time.time()
    time.sleep(0.05)  # file times come from the kernel's coarse clock: clearly after the start
    for lfn in new:
        put(area.storage, lfn)  # written after the scan started
    area.at(rewritten).unlink()
    os.utime(put(area.storage, rewritten), (started - 1000, started - 1000))
    elsewhere = put(area.storage, "/store/unmerged/Elsewhere/x.root")
    os.utime(elsewhere, (started - 1000, started - 1000))
    os.rename(elsewhere, area.at(renamed))
    changed = new + [rewritten, renamed]
    rc, lines = run_worker(tmp_path / "job", manifest(old + changed, scan_started=started, dry_run=dry_run), area.sc)
    out = files(lines)
    assert rc == 1
    assert [out[x]["outcome"] for x in old] == ["dry_run" if dry_run else "deleted"] * 2
    assert [(out[x]["outcome"], out[x]["reason"]) for x in changed] == [("refused", "modified_since_scan")] * 4
    assert "changed at" in out[rewritten]["error"] and "changed at" in out[renamed]["error"]
    assert all(area.at(x).exists() for x in changed) and all(area.at(x).exists() == dry_run for x in old)


def test_control_characters_and_a_loose_manifest_are_refused(area: Area, tmp_path: Path) -> None:
    lfn = f"{BASE}/00000/f0.root"
    path = put(area.storage, lfn)
    rc, lines = run_worker(tmp_path / "cr", manifest([lfn + "\r", lfn + "\n", lfn[:-5] + "\x85root"]), area.sc)
    assert rc == 1 and path.exists()
    assert {(x["outcome"], x["reason"]) for x in files(lines).values()} == {("refused", "invalid_lfn")}
    job = tmp_path / "raw"
    job.mkdir()
    text = json.dumps(manifest([lfn]))
    for bad in (text.replace(lfn, lfn + "\r"),  # a raw CR inside a JSON string
                text.replace('"dry_run": false', '"dry_run": true, "dry_run": false'),  # a repeated key
                text.replace('"backoff_s": 0.05', '"backoff_s": NaN'),
                text.encode("utf-8").replace(b"f0.root", b"f\xff.root")):
        (job / "manifest.json").write_bytes(bad.encode() if isinstance(bad, str) else bad)
        rc, lines = _run_raw(job, area.sc)
        assert rc == 2 and "cannot read manifest" in summary(lines)["summary"]["error"], summary(lines)
    assert path.exists()


def _run_raw(job: Path, sc: Path) -> tuple[int, list[dict[str, Any]]]:
    import subprocess
    import sys

    from worker_kit import worker_pyz
    proc = subprocess.run([sys.executable, str(worker_pyz()), "manifest.json", "--report", "report.jsonl"], cwd=job,
                          env={"PATH": os.environ["PATH"], "SITECONFIG_PATH": str(sc)}, capture_output=True, text=True)
    return proc.returncode, [json.loads(x) for x in (job / "report.jsonl").read_text().splitlines()]


def test_directories_kept_on_purpose_do_not_fail_the_job(area: Area, tmp_path: Path) -> None:
    lfns = [f"{BASE}/00000/f0.root", f"{BASE}/00001/g0.root"]
    for lfn in lfns:
        put(area.storage, lfn)
    put(area.storage, f"{BASE}/00002/protected.root")
    man = manifest(lfns, remove_dirs=[f"{BASE}/00000", f"{BASE}/00001", BASE], keep_dirs=[BASE],
                   protected=[f"{BASE}/00002"])
    rc, lines = run_worker(tmp_path / "job", man, area.sc)
    assert rc == 0, summary(lines)
    assert dirs(lines)[BASE]["reason"] == "kept" and dirs(lines)[BASE]["outcome"] == "refused"
    # A directory the plan did not give for this job's files is a plan error: partial.
    man = manifest([f"{BASE}/00002/x.root"], remove_dirs=["/store/unmerged/Run2024F/Other/AOD/v1"])
    rc, lines = run_worker(tmp_path / "job2", man, area.sc)
    assert rc == 1 and dirs(lines)["/store/unmerged/Run2024F/Other/AOD/v1"]["reason"] == "not_job_dir"


def _posix(area: Area, *protocols: dict[str, Any]) -> Path:
    """A site whose stage-out methods are these posix protocols, in this order."""
    return make_site(area.top, list(protocols), [{"volume": VOLUME, "protocol": p["protocol"], "command": "cp"}
                                                 for p in protocols])


def test_a_wrong_first_method_falls_back_to_the_one_rucio_agrees_with(area: Area, tmp_path: Path) -> None:
    ok, other = _plant(area)
    for lfn in ok + other:  # where the wrong method points: the same names, outside the storage
        put(area.outside, lfn)
    area.sc = _posix(area, {"protocol": "wrong", "prefix": str(area.outside)},
                     {"protocol": "right", "prefix": str(area.storage)})
    before = snapshot(area.top)
    man = manifest(ok + other, remove_dirs=[f"{BASE}/00000"], unmerged_pfn=f"file://{area.unmerged}/",
                   mapping_check="rucio")
    rc, lines = run_worker(tmp_path / "job", man, area.sc)
    assert rc == 0, summary(lines)
    method = lines[0]["start"]["method"]
    assert (method["protocol"], method["choice"]["rule"]) == ("right", "same_pfn")
    assert method["unmerged_pfn"] == f"{area.unmerged}/" and "wrong" in method["choice"]["passed"][0]
    assert summary(lines)["summary"]["method"]["choice"] == method["choice"]
    area.check(before, {area.at(x) for x in ok + other} | {area.at(f"{BASE}/00000")})
    # The wrong method's root ends with /store/unmerged/ too: only Rucio's PFN tells them apart.
    assert all(area.outside.joinpath(x.lstrip("/")).exists() for x in ok + other)


def test_desy_layout_needs_rucio_to_agree(area: Area, tmp_path: Path) -> None:
    """DESY maps /store/unmerged/ to .../tier2/unmerged/ (not ending in /store/unmerged/): standard layout
    works once Rucio agrees with that root, every PFN still being that root + the LFN's path below it."""
    disk = area.storage / "unmerged"
    lfns = [f"{BASE}/00000/f{i}.root" for i in range(2)]
    for lfn in lfns:
        put(disk, lfn[len("/store/unmerged"):])
        put(area.storage, lfn)  # the same names where a plain prefix would point
    area.sc = _posix(area, {"protocol": "pnfs", "rules": [
        {"lfn": "/+store/unmerged/(.*)", "pfn": f"{disk}/$1"}, {"lfn": "/+(.*)", "pfn": f"{area.storage}/$1"}]})
    before = snapshot(area.top)
    rc, lines = run_worker(tmp_path / "alone", manifest(lfns), area.sc)
    assert rc == 1 and {(x["reason"]) for x in files(lines).values()} == {"pfn_outside_unmerged"}
    assert "agreed by Rucio" in files(lines)[lfns[0]]["error"]
    rc, lines = run_worker(tmp_path / "other", manifest(lfns, unmerged_pfn=f"{area.unmerged}/", mapping_check="rucio"),
                           area.sc)
    assert rc == 3 and {(x["reason"]) for x in files(lines).values()} == {"mapping_disagrees"}
    area.check(before, set())
    rc, lines = run_worker(tmp_path / "agreed", manifest(lfns, unmerged_pfn=f"{disk}/", mapping_check="rucio"), area.sc)
    assert rc == 0, summary(lines)
    assert [files(lines)[x]["pfn"] for x in lfns] == [f"{disk}/{x[len('/store/unmerged/'):]}" for x in lfns]
    area.check(before, {disk / x[len("/store/unmerged/"):] for x in lfns}, physical=disk)


@pytest.mark.parametrize("case", ["site_specific_other_root", "site_specific_no_root", "standard", "standard_rucio"])
def test_a_root_at_the_storage_top_never_reaches_store_data(area: Area, tmp_path: Path, case: str) -> None:
    """The site maps /store/unmerged/(.*) to <storage>/$1: a dump line /store/unmerged/store/data/... would name a
    real /store/data file. site_specific needs the configured unmerged_root, and the standard layout a root
    ending in /store/unmerged/ (or /unmerged/ agreed by Rucio): each refuses it."""
    lfn = "/store/unmerged/store/data/Run2024F/Muon0/AOD/v1/00000/precious.root"
    precious = put(area.storage, lfn[len("/store/unmerged"):])
    area.sc = _posix(area, {"protocol": "top", "rules": [{"lfn": "/+store/unmerged/(.*)", "pfn": f"{area.storage}/$1"}]})
    step: dict[str, Any] = {
        "site_specific_other_root": {"pfn_layout": "site_specific", "unmerged_root": f"{area.unmerged}/"},
        "site_specific_no_root": {"pfn_layout": "site_specific"},
        "standard": {},
        "standard_rucio": {"unmerged_pfn": f"{area.storage}/", "mapping_check": "rucio"}}[case]
    before = snapshot(area.top)
    rc, lines = run_worker(tmp_path / "job", manifest([lfn], **step), area.sc)
    if case == "site_specific_no_root":
        assert rc == 2 and "needs unmerged_root" in summary(lines)["summary"]["error"]
    else:
        assert rc == 1 and (files(lines)[lfn]["outcome"], files(lines)[lfn]["reason"]) == ("refused", "pfn_outside_unmerged")
    assert precious.exists()
    area.check(before, set())


@pytest.mark.parametrize("form", ["file_one_slash", "prefix_trailing_slash", "template_double_slash"])
def test_real_pfn_forms_are_normalised(area: Area, tmp_path: Path, form: str) -> None:
    lfns = [f"{BASE}/00000/f{i}.root" for i in range(2)]
    for lfn in lfns:
        put(area.storage, lfn)
    protocol = {"file_one_slash": {"protocol": "nfs", "prefix": f"file:{area.storage}"},  # KIT's nfs_v4.1 form
                "prefix_trailing_slash": {"protocol": "posix", "prefix": f"{area.storage}/"},
                "template_double_slash": {"protocol": "direct", "rules": [
                    {"lfn": "/+store(.*)", "pfn": f"{area.storage}/store/$1"}]}}[form]
    area.sc = _posix(area, protocol)
    before = snapshot(area.top)
    rc, lines = run_worker(tmp_path / "job", manifest(lfns, remove_dirs=[f"{BASE}/00000"],
                                                      unmerged_pfn=f"{area.unmerged}/", mapping_check="rucio"), area.sc)
    assert rc == 0, summary(lines)
    pfns = [files(lines)[x]["pfn"] for x in lfns] + [dirs(lines)[f"{BASE}/00000"]["pfn"]]
    assert all("//" not in p.replace("file:///", "/") for p in pfns), pfns
    area.check(before, {area.at(x) for x in lfns} | {area.at(f"{BASE}/00000")})


@pytest.mark.parametrize("layout", ["site_specific", "standard_rucio"])
def test_a_storage_top_root_holding_store_data_is_refused(area: Area, tmp_path: Path, layout: str) -> None:
    """Issue 36: the site maps /store/unmerged/(.*) to <storage>/$1 and /store/(.*) to <storage>/store/$1. Its PFN of
    /store/unmerged/ (the storage top) holds its PFN of /store/data/: the method is refused (other_namespace), even
    with unmerged_root set to it, and the dump line /store/unmerged/store/data/... deletes nothing."""
    lfn = "/store/unmerged/store/data/Run2026A/Prim9/AOD/Proc-v9/000/380/d0.root"
    precious = put(area.storage, lfn[len("/store/unmerged"):])
    plain = f"{BASE}/00000/f0.root"
    put(area.storage, plain[len("/store/unmerged"):])
    area.sc = _posix(area, {"protocol": "top", "rules": [{"lfn": "/+store/unmerged/(.*)", "pfn": f"{area.storage}/$1"},
                                                        {"lfn": "/+store/(.*)", "pfn": f"{area.storage}/store/$1"}]})
    step: dict[str, Any] = {"site_specific": {"pfn_layout": "site_specific", "unmerged_root": f"{area.storage}/"},
                            "standard_rucio": {"unmerged_pfn": f"{area.storage}/", "mapping_check": "rucio"}}[layout]
    before = snapshot(area.top)
    rc, lines = run_worker(tmp_path / "job", manifest([lfn, plain], **step), area.sc)
    assert rc == 3 and {(x["outcome"], x["reason"]) for x in files(lines).values()} == {("refused", "other_namespace")}
    assert f"holds {area.storage}/store/data/" in files(lines)[lfn]["error"]
    assert precious.exists()
    area.check(before, set())


def test_a_file_whose_pfn_is_another_namespaces_is_refused(area: Area, tmp_path: Path) -> None:
    """/store/temp/ maps to the storage top and /store/unmerged/ below it: the root holds no other namespace, but
    each file's PFN is also the PFN of a /store/temp/ LFN, and a dump line naming /store/unmerged/store/... is
    refused whatever the mapping. The control site (no overlap) deletes."""
    unmerged = area.storage / "unmerged"
    lfn = f"{BASE}/00000/f0.root"
    path = put(unmerged, lfn[len("/store/unmerged"):])
    nested = "/store/unmerged/store/data/Run2026A/x.root"
    put(unmerged, nested[len("/store/unmerged"):])
    rules = [{"lfn": "/+store/unmerged/(.*)", "pfn": f"{unmerged}/$1"}]
    area.sc = _posix(area, {"protocol": "p", "rules": rules + [{"lfn": "/+store/temp/(.*)", "pfn": f"{area.storage}/$1"}]})
    step = {"pfn_layout": "site_specific", "unmerged_root": f"{unmerged}/"}
    before = snapshot(area.top)
    rc, lines = run_worker(tmp_path / "job", manifest([lfn, nested], **step), area.sc)
    out = files(lines)
    assert rc == 1 and {(x["outcome"], x["reason"]) for x in out.values()} == {("refused", "other_namespace")}
    assert "also the site config's PFN of /store/temp/unmerged/" in out[lfn]["error"]
    area.check(before, set())
    area.sc = _posix(area, {"protocol": "p", "rules": rules})  # control: no other namespace there
    rc, lines = run_worker(tmp_path / "control", manifest([lfn], **step), area.sc)
    assert rc == 0 and files(lines)[lfn]["outcome"] == "deleted" and not path.exists()
