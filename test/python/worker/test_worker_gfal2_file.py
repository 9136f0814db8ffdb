"""The worker zipapp with gfal2 (Debian python3-gfal2, gfal2-plugin-file) and gfal-rm over file:// URLs."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from servers import run_script
from worker_kit import (AS_NOBODY, HOSTILE, SYSTEM_PYTHON, changes, dirs, files, hostile_site, make_site, manifest, put,
                        run_worker, snapshot, world_dir)

pytestmark = pytest.mark.integration

BASE = "/store/unmerged/Run2023D/EGamma1/MINIAOD/PromptReco-v2"


@pytest.fixture(scope="module", autouse=True)
def storage_tools() -> None:
    run_script("storage-tools.sh")


def gfal_site(tmp: Path) -> tuple[Path, Path]:
    storage = tmp / "storage"
    storage.mkdir()
    storage.chmod(0o755)
    sc = make_site(tmp, [{"protocol": "file", "access": "global-rw", "prefix": f"file://{storage}"}],
                   [{"volume": "Test_Disk", "protocol": "file"}])  # no command: WMCore's default, gfal2
    return storage, sc


def _files(storage: Path) -> tuple[list[str], list[str], list[Path]]:
    ok = [f"{BASE}/00000/f{i}.root" for i in range(5)]
    ro = [f"{BASE}/00001/r{i}.root" for i in range(2)]
    paths = [put(storage, lfn, owner="nobody") for lfn in ok] + [put(storage, lfn) for lfn in ro]
    paths[0].unlink()  # already gone
    return ok, ro, paths


def test_gfal2_module_over_file_urls_as_nobody(tmp_path: Path) -> None:
    storage, sc = gfal_site(world_dir("msunmerged-gfal-"))
    ok, ro, paths = _files(storage)
    man = manifest(ok + ro, remove_dirs=[f"{BASE}/00000", f"{BASE}/00001"])
    # As nobody: the folder of `ro` belongs to root, so the file system really refuses.
    rc, lines = run_worker(tmp_path / "job", man, sc, python=SYSTEM_PYTHON, prefix=AS_NOBODY)
    assert lines[0]["start"]["method"]["deleter"] == "gfal2" and rc == 1
    out = files(lines)
    assert [out[lfn]["outcome"] for lfn in ok] == ["missing"] + ["deleted"] * 4
    assert out[ok[1]]["pfn"] == f"file://{storage}{ok[1]}"
    assert [out[lfn]["outcome"] for lfn in ro] == ["permission_denied"] * 2
    assert all(p.exists() for p in paths[5:]) and not any(p.exists() for p in paths[:5])
    assert dirs(lines)[f"{BASE}/00000"]["outcome"] == "removed"
    assert dirs(lines)[f"{BASE}/00001"]["outcome"] == "not_empty"


def test_gfal_rm_when_the_module_is_not_importable(tmp_path: Path) -> None:
    storage, sc = gfal_site(world_dir("msunmerged-gfal-"))
    ok, ro, paths = _files(storage)
    man = manifest(ok + ro, remove_dirs=[f"{BASE}/00000", f"{BASE}/00001"])
    rc, lines = run_worker(tmp_path / "job", man, sc, python=sys.executable)  # this python has no gfal2
    assert lines[0]["start"]["method"]["deleter"] == "gfal-rm" and rc == 0
    out = files(lines)
    assert [out[lfn]["outcome"] for lfn in ok + ro] == ["missing"] + ["deleted"] * 6
    assert not any(p.exists() for p in paths)
    # gfal-rm removes directories only recursively, which the worker never does: left, and said so.
    assert {d["outcome"] for d in dirs(lines).values()} == {"not_attempted"}


@pytest.mark.parametrize("python,deleter", [(SYSTEM_PYTHON, "gfal2"), (sys.executable, "gfal-rm")])
def test_links_and_hostile_rules_over_file_urls(tmp_path: Path, python: str, deleter: str) -> None:
    top = world_dir("msunmerged-gfal-")
    storage, sc = gfal_site(top)
    data = storage / "store" / "data"
    plain = [f"{BASE}/00000/f{i}.root" for i in range(2)]
    for lfn in plain:
        put(storage, lfn)
    linked = "/store/unmerged/Run2023D/Linked/MINIAOD/v1"
    put(data, "/Run2023D/Linked/MINIAOD/v1/00000/d.root")
    (storage / linked.lstrip("/")).parent.mkdir(parents=True)
    (storage / linked.lstrip("/")).symlink_to(data / "Run2023D/Linked/MINIAOD/v1", target_is_directory=True)
    secret = top / "secret.root"
    secret.write_bytes(b"s")
    (storage / f"{BASE}/00000/link.root".lstrip("/")).symlink_to(secret)
    before = snapshot(top)
    lfns = plain + [f"{linked}/00000/d.root", f"{BASE}/00000/link.root"]
    rc, lines = run_worker(tmp_path / "job", manifest(lfns, remove_dirs=[f"{linked}/00000", f"{BASE}/00000"]), sc,
                           python=python)
    assert lines[0]["start"]["method"]["deleter"] == deleter and lines[0]["start"]["method"]["checks"] == "lstat"
    out = files(lines)
    assert rc == 1
    assert [out[x]["outcome"] for x in plain + [f"{BASE}/00000/link.root"]] == ["deleted"] * 3
    assert (out[f"{linked}/00000/d.root"]["outcome"], out[f"{linked}/00000/d.root"]["reason"]) == \
        ("refused", "symlink_in_path")
    assert dirs(lines)[f"{linked}/00000"]["reason"] == "symlink_in_path"
    gone, changed = changes(before, snapshot(top))
    assert not changed and secret.exists()
    assert gone == {str(storage / x.lstrip("/")) for x in plain + [f"{BASE}/00000/link.root"]} | (
        {str(storage / f"{BASE}/00000".lstrip("/"))} if deleter == "gfal2" else set())


@pytest.mark.parametrize("variant", HOSTILE)
@pytest.mark.parametrize("python", [SYSTEM_PYTHON, sys.executable], ids=["gfal2", "gfal-rm"])
def test_hostile_mapping_over_file_urls_deletes_nothing_outside(tmp_path: Path, python: str, variant: str) -> None:
    top = world_dir("msunmerged-gfal-")
    storage, _ = gfal_site(top)
    ok = [f"{BASE}/00000/f{i}.root" for i in range(2)]
    other = [f"{BASE}/00001/g{i}.root" for i in range(2)]
    for lfn in ok + other:
        put(storage, lfn)
        put(storage, lfn.replace("/store/unmerged/", "/store/data/"))
    sc = hostile_site(top, f"file://{storage}", "file", "gfal2", variant)
    before = snapshot(top)
    rc, lines = run_worker(tmp_path / "job", manifest(ok + other), sc, python=python)
    assert rc == 1
    out = files(lines)
    refused = other if variant == "one_dataset" else ok + other
    assert {(out[x]["outcome"], out[x]["reason"]) for x in refused} == {("refused", "pfn_outside_unmerged")}
    gone, changed = changes(before, snapshot(top))
    assert not changed and gone == {str(storage / x.lstrip("/")) for x in ok + other if x not in refused}
