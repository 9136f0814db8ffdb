"""Helpers for the worker tests: a site configuration on disk, manifests, running the real zipapp."""
from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Iterator, List, Optional, Sequence

from MSUnmerged.jobs.workerpkg import build_worker
from MSUnmerged.worker import deleters
from MSUnmerged.worker.ids import MANIFEST_VERSION
from servers import session_dir

SITE = "T2_XX_Test"
RSE = "T2_XX_Test"
VOLUME = "Test_Disk"
_BUILT: dict[str, Path] = {}


def world_dir(prefix: str) -> Path:
    """A temporary folder other users can enter (tests run the worker as nobody), in this session's folder:
    removed with it at the end, kept when the session failed."""
    path = Path(tempfile.mkdtemp(prefix=prefix, dir=session_dir()))
    path.chmod(0o755)
    return path


def worker_pyz() -> Path:
    """The zipapp, built once per test session into a folder every user can read."""
    if "pyz" not in _BUILT:
        _BUILT["pyz"] = build_worker(world_dir("msunmerged-worker-"))
        _BUILT["pyz"].chmod(0o755)
    return _BUILT["pyz"]


def tool_path(folder: Path, tools: Sequence[str] = ("xrdfs", "gfal-rm")) -> str:
    """A PATH where these tools exist (a stage-out method's choice only checks that its tool is there)."""
    folder.mkdir(parents=True, exist_ok=True)
    for tool in tools:
        (folder / tool).write_text("#!/bin/sh\nexit 1\n")
        (folder / tool).chmod(0o755)
    return str(folder)


def make_site(root: Path, protocols: list[dict[str, Any]], methods: Sequence[dict[str, str]],
              site: str = SITE, volume: str = VOLUME, rse: Optional[str] = RSE) -> Path:
    """A SITECONFIG_PATH with JobConfig/site-local-config.xml and storage.json; returns its path."""
    sc = root / "SITECONF" / site
    (sc / "JobConfig").mkdir(parents=True, exist_ok=True)
    lines = "".join("<method " + " ".join(f'{k}="{v}"' for k, v in m.items()) + "/>" for m in methods)
    (sc / "JobConfig" / "site-local-config.xml").write_text(
        f'<site-local-config><site name="{site}"><stage-out>{lines}</stage-out></site></site-local-config>')
    (sc / "storage.json").write_text(json.dumps([{"site": site, "volume": volume, "rse": rse, "type": "DISK",
                                                  "protocols": protocols}]))
    for p in [root, root / "SITECONF", sc, sc / "JobConfig"]:
        p.chmod(0o755)
    return sc


def posix_site(root: Path, storage: Path) -> Path:
    return make_site(root, [{"protocol": "posix", "access": "global-rw", "prefix": str(storage)}],
                     [{"volume": VOLUME, "protocol": "posix", "command": "cp"}])


def posix_world(prefix: str) -> Iterator[tuple[Path, Path]]:
    """A fixture's body: (storage root, SITECONFIG_PATH) of a POSIX test site the user nobody can use, removed
    after."""
    root = world_dir(prefix)
    storage = root / "storage"
    storage.mkdir()
    storage.chmod(0o755)
    yield storage, posix_site(root, storage)
    shutil.rmtree(root, ignore_errors=True)


def scan_start() -> float:
    """The start of a scan that began after every file put so far: a whole second after now, since remote
    storage gives times in whole seconds (a file changed in the same second could be newer than the scan)."""
    time.sleep(1.0 - time.time() % 1.0 + 0.01)
    return time.time()


