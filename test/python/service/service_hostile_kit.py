"""Hostile and misconfigured POSIX sites for the service tests of issue 12 (deletion never leaves the
physical unmerged area), and a storage snapshot that never follows a link.

One site holds several RSEs, each with its own storage folder `<root>/storage/<RSE>` and its own way of
mapping LFNs (storage.json volume, or the legacy trivial file catalog):
  LINKS   a plain dataset, a dataset directory that is a (relative) link into the RSE's /store/data,
          a run directory that is an (absolute) link to a folder outside the storage, a file that is a
          link to a file outside the storage;
  DIRECT  storage.json maps /store/unmerged/(.*) to <storage>/store/data/$1;
  CHAINED the same, reached through a chained protocol;
  DOTDOT  the PFN template holds '..' (<storage>/store/unmerged/../data/$1);
  LEGACY  no storage.json volume: <local-stage-out> with a trivial file catalog into /store/data.
Each mapping RSE's /store/data holds the same names as its /store/unmerged, so a deletion at the
mapped place would destroy them. `root_site` is the same folder as the worker sees it (the pool's
chroot); links point to where the worker would find their targets.
"""
from __future__ import annotations

import json
import os
import stat
import time
from pathlib import Path
from typing import Any, Optional

from MSUnmerged import sample
from MSUnmerged.samplesite import AGE_S
from MSUnmerged.sources.offline import DUMPS_DIR, PROTECTED_FILE, STATS_FILE, dump_file

ERA = "/store/unmerged/Era"
PLAIN = [f"{ERA}/Plain/AODSIM/Proc-v1/000/001/f{i}.root" for i in range(5)]
FILE_LINK = f"{ERA}/Plain/AODSIM/Proc-v1/000/004/link.root"
LINKED = [f"{ERA}/Linked/AODSIM/Proc-v1/000/002/f{i}.root" for i in range(3)]  # Proc-v1 -> /store/data
OUT_RUN = [f"{ERA}/Outrun/AODSIM/Proc-v1/000/003/f{i}.root" for i in range(3)]  # 000/003 -> outside
KEPT = f"{ERA}/Kept/AODSIM/Proc-v1/000/001/k.root"
PROTECTED = [f"{ERA}/Kept/AODSIM/Proc-v1"]
LINK_DIRS = (f"{ERA}/Linked/AODSIM/Proc-v1", f"{ERA}/Outrun/AODSIM/Proc-v1/000/003")

LINKS, DIRECT, CHAINED, DOTDOT, LEGACY = "LINKS", "DIRECT", "CHAINED", "DOTDOT", "LEGACY"
MAPPINGS = (DIRECT, CHAINED, DOTDOT, LEGACY)


def dump_of(kind: str) -> list[str]:
    return sorted(PLAIN + [KEPT] + ([FILE_LINK] + LINKED + OUT_RUN if kind == LINKS else []))


