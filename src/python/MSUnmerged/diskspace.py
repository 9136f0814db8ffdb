"""Free space of the service's own folders (its state: plans, reports, the embedded database; the local jobs'
folders): a full one stops the work with the named reason `state_disk_full` (service/result.py), and /metrics and
the page show how much is left, also while the service is idle."""
from __future__ import annotations

import errno
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from MSUnmerged.config import Config

STATE_DISK_FULL = "state_disk_full"  # the reason of a run a full file system of the service stopped
DISK_FULL = (errno.ENOSPC, errno.EDQUOT)  # the errors that mean it
FULL_BYTES = 1024 * 1024  # no more room than this: full (a worker's report may not have found room for a line)
# The page warns below the smaller of these (a plan or a job's folder may no longer fit).
LOW_BYTES = 256 * 1024 * 1024
LOW_FRACTION = 0.05


@dataclass(frozen=True)
class Space:
    """One folder's file system: its bytes free (to this user) and its size."""

    folder: str  # "state" or "jobs"
    path: str
    free: int
    size: int

    @property
    def low(self) -> bool:
        return self.free < min(LOW_BYTES, self.size * LOW_FRACTION)


def full(path: Path) -> bool:
    """The file system of `path` has (next to) no room left: FULL_BYTES or less."""
    try:
        st = os.statvfs(path)
    except OSError:
        return False
    return st.f_bavail * st.f_frsize <= FULL_BYTES


def folders(config: Config) -> dict[str, Path]:
    """The folders the service writes on its own host, by name."""
    return {"state": config.state_dir, "jobs": config.local_jobs_dir}


def measure(paths: Mapping[str, Path]) -> list[Space]:
    """Each folder's file system now; a folder not made yet: the nearest parent's; one that cannot be read: left out."""
    out = []
    for name, path in paths.items():
        probe = Path(path)
        while not probe.exists() and probe != probe.parent:
            probe = probe.parent
        try:
            st = os.statvfs(probe)
        except OSError:
            continue
        out.append(Space(name, str(path), st.f_bavail * st.f_frsize, st.f_blocks * st.f_frsize))
    return out
