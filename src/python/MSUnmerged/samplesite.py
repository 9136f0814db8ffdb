"""A real POSIX "site" on local disk: a storage folder holding a dump's files, and the site's own
site-local-config.xml and storage.json, as the worker reads them at a site (demo, tests)."""
from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from typing import Optional

from MSUnmerged.sources.offline import STATS_FILE

DEMO_RSE = "T2_XX_Sample"
DEMO_SITE = "T2_XX_Sample"
DEMO_VOLUME = "Sample_Disk"
MARKER = ".msunmerged-demo"  # the storage folder is the demo's own: nothing else is ever touched
# Files are dated this far back: written before the scan that lists them (workers refuse newer files).
AGE_S = 86400
SETTLE_S = 5.0  # rescan waits at most this long for the clock to pass the site's newest change


def write_site(work: Path, storage: Path, site: str = DEMO_SITE, rse: str = DEMO_RSE,
               volume: str = DEMO_VOLUME) -> Path:
    """The site's SITECONFIG_PATH under `work`, for a POSIX storage folder `storage`."""
    return write_siteconf(work / "SITECONF" / site, site, rse, volume, str(storage.resolve()))


def write_siteconf(siteconf: Path, site: str, rse: str, volume: str, prefix: str) -> Path:
    """JobConfig/site-local-config.xml (stage-out: posix on `volume`) and storage.json (the volume is
    `rse`, LFNs map under `prefix` as the worker node sees it) in the folder `siteconf`."""
    (siteconf / "JobConfig").mkdir(parents=True, exist_ok=True)
    (siteconf / "JobConfig" / "site-local-config.xml").write_text(
        f'<site-local-config>\n  <site name="{site}">\n'
        f'    <stage-out>\n      <method volume="{volume}" protocol="posix" command="cp"/>\n'
        f'    </stage-out>\n  </site>\n</site-local-config>\n')
    (siteconf / "storage.json").write_text(json.dumps([{
        "site": site, "volume": volume, "rse": rse, "type": "DISK",
        "protocols": [{"protocol": "posix", "access": "global-rw", "prefix": prefix}]}], indent=1))
    return siteconf


def fill_storage(storage: Path, dump: Path) -> None:
    """Create every file of the dump (empty, dated AGE_S back) under the storage folder."""
    if (storage / MARKER).exists():
        shutil.rmtree(storage)  # our own folder, from an earlier run: start from the full site
    storage.mkdir(parents=True, exist_ok=True)
    (storage / MARKER).touch()
    made: set[Path] = set()
    written = time.time() - AGE_S
    for line in dump.read_text().split():
        path = storage / line.lstrip("/")
        if path.parent not in made:
            path.parent.mkdir(parents=True, exist_ok=True)
            made.add(path.parent)
        path.touch()
        os.utime(path, (written, written))


def count_files(storage: Path) -> int:
    return sum(1 for p in (storage / "store").rglob("*") if p.is_file())


def newest_change(storage: Path) -> float:
    """The latest change time (ctime) of the storage folder and anything in it, 0.0 when it does not exist."""
    if not storage.exists():
        return 0.0
    return max([os.lstat(storage).st_ctime] + [os.lstat(p).st_ctime for p in storage.rglob("*")])


def rescan(sources: Path, rse: str, storage: Optional[Path] = None) -> None:
    """The RSE's finished scan in `sources`' stats file (one that gives a start_time) starts now, after its site's
    files were made (workers refuse files changed after the scan started, by their ctime, which cannot be dated
    back like the mtime), and ends no earlier. With the site's `storage` folder: once the clock is past the newest
    change time in it (at most SETTLE_S later): the kernel dates files by its own clock reading, and a scan that
    started at the same moment as a change, by another reading, could start before it (its files refused in
    every try: done_with_errors)."""
    path = sources / STATS_FILE
    stats = json.loads(path.read_text()) if path.exists() else {}
    scan = stats.get(rse)
    if isinstance(scan, dict) and scan.get("status") == "done" and "start_time" in scan:
        newest = newest_change(storage) if storage is not None else 0.0
        deadline = time.monotonic() + SETTLE_S
        while time.time() <= newest and time.monotonic() < deadline:
            time.sleep(0.01)
        scan["start_time"] = time.time()
        scan["end_time"] = max(scan.get("end_time") or 0, scan["start_time"])
        path.write_text(json.dumps(stats))
