"""LFN checks and component-wise path sets, re-done at the site before anything is touched."""
from __future__ import annotations

import re
from typing import Iterable, Optional

UNMERGED = "/store/unmerged/"
# CMS's other namespaces: deleting must never reach their PFNs (docs/jobs.md, "Other namespaces").
OTHER_NAMESPACES = ("/store/data/", "/store/mc/", "/store/hidata/", "/store/himc/", "/store/relval/", "/store/user/",
                    "/store/group/", "/store/temp/", "/store/backfill/", "/store/results/", "/store/express/",
                    "/store/t0temp/", "/store/t0streamer/", "/store/streamer/", "/store/generator/", "/store/lhe/",
                    "/store/test/", "/store/local/", "/store/integration/", "/store/accounting/")
# The one limit on a path's length: the service's planner.max_lfn_length is validated against it.
MAX_LFN = 4096
# A directory is never removed above this depth floor: /store/unmerged/<x> has depth 4.
MIN_DIR_DEPTH = 5
# Any Unicode whitespace, C0/C1 control characters and DEL (one C-level scan per path).
_BAD_CHAR = re.compile(r"[\s\x00-\x1f\x7f-\x9f]")


def depth(path: str) -> int:
    """Elements counted like WMCore: /store/unmerged/a/b/c/d -> 7."""
    return path.count("/") + 1


def problem(path: str) -> Optional[str]:
    """Why `path` is not a canonical path under /store/unmerged/, or None when it is."""
    if not isinstance(path, str) or not path:
        return "not a non-empty string"
    if len(path) > MAX_LFN:
        return "longer than %d characters" % MAX_LFN
    if not path.startswith(UNMERGED) or len(path) == len(UNMERGED):
        return "not under /store/unmerged/"
    if _BAD_CHAR.search(path):
        return "whitespace or control character"
    if path.endswith("/"):
        return "trailing slash"
    parts = path.split("/")[1:]
    if "" in parts:
        return "empty path component"
    if "." in parts or ".." in parts:
        return "'.' or '..' component"
    return None


def ancestors(path: str) -> Iterable[str]:
    """Proper ancestors of `path`, deepest first, down to '/store'."""
    cut = path.rfind("/")
    while cut > 0:
        path = path[:cut]
        yield path
        cut = path.rfind("/")


class PathSet:
    """Paths matched component-wise at any depth: '/a/b' covers '/a/b/c', not '/a/bc'."""

    def __init__(self, paths: Iterable[str]) -> None:
        # Normalised like the planner's bases (lfn.normalise_base): surrounding whitespace, repeated and
        # trailing slashes do not hide a match.
        self.paths = frozenset("/" + "/".join(part for part in p.strip().split("/") if part) for p in paths)
        below = set()
        for p in self.paths:
            below.update(ancestors(p))
        self._ancestors = frozenset(below)

    def covers(self, path: str) -> bool:
        """True when a member equals `path` or is a component-wise ancestor of it."""
        paths = self.paths
        if path in paths:
            return True
        for parent in ancestors(path):
            if parent in paths:
                return True
        return "/" in paths

    def at_or_above(self, directory: str) -> bool:
        """True when `directory` is a member or an ancestor of one (it holds a member: it must stay)."""
        return directory in self.paths or directory in self._ancestors
