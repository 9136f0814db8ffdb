"""LFN validation and the component-wise prefix sets used for protection and path filters."""
from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Callable, Generic, Iterable, Optional, TypeVar

UNMERGED = b"/store/unmerged/"

# Reasons a dump line is never deleted. Values are stable: they appear in plans and the ledger.
OUTSIDE_UNMERGED = "outside_unmerged"
RELATIVE = "relative_path"
DOT_COMPONENT = "dot_component"
EMPTY_COMPONENT = "empty_component"
TRAILING_SLASH = "trailing_slash"
CONTROL_OR_SPACE = "control_or_space"
NON_UTF8 = "non_utf8"
TOO_LONG = "too_long"
DUPLICATE = "duplicate"
INVALID_REASONS = (OUTSIDE_UNMERGED, RELATIVE, DOT_COMPONENT, EMPTY_COMPONENT, TRAILING_SLASH,
                   CONTROL_OR_SPACE, NON_UTF8, TOO_LONG, DUPLICATE)

# Printable ASCII except space: the only bytes the fast path accepts inside an LFN.
PRINTABLE = bytes(range(0x21, 0x7F))


class ProtectionListError(ValueError):
    """A protected base cannot be interpreted; the whole list is unusable (fail closed)."""


def depth(path: bytes) -> int:
    """Number of '/'-separated elements, counted like WMCore: /store/unmerged/a/b/c/d -> 7."""
    return path.count(b"/") + 1


def classify_line(raw: bytes, max_length: int) -> tuple[Optional[bytes], Optional[str]]:
    """Validate one dump line: (lfn, None) when deletable in principle, (None, reason) when not.

    Surrounding whitespace and CRLF are tolerated; a blank line gives (None, None).
    """
    line = raw.strip()
    if not line:
        return None, None
    if len(line) > max_length:
        return None, TOO_LONG
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError:
        return None, NON_UTF8
    if any(ch.isspace() or ord(ch) < 0x20 or 0x7F <= ord(ch) < 0xA0 for ch in text):
        return None, CONTROL_OR_SPACE
    if not line.startswith(b"/"):
        return None, RELATIVE
    if line.endswith(b"/"):
        return None, TRAILING_SLASH
    parts = line.split(b"/")[1:]
    if b"" in parts:
        return None, EMPTY_COMPONENT
    if b"." in parts or b".." in parts:
        return None, DOT_COMPONENT
    if not line.startswith(UNMERGED):
        return None, OUTSIDE_UNMERGED
    return line, None


def normalise_base(base: str) -> bytes:
    """Canonical form of a protected base or filter prefix: no repeated or trailing slashes."""
    text = base.strip()
    if not text.startswith("/"):
        raise ProtectionListError(f"not an absolute path: {base!r}")
    parts = [p for p in text.split("/") if p]
    if any(p in (".", "..") for p in parts):
        raise ProtectionListError(f"'.' or '..' component: {base!r}")
    if any(ch.isspace() or ord(ch) < 0x20 for ch in text):
        raise ProtectionListError(f"whitespace or control character: {base!r}")
    return ("/" + "/".join(parts)).encode("utf-8")


class PrefixSet:
    """A set of path prefixes matched component-wise at any depth ('/a/b' covers '/a/b/c', not '/a/bc')."""

    # Answers of `dir_state`, for all files directly inside a directory.
    NONE, ALL, SOME = 0, 1, 2

    def __init__(self, prefixes: Iterable[str]) -> None:
        self.prefixes: frozenset[bytes] = frozenset(normalise_base(p) for p in prefixes)
        self.covers_everything = b"/" in self.prefixes
        ancestors: set[bytes] = set()
        for p in self.prefixes:
            cut = p.rfind(b"/")
            while cut > 0:
                ancestors.add(p[:cut])
                cut = p.rfind(b"/", 0, cut)
            ancestors.add(b"/")
        self._ancestors = frozenset(ancestors)

    def __len__(self) -> int:
        return len(self.prefixes)

    def covers(self, path: bytes) -> bool:
        """True when a prefix equals `path` or is a component-wise ancestor of it."""
        if self.covers_everything:
            return True
        if not self.prefixes:
            return False
        # From the top down: a leading part that is no prefix's ancestor has no prefix at or below it, so
        # the walk ends where the path leaves the prefixes' tree (a few elements in, for most paths).
        prefixes, ancestors = self.prefixes, self._ancestors
        cut = path.find(b"/", 1)
        while cut > 0:
            head = path[:cut]
            if head in prefixes:
                return True
            if head not in ancestors:
                return False
            cut = path.find(b"/", cut + 1)
        return path in prefixes

    def dir_state(self, directory: bytes) -> int:
        """For the entries directly in `directory`: ALL covered, NONE covered or holding a prefix, or SOME
        (check each: a prefix is one of them or lies below one of them)."""
        if self.covers(directory):
            return self.ALL
        return self.SOME if directory in self._ancestors else self.NONE

    def holds_below(self, path: bytes) -> bool:
        """True when a prefix covers `path` or lies below it: removing `path`, as a file or as a directory
        with its content, could remove a prefix's path (never plan or remove it)."""
        return path in self._ancestors or self.covers(path)


T = TypeVar("T")


class PreparedByList(Generic[T]):
    """What `build` makes of a protected list, kept for the last `keep` lists by their exact content: the same list
    (every RSE of a cycle, its planner and its submission) is prepared once, and a changed list is built anew,
    never served from another's. The key is the list itself (a tuple: hashing reuses each string's cached hash,
    and an equal list of the same strings compares by identity), so no digest of ~5,000 bases is made per call.
    `build` must raise for a list it refuses; a refusal is never kept."""

    def __init__(self, build: Callable[[list[str]], T], keep: int = 2) -> None:
        self._build = build
        self._keep = keep
        self._made: OrderedDict[tuple[str, ...], T] = OrderedDict()
        self._lock = threading.Lock()  # the service plans RSEs in parallel threads

    def __call__(self, items: Iterable[str]) -> T:
        listed = list(items)
        key = tuple(listed)
        with self._lock:
            if key in self._made:
                self._made.move_to_end(key)
                return self._made[key]
        made = self._build(listed)  # outside the lock: two threads may both build; either result is the same
        with self._lock:
            self._made[key] = made
            while len(self._made) > self._keep:
                self._made.popitem(last=False)
        return made
