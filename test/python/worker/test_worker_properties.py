"""Property: whatever links a site's tree holds, the worker never removes or changes a path outside
the unmerged root (real files, real deletion, the worker run in-process)."""
from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from MSUnmerged.worker import paths
from MSUnmerged.worker.cleanup import Cleanup
from MSUnmerged.worker.manifest import parse_manifest
from MSUnmerged.worker.report import ReportWriter
from worker_kit import changes, manifest, posix_site, snapshot

REL = st.lists(st.sampled_from(["a", "b", "c"]), min_size=1, max_size=5).map("/".join)
LINK = st.tuples(REL, st.integers(0, 1000), st.booleans())  # (place in unmerged, target pick, relative)


def _put(base: Path, rel: str) -> None:
    path = base / rel
    if os.path.lexists(path) or any(os.path.lexists(p) and not p.is_dir() for p in path.parents):
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(rel.encode())


@settings(max_examples=60, deadline=None)
@given(prefix=st.lists(st.sampled_from(["x", "y"]), max_size=2), mounted=st.booleans(), root_link=st.booleans(),
       inside=st.lists(REL, max_size=12), outside=st.lists(REL, max_size=8), links=st.lists(LINK, max_size=6),
       job=st.lists(REL, min_size=1, max_size=12), dry_run=st.booleans())
def test_nothing_outside_the_unmerged_root_ever_goes(prefix: list[str], mounted: bool, root_link: bool,
                                                      inside: list[str], outside: list[str],
                                                      links: list[tuple[str, int, bool]], job: list[str],
                                                      dry_run: bool) -> None:
    top = Path(tempfile.mkdtemp(prefix="msunmerged-prop-"))
    try:
        storage = top.joinpath("real", *prefix)
        unmerged, data, away = storage / "store" / "unmerged", storage / "store" / "data", top / "outside"
        for rel in outside:
            _put(data, rel)
            _put(away, rel)
        if root_link:  # the unmerged root itself a link into /store/data
            data.mkdir(parents=True, exist_ok=True)
            unmerged.parent.mkdir(parents=True, exist_ok=True)
            unmerged.symlink_to(data, target_is_directory=True)
        else:
            unmerged.mkdir(parents=True)
            for rel in inside:
                _put(unmerged, rel)
        targets = sorted(str(p) for p in [data, away, *data.rglob("*"), *away.rglob("*"), *unmerged.rglob("*")])
        for rel, pick, relative in links if not root_link else []:
            where = unmerged / rel
            if os.path.lexists(where) or not where.parent.is_dir() or where.parent.is_symlink():
                continue
            target = targets[pick % len(targets)] if targets else str(away)
            where.symlink_to(os.path.relpath(target, where.parent) if relative else target)
        site_root = storage
        if mounted:  # a link above the root: the site's layout, followed
            (top / "mnt").symlink_to(top / "real", target_is_directory=True)
            site_root = top.joinpath("mnt", *prefix)
        sc = posix_site(top, site_root)
        lfns = [paths.UNMERGED + rel for rel in job]
        dirs = sorted({d for lfn in lfns for d in paths.ancestors(lfn) if paths.depth(d) >= paths.MIN_DIR_DEPTH})
        before = snapshot(top)
        report = ReportWriter.open(str(top.parent / (top.name + ".jsonl")))
        try:
            Cleanup(parse_manifest(manifest(lfns, remove_dirs=dirs, dry_run=dry_run)), report,
                    {"SITECONFIG_PATH": str(sc)}).run()
        finally:
            report.close()
        gone, changed = changes(before, snapshot(top))
        allowed = {str(storage) + lfn for lfn in lfns} | {str(storage) + d for d in dirs}
        inner = str(unmerged) + "/"
        assert not changed
        assert all(p.startswith(inner) for p in gone), gone - {p for p in gone if p.startswith(inner)}
        assert gone <= allowed and (not dry_run or not gone)
    finally:
        shutil.rmtree(top, ignore_errors=True)
        if os.path.exists(str(top) + ".jsonl"):
            os.unlink(str(top) + ".jsonl")
