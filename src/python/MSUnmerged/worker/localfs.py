"""Local file system access that never follows a symbolic link at or below the unmerged root.

Every operation starts from the unmerged root's directory and opens one component at a time with
O_NOFOLLOW relative to its parent (openat), then acts on the last one with a *at call
(fstatat without following, unlinkat, rmdir with dir_fd). An unlink first checks, with fstatat on
the same directory descriptor, that the entry is still the one looked at (same device and inode, a
file or a link). A component that is a link stops the
walk: nothing behind it is looked at. Links in the components above the root (e.g. /mnt/storage ->
/data) are the site's layout and followed; the root's last component itself must be a directory.
"""
from __future__ import annotations

import errno
import os
import stat
from typing import List, NamedTuple, Optional, Tuple

_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | _CLOEXEC


class SymlinkInPath(Exception):
    """A symbolic link where a real directory (or the named directory itself) must be."""


class NotTheEntry(Exception):
    """At unlink time the entry is not the one looked at: another inode, or no longer a file or a link."""


class DirTimes(NamedTuple):
    """A directory on the way to an entry, as the walk opened it."""

    path: str
    mtime: float  # moves when an entry inside is added, removed or renamed
    ctime: float  # moves with mtime, and alone when the directory itself is renamed or moved, chmod'ed, chown'ed


class Entry(NamedTuple):
    size: int
    mtime: float
    ctime: float  # inode change time: moves on rename, link, chmod and utime too (it cannot be set back)
    mode: int
    ident: Tuple[int, int]  # (device, inode)
    dirs: Tuple[DirTimes, ...] = ()  # the directories below the root on the way to it, top first


def file_like(mode: int) -> bool:
    """A regular file or a symbolic link: the only entries ever unlinked (a link goes itself, never its target)."""
    return stat.S_ISREG(mode) or stat.S_ISLNK(mode)


def _is_link(dir_fd: int, name: str) -> bool:
    try:
        return stat.S_ISLNK(os.lstat(name, dir_fd=dir_fd).st_mode)
    except OSError:
        return False


def _open_dir(dir_fd: int, name: str, shown: str) -> int:
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    except OSError as exc:
        # Linux says ELOOP for a link under O_NOFOLLOW, BSDs EMLINK; a link to a file gives ENOTDIR.
        if exc.errno in (errno.ELOOP, errno.EMLINK, errno.ENOTDIR) and _is_link(dir_fd, name):
            raise SymlinkInPath("%s is a symbolic link" % shown) from None
        raise


def open_root(root: str) -> int:
    """A descriptor of the unmerged root directory (its last component must not be a link)."""
    parent, name = os.path.split(root.rstrip("/"))
    top = os.open(parent or "/", os.O_RDONLY | os.O_DIRECTORY | _CLOEXEC)
    try:
        return _open_dir(top, name, root.rstrip("/"))
    finally:
        os.close(top)


def walk(root: str, below: str, times: Optional[List[DirTimes]] = None) -> Tuple[int, str]:
    """(descriptor of the parent directory, last name) of `below` ("a/b/f") under `root`; `times` gets the
    directories opened below the root.

    The caller closes the descriptor. Raises SymlinkInPath or OSError (ENOENT, EACCES, ...).
    """
    parts = below.split("/")
    fd = open_root(root)
    shown = root.rstrip("/")
    try:
        for part in parts[:-1]:
            shown += "/" + part
            nxt = _open_dir(fd, part, shown)
            os.close(fd)
            fd = nxt
            if times is not None:
                st = os.fstat(fd)
                times.append(DirTimes(shown, st.st_mtime, st.st_ctime))
    except BaseException:
        os.close(fd)
        raise
    return fd, parts[-1]


def look(root: str, below: str, directory: bool = False) -> Entry:
    """lstat of `below`, with the times of the directories on the way: a file may be a link (only the link would
    go), a directory may not."""
    times: List[DirTimes] = []
    fd, name = walk(root, below, times)
    try:
        st = os.lstat(name, dir_fd=fd)
    finally:
        os.close(fd)
    if directory and stat.S_ISLNK(st.st_mode):
        raise SymlinkInPath("%s/%s is a symbolic link" % (root.rstrip("/"), below))
    return Entry(st.st_size, st.st_mtime, st.st_ctime, st.st_mode, (st.st_dev, st.st_ino), tuple(times))


def unlink(root: str, below: str, expect: Tuple[int, int]) -> None:
    """Remove one file, or a link itself (never its target), only when it is still the entry `look` saw:
    `expect` is its (device, inode). Raises NotTheEntry (nothing removed) when it is not."""
    fd, name = walk(root, below)
    try:
        st = os.stat(name, dir_fd=fd, follow_symlinks=False)
        if (st.st_dev, st.st_ino) != tuple(expect) or not file_like(st.st_mode):
            raise NotTheEntry("%s is not the file looked at: now %s with inode %d, then inode %d" % (
                where(root, below), "a file" if file_like(st.st_mode) else "not a file", st.st_ino, expect[1]))
        os.unlink(name, dir_fd=fd)
    finally:
        os.close(fd)


def rmdir(root: str, below: str) -> None:
    """Remove one empty directory; a link in its place is refused, not removed."""
    fd, name = walk(root, below)
    try:
        if _is_link(fd, name):
            raise SymlinkInPath("%s/%s is a symbolic link" % (root.rstrip("/"), below))
        os.rmdir(name, dir_fd=fd)
    finally:
        os.close(fd)


def where(root: str, below: Optional[str]) -> str:
    """The full path of `below` under `root`, for messages."""
    return root.rstrip("/") + ("/" + below if below else "")


class Child(NamedTuple):
    """An entry of a directory as listed: a link or anything else but a directory has is_dir False."""

    name: str
    is_dir: bool
    mtime: float
    ctime: float


def children(root: str, below: str) -> List[Child]:
    """The entries of the directory `below` under `root` (lstat of each: no link is followed)."""
    fd, name = walk(root, below)
    try:
        dfd = _open_dir(fd, name, where(root, below))
    finally:
        os.close(fd)
    try:
        with os.scandir(dfd) as listing:  # scandir works on its own copy of the descriptor
            return [Child(e.name, stat.S_ISDIR(st.st_mode), st.st_mtime, st.st_ctime)
                    for e in listing for st in (e.stat(follow_symlinks=False),)]
    finally:
        os.close(dfd)


def error_text(exc: OSError, root: str, below: Optional[str]) -> str:
    """An OSError of a walk as '<strerror>: <path>' (the *at calls leave filename relative)."""
    return "%s: %s" % (exc.strerror, where(root, below))