def manifest(lfns: list[str], remove_dirs: Sequence[str] = (), protected: Sequence[str] = (),
             keep_dirs: Sequence[str] = (), dry_run: bool = False, deadline: Optional[float] = None,
             **step: Any) -> dict[str, Any]:
    """A manifest for these files; its scan started now, after every file put so far, unless `scan_started` says
    (`scan_start()` for storage that gives whole seconds)."""
    params = {"type": "DeleteFiles", "name": "DeleteFiles", "lfns": list(lfns), "remove_dirs": list(remove_dirs),
              "keep_dirs": list(keep_dirs), "protected": list(protected), "dry_run": dry_run,
              "file_timeout_s": 10.0, "retries": 1, "backoff_s": 0.05, "max_consecutive_denied": 20}
    if "scan_started" not in step:
        params["scan_started"] = time.time()
    params["protected_until"] = time.time() + 3600  # its protected list may be used for an hour (unless `step` says)
    params.update(step)
    return {"version": MANIFEST_VERSION, "job_id": f"{RSE}:1:1", "rse": RSE, "site": SITE, "generation": 1.0,
            "deadline": time.time() + 3600 if deadline is None else deadline,
            "resources": {"memory_mb": 500, "disk_mb": 500, "runtime_s": 3600},
            "task": {"name": "Cleanup", "type": "Cleanup", "steps": [params]}}


def run_worker(workdir: Path, man: dict[str, Any] | Callable[[], dict[str, Any]], siteconf: Path,
               python: str = sys.executable, prefix: Sequence[str] = (), env: Optional[dict[str, str]] = None,
               timeout: float = 300) -> tuple[int, list[dict[str, Any]]]:
    """Run the zipapp as a job would: manifest in a work folder, SITECONFIG_PATH set; (exit code, report).
    `man` a function: the manifest it makes when the started worker opens it (a FIFO), so that times in it (a
    bound seconds away) count from the worker's start, not from before its interpreter's start-up, which takes
    seconds on a busy machine."""
    workdir.mkdir(parents=True, exist_ok=True)
    workdir.chmod(0o777)
    path = workdir / "manifest.json"
    if callable(man):
        os.mkfifo(path, 0o644)
    else:
        path.write_text(json.dumps(man))
    full_env = {"PATH": os.environ["PATH"], "SITECONFIG_PATH": str(siteconf), **(env or {})}
    with subprocess.Popen([*prefix, python, str(worker_pyz()), "manifest.json", "--report", "report.jsonl"],
                          cwd=workdir, env=full_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True) as proc:
        try:
            if callable(man):
                hand_over(path, proc, man, time.monotonic() + timeout)
            _, stderr = proc.communicate(timeout=timeout)
        finally:
            proc.kill()
    report = workdir / "report.jsonl"
    lines = [json.loads(x) for x in report.read_text().splitlines()] if report.exists() else []
    assert proc.returncode != 4, stderr + json.dumps(lines[-1:] if lines else [])
    return proc.returncode, lines


def hand_over(fifo: Path, proc: subprocess.Popen, man: Callable[[], dict[str, Any]], deadline: float) -> None:
    """The manifest `man` makes now, written into the FIFO once the worker has opened it to read."""
    while True:
        try:  # without a reader yet: ENXIO (a blocking open would wait for a worker that died before opening it)
            fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
            break
        except OSError as exc:
            if exc.errno != errno.ENXIO or proc.poll() is not None or time.monotonic() > deadline:
                raise
            time.sleep(0.01)
    os.set_blocking(fd, True)
    with open(fd, "w") as fh:
        fh.write(json.dumps(man()))


