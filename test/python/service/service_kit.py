"""A real site for the service tests: the REAL LocalBackend runs the worker zipapp on a POSIX storage folder.

`make_site` fills a storage folder with an RSE's dump and writes the site's site-local-config.xml and
storage.json; `LoggedLocalBackend` is LocalBackend that also logs each job it is given for the first
time in a file shared by processes, so tests can prove no job was submitted twice.
"""
from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path
from typing import Mapping, Optional, Sequence

from MSUnmerged import sample
from MSUnmerged.config import AuthConfig, Config, ConMonConfig, SiteConfig
from MSUnmerged.jobs.local import LocalBackend
from MSUnmerged.jobs.spec import CleanupJob
from MSUnmerged.samplesite import fill_storage, rescan, write_site
from MSUnmerged.sources.offline import DUMPS_DIR, PROTECTED_FILE, RSES_FILE, STATS_FILE, OfflineSources, dump_file
from MSUnmerged.sites import resolve_site
from MSUnmerged.sources.conmon import ConMonClient
from MSUnmerged.worker.ids import MANIFEST_NAME

NOBODY = 65534
# Runs the worker as nobody in its job folder (made writable for it), so that storage permissions apply.
AS_NOBODY = f"""#!/bin/sh
[ -f {MANIFEST_NAME} ] && chmod 0777 .
exec setpriv --reuid={NOBODY} --regid={NOBODY} --clear-groups /usr/bin/python3 "$@"
"""


class LoggedLocalBackend(LocalBackend):
    """The real LocalBackend; submissions.log in its work folder gets one line per new job."""

    def submit(self, jobs: Sequence[CleanupJob]) -> dict[str, str]:
        new = [j.job_id for j in jobs if not (self.job_dir(j.job_id) / MANIFEST_NAME).exists()]
        out = super().submit(jobs)
        with open(self.work_dir / "submissions.log", "a") as log:
            log.writelines(f"{jid} {os.getpid()}\n" for jid in new)
        return out

    def submissions(self) -> list[str]:
        path = self.work_dir / "submissions.log"
        return [line.split()[0] for line in path.read_text().splitlines()] if path.exists() else []


def make_site(base: Path, sources: Path, rse: str, config: Config) -> Path:
    """The RSE's storage folder holding every file of its dump, and its site configuration, registered
    in config.jobs.sites; returns the storage folder. The RSE's scan in the sources, when there, is then
    `rescan`ned: it lists files that exist when it starts."""
    storage = base / "storage" / rse
    fill_storage(storage, dump_file(sources, rse))
    siteconf = write_site(base / "siteconf", storage, site=resolve_site(config.jobs, rse, OfflineSources(sources)),
                          rse=rse, volume=f"{rse}_posix")
    config.jobs.sites.setdefault(rse, SiteConfig()).siteconfig = str(siteconf)
    rescan(sources, rse, storage)
    return storage


def as_nobody(base: Path) -> str:
    """A python3 for LocalBackend that runs the worker as the unprivileged user nobody."""
    path = base / "python-as-nobody"
    path.write_text(AS_NOBODY)
    path.chmod(0o755)
    return str(path)


def world_readable_dir(prefix: str) -> Path:
    """A folder nobody can reach (pytest's tmp_path is private to root)."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    path.chmod(0o755)
    return path


def chown_tree(root: Path, uid: int) -> None:
    """Everything under `root` owned by `uid`: links themselves, never what they point to."""
    os.chown(root, uid, uid)
    for dirpath, dirs, files in os.walk(root):
        for name in dirs + files:
            os.chown(os.path.join(dirpath, name), uid, uid, follow_symlinks=False)


def files_left(storage: Path) -> set[str]:
    """LFNs still in the storage folder."""
    return {"/" + str(p.relative_to(storage)) for p in (storage / "store").rglob("*") if p.is_file()}


def dump_lines(rse: str, files: int) -> tuple[list[str], list[str]]:
    """LFNs of `files` files over 10 datasets of one RSE, and the protected bases (2 datasets, one run-deep)."""
    lines = []
    for i in range(files):
        ds = i % 10
        lines.append(f"/store/unmerged/Run3Era/Primary{ds}/AODSIM/Proc{rse[-3:]}-v1/000/{(i // 10) % 7:03d}/"
                     f"f{i:06d}.root")
    protected = [f"/store/unmerged/Run3Era/Primary0/AODSIM/Proc{rse[-3:]}-v1",
                 f"/store/unmerged/Run3Era/Primary1/AODSIM/Proc{rse[-3:]}-v1/000/003"]
    return lines, protected


def rse_list(directory: Path, rses: Sequence[str]) -> OfflineSources:
    """Offline sources whose rses() (this instance's RSEs) are `rses`: for apply, which reads no dump."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / RSES_FILE).write_text(json.dumps(list(rses)))
    return OfflineSources(directory)


class ConMonStatsSources(OfflineSources):
    """Offline sources whose `stats` is read over HTTP from a real server playing ConMon (servers.http_fakes), one
    request a read (no retry): the server's requests count the reads."""

    def __init__(self, directory: Path, conmon_url: str, read_timeout_s: float = 2.0) -> None:
        super().__init__(directory)
        self.conmon = ConMonClient(ConMonConfig(url=conmon_url, connect_timeout_s=2.0, read_timeout_s=read_timeout_s,
                                                retries=0, backoff_s=0.01), AuthConfig())

    def stats(self) -> dict:
        return self.conmon.stats()


def write_sources(directory: Path, rses: Sequence[str], files: int | Mapping[str, int] = 1500,
                  end_time: Optional[float] = None) -> Path:
    """An offline sources directory with a dump per RSE (`files` lines, or `files[rse]`) and one shared protected
    list."""
    (directory / DUMPS_DIR).mkdir(parents=True, exist_ok=True)
    stats: dict = {}
    protected: list[str] = []
    end = time.time() - 60 if end_time is None else end_time
    for rse in rses:
        count = files if isinstance(files, int) else files[rse]
        lines, prot = dump_lines(rse, count)
        dump_file(directory, rse).write_text("\n".join(lines) + "\n")
        protected += prot
        stats.update(sample.stats_for(rse, count, end))
    (directory / STATS_FILE).write_text(json.dumps(stats))
    (directory / PROTECTED_FILE).write_text(json.dumps({"result": protected}))
    (directory / RSES_FILE).write_text(json.dumps(list(rses)))  # the instance's RSEs, scanned or not
    return directory