def _file(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def _link(path: Path, target: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.symlink_to(target)


def _volume(kind: str, site: str, rse: str, storage: str) -> dict[str, Any]:
    """The storage.json volume of one RSE (LEGACY has none)."""
    rule = {"lfn": "/+store/unmerged/(.*)", "pfn": f"{storage}/store/data/$1"}
    protocols: list[dict[str, Any]] = {
        LINKS: [{"protocol": "posix", "access": "global-rw", "prefix": storage}],
        DIRECT: [{"protocol": "posix", "access": "global-rw", "rules": [rule]}],
        CHAINED: [{"protocol": "direct", "access": "global-rw",
                   "rules": [{"lfn": "/+store/unmerged/(.*)", "pfn": "/store/data/$1"}]},
                  {"protocol": "posix", "access": "global-rw",
                   "rules": [{"lfn": "/+(.*)", "pfn": f"{storage}/$1", "chain": "direct"}]}],
        DOTDOT: [{"protocol": "posix", "access": "global-rw",
                  "rules": [{"lfn": "/+store/unmerged/(.*)", "pfn": f"{storage}/store/unmerged/../data/$1"}]}],
    }[kind]
    return {"site": site, "volume": f"{rse}_posix", "rse": rse, "type": "DISK", "protocols": protocols}


def build_site(root: Path, site: str, rses: dict[str, str], root_site: Optional[str] = None,
               elsewhere: Optional[dict[str, str]] = None) -> Path:
    """The site's storage folders and SITECONFIG_PATH under `root` for {RSE: kind}; returns the siteconf
    folder as the worker sees it. `elsewhere` {RSE: folder}: that RSE's storage.json prefix is
    <root>/<folder>/<RSE> instead, a folder outside its storage holding the same plain files (the site
    then maps /store/unmerged/ somewhere else than Rucio says)."""
    at = root_site or str(root)
    written = time.time() - AGE_S  # before the scan (the workers refuse newer files)
    volumes, methods, legacy = [], [], ""
    sc = root / "siteconf"
    for rse, kind in rses.items():
        storage, storage_site = root / "storage" / rse, f"{at}/storage/{rse}"
        for lfn in (PLAIN + [KEPT] if kind == LINKS else dump_of(kind)):
            _file(storage / lfn.lstrip("/"), lfn)
        # What a followed link or a bad mapping would reach: /store/data and a folder outside the storage.
        for lfn in (LINKED if kind == LINKS else dump_of(kind)):
            _file(storage / lfn.lstrip("/").replace("store/unmerged/", "store/data/", 1), "data " + lfn)
        if rse in (elsewhere or {}):
            for lfn in dump_of(kind):
                _file(root / elsewhere[rse] / rse / lfn.lstrip("/"), "elsewhere " + lfn)  # type: ignore[index]
            storage_site = f"{at}/{elsewhere[rse]}/{rse}"  # type: ignore[index]
        if kind == LINKS:
            for lfn in OUT_RUN:
                _file(root / "outside" / rse / "run003" / lfn.rsplit("/", 1)[1], "outside " + lfn)
            _file(root / "outside" / rse / "precious.root", "precious")
            _link(storage / LINK_DIRS[0].lstrip("/"), "../../../../data/Era/Linked/AODSIM/Proc-v1")
            _link(storage / LINK_DIRS[1].lstrip("/"), f"{at}/outside/{rse}/run003")
            _link(storage / FILE_LINK.lstrip("/"), f"{at}/outside/{rse}/precious.root")
        if kind == LEGACY:
            (sc / "PhEDEx").mkdir(parents=True, exist_ok=True)
            (sc / "PhEDEx" / "storage.xml").write_text(
                f'<storage-mapping><lfn-to-pfn protocol="direct" path-match="/+store/unmerged/(.*)" '
                f'result="{storage_site}/store/data/$1"/></storage-mapping>\n')
            legacy = (f'  <local-stage-out>\n    <command value="cp"/>\n    <catalog url="trivialcatalog_file:'
                      f'{at}/siteconf/PhEDEx/storage.xml?protocol=direct"/>\n'
                      f'    <phedex-node value="{rse}"/>\n  </local-stage-out>\n')
        else:
            volumes.append(_volume(kind, site, rse, storage_site))
            methods.append(f'    <method volume="{rse}_posix" protocol="posix" command="cp"/>\n')
    for dirpath, dirs, files in os.walk(root):
        for name in dirs + files:
            os.utime(os.path.join(dirpath, name), (written, written), follow_symlinks=False)
    (sc / "JobConfig").mkdir(parents=True, exist_ok=True)
    (sc / "JobConfig" / "site-local-config.xml").write_text(
        f'<site-local-config>\n<site name="{site}">\n  <stage-out>\n{"".join(methods)}  </stage-out>\n{legacy}'
        f'</site>\n</site-local-config>\n')
    (sc / "storage.json").write_text(json.dumps(volumes, indent=1))
    return Path(f"{at}/siteconf")


def write_sources(directory: Path, rses: dict[str, str]) -> Path:
    """OfflineSources files: a finished scan per RSE (started after the files were written), its dump and
    the shared protected list."""
    (directory / DUMPS_DIR).mkdir(parents=True, exist_ok=True)
    stats: dict[str, Any] = {}
    now = time.time()  # after the files were made: their ctime is not before the scan started
    for rse, kind in rses.items():
        dump = dump_of(kind)
        dump_file(directory, rse).write_text("\n".join(dump) + "\n")
        stats.update(sample.stats_for(rse, len(dump), now, now))
    (directory / STATS_FILE).write_text(json.dumps(stats))
    (directory / PROTECTED_FILE).write_text(json.dumps({"result": PROTECTED}))
    return directory


def snapshot(root: Path) -> dict[str, tuple[int, int, int, Optional[str]]]:
    """Every entry under `root`, links never followed: relative path -> (type, size, mtime_ns, link target).
    A directory's mtime changes when an entry in it is added or removed."""
    out: dict[str, tuple[int, int, int, Optional[str]]] = {}
    for dirpath, dirs, files in os.walk(root):  # a link to a directory is listed, never entered
        for name in [""] + dirs + files if dirpath == str(root) else dirs + files:
            path = os.path.join(dirpath, name) if name else dirpath
            st = os.lstat(path)
            target = os.readlink(path) if stat.S_ISLNK(st.st_mode) else None
            out[os.path.relpath(path, root)] = (stat.S_IFMT(st.st_mode), st.st_size, st.st_mtime_ns, target)
    return out


def changed(before: dict[str, Any], after: dict[str, Any]) -> set[str]:
    """Paths added, removed or changed."""
    return {p for p in before.keys() | after.keys() if before.get(p) != after.get(p)}


def in_unmerged(path: str, rse: str) -> bool:
    """True for a snapshot path inside the RSE's physical /store/unmerged (never behind a link)."""
    top = f"storage/{rse}/store/unmerged"
    return path == top or path.startswith(top + "/")