def files(lines: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {x["lfn"]: x for x in lines if "lfn" in x}


def dirs(lines: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {x["dir"]: x for x in lines if "dir" in x}


def summary(lines: list[dict[str, Any]]) -> dict[str, Any]:
    assert "summary" in lines[-1], lines[-1]
    return lines[-1]


AS_NOBODY = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"]
SYSTEM_PYTHON = "/usr/bin/python3"  # readable by nobody, and the one python3-gfal2 is built for


def put(storage: Path, lfn: str, owner: str = "root") -> Path:
    """A one-byte file at `lfn` under `storage`; with `owner`, the file and its directories are theirs."""
    path = storage / lfn.lstrip("/")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"x")
    if owner != "root":
        for p in [path, *path.relative_to(storage).parents]:
            shutil.chown(storage / p, owner, "nogroup")
    return path


def snapshot(top: Path) -> dict[str, tuple]:
    """Every entry under `top`, never following a link: path -> (kind, size, mtime_ns, link target).

    Directories record their kind only (their mtime moves when an entry inside goes)."""
    out: dict[str, tuple] = {}
    for folder, subdirs, names in os.walk(top, followlinks=False):
        for name in subdirs + names:
            path = os.path.join(folder, name)
            st = os.lstat(path)
            if os.path.islink(path):
                out[path] = ("link", 0, 0, os.readlink(path))
            elif os.path.isdir(path):
                out[path] = ("dir", 0, 0, None)
            else:
                out[path] = ("file", st.st_size, st.st_mtime_ns, None)
    return out


def changes(before: dict[str, tuple], after: dict[str, tuple]) -> tuple[set[str], set[str]]:
    """(paths gone, paths changed or new) between two snapshots."""
    gone = set(before) - set(after)
    changed = {p for p in after if before.get(p) != after[p]}
    return gone, changed


def site_config_xml(sc: Path, body: str, site: str = SITE) -> None:
    """Replace the site-local-config.xml of `sc` with one holding `body` inside <site>."""
    (sc / "JobConfig" / "site-local-config.xml").write_text(
        f'<site-local-config><site name="{site}">{body}</site></site-local-config>')


HOSTILE = ("direct", "chain", "dotdot", "one_dataset", "tfc")


def hostile_site(top: Path, base: str, protocol: str, command: str, variant: str) -> Path:
    """A site whose mapping sends /store/unmerged/ (one_dataset: only files in .../00001/) into
    /store/data/ of the storage whose "/" has the PFN `base`: a rule, a chain, '..' in the
    template, or a legacy trivial file catalog (variants in HOSTILE)."""
    into_data = base + "/store/data/$1"
    rules = {"direct": [{"lfn": "/+store/unmerged/(.*)", "pfn": into_data}],
             "chain": [{"lfn": "/+(.*)", "pfn": base + "/$1", "chain": "lfn"}],
             "dotdot": [{"lfn": "/+store/unmerged/(.*)", "pfn": base + "/store/unmerged/../data/$1"}],
             "one_dataset": [{"lfn": "/+store/unmerged/(.*/00001/.*)", "pfn": into_data},
                             {"lfn": "/+(.*)", "pfn": base + "/$1"}],
             "tfc": [{"lfn": "/+(.*)", "pfn": base + "/$1"}]}[variant]  # a fair storage.json the TFC overrides
    lfn_step = {"protocol": "lfn", "rules": [{"lfn": "/+store/unmerged/(.*)", "pfn": "/store/data/$1"}]}
    sc = make_site(top, [lfn_step, {"protocol": protocol, "rules": rules}],
                   [{"volume": VOLUME, "protocol": protocol, "command": command}])
    if variant == "tfc":
        (top / "tfc.xml").write_text(f'<storage-mapping><lfn-to-pfn protocol="{protocol}"'
                                     f' path-match="/+store/unmerged/(.*)" result="{into_data}"/></storage-mapping>')
        site_config_xml(sc, f'<local-stage-out><command value="{command}"/>'
                        f'<catalog url="trivialcatalog_file:{top}/tfc.xml?protocol={protocol}"/>'
                        f'<phedex-node value="{RSE}"/></local-stage-out>')
    return sc


class AttackAfterLook:
    """Mixed into a deleter class: `attack` (set on the class) runs once its look at a batch of files is done,
    before anything of the batch is deleted: the window a race test uses."""

    attack: Callable[[], None] = staticmethod(lambda: None)

    def inspect(self, pfns: List[str], directory: bool = False) -> List[deleters.Seen]:
        seen = super().inspect(pfns, directory)  # type: ignore[misc]
        if not directory:
            type(self).attack()
        return seen


def into_directory(victim: Path) -> Callable[[], None]:
    """An attack: the file becomes a directory holding inner/precious.root."""
    def replace() -> None:
        victim.unlink()
        (victim / "inner").mkdir(parents=True)
        (victim / "inner" / "precious.root").write_bytes(b"precious")
    return replace
