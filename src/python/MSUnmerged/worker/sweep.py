"""The sweep of empty directories below the dataset directories a job cleans (`sweep_empty_dirs`, opt-in per RSE
with `jobs.sites.<RSE>.remove_empty_dirs`): directories no dump lists, because they hold no file, that are
older than the scan start.

A directory strictly below a dataset directory is removed when it holds nothing but directories removed the
same way, its modification and change times as listed (before anything below it was removed; the change time
moves on a rename into place and cannot be set back) are not after the scan's start, and the job's directory
checks pass (never protected, kept or excluded, never above the floor). The
listing follows no link: a link is an entry like a file, so its directory stays. Removal is rmdir only.
"""
from __future__ import annotations

from typing import Callable, List, Optional, Tuple

from . import paths
from .deleters import Result
from .localfs import Child

# (entries, None), or (None, why the directory could not be listed)
Listing = Tuple[Optional[List[Child]], Optional[Result]]


def empty_below(top: str, list_dir: Callable[[str], Listing], descend: Callable[[str], bool],
                eligible: Callable[[str, float], bool], failed: Callable[[str, Result], None]) -> List[str]:
    """The directories strictly below `top` that may be removed, deepest first (each before its parent).
    `descend(dir)`: whether to look inside (not under a protected or excluded path); `eligible(dir, changed)`: the
    job's directory checks and the age (the later of its modification and change times); `failed`: a listing
    that did not work."""
    found: List[str] = []

    def visit(directory: str) -> bool:
        """Whether `directory` holds nothing but removable directories (added to `found`)."""
        entries, error = list_dir(directory)
        if entries is None:
            if error is not None:
                failed(directory, error)
            return False
        empty = True
        for child in sorted(entries):
            path = "%s/%s" % (directory, child.name)
            if not (child.is_dir and paths.problem(path) is None and descend(path)):
                empty = False
            elif visit(path) and eligible(path, max(child.mtime, child.ctime)):
                found.append(path)
            else:
                empty = False
        return empty

    visit(top)
    return found
