"""Deletion with the site's own tool: POSIX unlink, `xrdfs rm`, the gfal2 module or `gfal-rm`.

Every deleter takes many PFNs per call and gives one Result per PFN, in order. Directories are
removed with a plain rmdir only: nothing here ever removes recursively. `inspect` looks at the
PFNs before anything is deleted (links in the path, the kind of entry, size, modification and
change times), as far as the protocol lets it see, and refuses anything that is not a regular
file or a link (`not_a_file`: a WebDAV DELETE of a collection is recursive); dry runs make the
same look.
"""
from __future__ import annotations

import calendar
import errno
import os
import re
import shutil
import signal
import stat
import subprocess
import tempfile
import threading
import time
from typing import Callable, Dict, List, Mapping, NamedTuple, Optional, Tuple, TypeVar

from . import localfs
from .pfn import below_root
from .report import MODIFIED_SINCE_SCAN, NOT_A_FILE, SYMLINK_IN_PATH

from . import credentials

DELETED = "deleted"
MISSING = "missing"
DENIED = "permission_denied"
AUTH_FAILED = "auth_failed"  # the storage refused the job's credential (or it has none it accepts)
TIMEOUT = "timeout"
STORAGE_ERROR = "storage_error"
REFUSED = "refused"
# Directory outcomes besides the ones above.
REMOVED = "removed"
NOT_EMPTY = "not_empty"

_DENIED_ERRNOS = (errno.EACCES, errno.EPERM, errno.EROFS)
_FINAL_ERRNOS = (errno.EISDIR, errno.ENOTDIR, errno.ENAMETOOLONG, errno.ELOOP, errno.EINVAL)


class Result(NamedTuple):
    outcome: str
    error: Optional[str] = None
    transient: bool = False  # worth another attempt
    reason: Optional[str] = None  # a report.REASONS code for a refusal


OK = Result(DELETED)


# Tool messages of a refused or missing credential (xrdfs "[FATAL] Auth failed", HTTP 401 through gfal2).
_AUTH_FAILURES = ("auth failed", "authentication failed", "unable to authenticate", "401 unauthorized",
                  "http 401", "no valid credential", "token expired", "could not find a valid token")


def _auth_failed(message: str) -> bool:
    low = message.lower()
    return any(s in low for s in _AUTH_FAILURES)


class Seen(NamedTuple):
    """What `inspect` found: a final answer (the entry is not touched), or what the protocol tells of the file."""

    result: Optional[Result] = None
    size: Optional[int] = None
    mtime: Optional[float] = None  # epoch seconds; None: the protocol does not tell
    ctime: Optional[float] = None  # inode change time, where the storage gives one
    ident: Optional[Tuple[int, int]] = None  # (device, inode) of a local file: its unlink refuses another one
    etag: Optional[str] = None  # WebDAV: the ETag the PROPFIND gave, the condition of the DELETE
    dirs: Tuple[localfs.DirTimes, ...] = ()  # a local file's directories below the root (localfs.look)


def symlink_refusal(exc: localfs.SymlinkInPath) -> Result:
    return Result(REFUSED, str(exc), reason=SYMLINK_IN_PATH)


_KINDS = {stat.S_IFDIR: "a directory", stat.S_IFIFO: "a fifo", stat.S_IFSOCK: "a socket",
          stat.S_IFBLK: "a block device", stat.S_IFCHR: "a character device"}


def not_a_file(where: str, kind: str) -> Seen:
    return Seen(Result(REFUSED, "%s is %s, not a file" % (where, kind), reason=NOT_A_FILE))


def seen_stat(where: str, mode: int, size: int, mtime: float, ctime: Optional[float],
              ident: Optional[Tuple[int, int]] = None) -> Seen:
    """A file's Seen from a stat, or a not_a_file refusal when the entry is not a regular file or a link."""
    if not localfs.file_like(mode):
        return not_a_file(where, _KINDS.get(stat.S_IFMT(mode), "of mode %o" % mode))
    return Seen(None, size, mtime, ctime, ident)


def _no_answer(rc: Optional[int], why: str) -> Result:
    """A tool that gave no per-path answer: killed (timeout), refused our credential, or failed otherwise."""
    if rc is None:
        return Result(TIMEOUT, why, True)
    if _auth_failed(why):
        return Result(AUTH_FAILED, why)
    return Result(STORAGE_ERROR, why, True)


def from_errno(code: int, message: str, directory: bool = False) -> Result:
    """Classify an errno; ENOENT means already gone, ENOTEMPTY is a normal directory answer."""
    if code == errno.ENOENT:
        return Result(MISSING, message)
    if _auth_failed(message):
        return Result(AUTH_FAILED, message)
    if directory and code in (errno.ENOTEMPTY, errno.EEXIST):
        return Result(NOT_EMPTY, message)
    if code in _DENIED_ERRNOS:
        return Result(DENIED, message)
    if code == errno.ETIMEDOUT:
        return Result(TIMEOUT, message, True)
    return Result(STORAGE_ERROR, message, code not in _FINAL_ERRNOS)


def from_message(message: str, directory: bool = False) -> Result:
    """Classify a tool's error text (xrdfs, gfal-rm print no errno)."""
    low = message.lower()
    if "no such file" in low or "[3011]" in low or "not found" in low:
        return Result(MISSING, message)
    if directory and ("not empty" in low or "[3005]" in low):
        return Result(NOT_EMPTY, message)
    if _auth_failed(message):
        return Result(AUTH_FAILED, message)
    if "permission denied" in low or "not authorized" in low or "operation not permitted" in low \
            or "[3010]" in low or "read-only file system" in low:
        return Result(DENIED, message)
    if "expired" in low or "timed out" in low or "timeout" in low:
        return Result(TIMEOUT, message, True)
    final = "is a directory" in low or "not a directory" in low or "invalid" in low
    return Result(STORAGE_ERROR, message, not final)


class Deleter:
    """Base: `unlink` many PFNs, `rmdir` one; `problem` says why the tool cannot be used here.

    `root` is the unmerged root's PFN; the job sets it once checked, before any other call.
    """

    name = "base"
    batch_size = 100
    can_rmdir = True
    mtime_step = 0.0  # the resolution of the times a remote `inspect` gives (xrootd and gfal2: whole seconds)
    remote_checks = "none"  # what `inspect` learns of a PFN that is not local

    def __init__(self, timeout: float, env: Optional[Mapping[str, str]] = None) -> None:
        self.timeout = timeout
        self.env = dict(os.environ if env is None else env)
        self.root = ""

    def inspect(self, pfns: List[str], directory: bool = False) -> List[Seen]:
        """One Seen per PFN: local ones walked from the root without following a link, others unseen."""
        if _local_path(self.root):
            return watched_map(lambda p: look_local(self.root, p, directory), pfns, self.timeout, Seen)
        return [Seen()] * len(pfns)

    def time_step(self) -> float:
        """The resolution of the times `inspect` gives: a local lstat's are exact."""
        return 0.0 if _local_path(self.root) else self.mtime_step

    def checks(self) -> str:
        """What `inspect` checks, for the report's start line."""
        return "lstat" if _local_path(self.root) else self.remote_checks

    def problem(self) -> Optional[str]:
        return None

    def prepare(self, dry_run: bool) -> Optional[Result]:
        """Once the root is set, before the first delete: why no file may be deleted with this tool here (every
        planned file gets that Result), or None."""
        return None

    def accepts(self, pfn: str) -> bool:
        """True when this deleter can act on a PFN of this form."""
        raise NotImplementedError

    def unlink(self, pfns: List[str], looks: List[Seen]) -> List[Result]:
        """Delete these files; `looks` are their `inspect` answers (a local unlink refuses another inode)."""
        raise NotImplementedError

    def rmdir(self, pfn: str) -> Result:
        raise NotImplementedError

    def lists(self) -> bool:
        """Whether `list_dir` can list a directory without following links (the sweep of empty directories)."""
        return False

    def list_dir(self, pfn: str) -> "tuple[Optional[List[localfs.Child]], Optional[Result]]":
        """(entries, None) of a directory without following a link, or (None, why not)."""
        raise NotImplementedError


def deletes_files_only(root: str) -> bool:
    """Whether the protocol of the unmerged root's PFN deletes files only: xrootd's `rm` (xrdfs, gfal2 over
    root://) refuses a directory. A WebDAV DELETE of a collection is recursive; local storage's look is the walk
    that refuses links: there the look before deleting is never left out."""
    return bool(_XRD_URL.match(root))


def _local_path(pfn: str) -> Optional[str]:
    if pfn.startswith("file://"):
        pfn = pfn[len("file://"):]
    return pfn if pfn.startswith("/") and "://" not in pfn else None


def look_local(root: str, pfn: str, directory: bool = False) -> Seen:
    """`inspect` of a local PFN under the local unmerged root, never following a link."""
    below = below_root(pfn, root)
    try:
        entry = localfs.look(_local_path(root) or "", below, directory)
    except localfs.SymlinkInPath as exc:
        return Seen(symlink_refusal(exc))
    except OSError as exc:
        return Seen(from_errno(exc.errno or 0, localfs.error_text(exc, root, below), directory))
    if directory:
        return Seen(None, entry.size, entry.mtime, entry.ctime, entry.ident)
    seen = seen_stat(localfs.where(root, below), entry.mode, entry.size, entry.mtime, entry.ctime, entry.ident)
    return seen._replace(dirs=entry.dirs)


T = TypeVar("T")
Item = TypeVar("Item")


class _Watched(threading.Thread):
    """Runs `fn` over items in a daemon thread, recording when each item started (for the watchdog)."""

    def __init__(self, fn: Callable[[Item], T], items: List[Item]) -> None:
        super().__init__(daemon=True)
        self.fn = fn
        self.items = items
        self.results: List[T] = []
        self.started_at = time.monotonic()
        self.cancelled = False
        self.lock = threading.Lock()

    def run(self) -> None:
        for item in self.items:
            self.started_at = time.monotonic()
            result = self.fn(item)
            with self.lock:  # once cancelled, a late answer must not shift the results
                if self.cancelled:
                    return
                self.results.append(result)


def watched_map(fn: Callable[[Item], T], items: List[Item], timeout: float,
                wrap: Callable[[Result], T] = lambda r: r) -> List[T]:  # type: ignore[assignment,return-value]
    """fn over items with a per-item timeout: a stuck call (hung mount) is abandoned, the rest go on.

    The stuck thread may still finish its call later; it is cancelled so it touches nothing else.
    `wrap` turns the timeout Result into fn's answer type.
    """
    results: List[T] = []
    while len(results) < len(items):
        worker = _Watched(fn, items[len(results):])
        worker.start()
        while True:
            worker.join(min(0.25, timeout))
            if not worker.is_alive():
                results.extend(worker.results)
                break
            if time.monotonic() - worker.started_at > timeout:
                with worker.lock:
                    worker.cancelled = True
                    results.extend(worker.results)
                results.append(wrap(Result(TIMEOUT, "no answer after %gs" % timeout, True)))
                break
    return results


class PosixDeleter(Deleter):
    """unlink and rmdir on a locally mounted file system, walking from the unmerged root without
    following any link (MSUnmerged.worker.localfs)."""

    name = "posix"
    batch_size = 500

    def accepts(self, pfn: str) -> bool:
        return _local_path(pfn) is not None

    def _act(self, action: Callable[[str, str], None], pfn: str, done: Result, directory: bool) -> Result:
        below = below_root(pfn, self.root)
        try:
            action(_local_path(self.root) or "", below)
            return done
        except localfs.SymlinkInPath as exc:
            return symlink_refusal(exc)
        except localfs.NotTheEntry as exc:  # replaced since the look (or its path now leads elsewhere)
            return Result(REFUSED, str(exc), reason=MODIFIED_SINCE_SCAN)
        except OSError as exc:
            return from_errno(exc.errno or 0, localfs.error_text(exc, self.root, below), directory)

    def unlink(self, pfns: List[str], looks: List[Seen]) -> List[Result]:
        def one(pair: Tuple[str, Seen]) -> Result:
            pfn, look = pair  # every local look gives the inode; no inode matches (-1, -1)
            return self._act(lambda root, below: localfs.unlink(root, below, look.ident or (-1, -1)), pfn, OK, False)
        return watched_map(one, list(zip(pfns, looks)), self.timeout)

    def rmdir(self, pfn: str) -> Result:
        return watched_map(lambda p: self._act(localfs.rmdir, p, Result(REMOVED), True), [pfn], self.timeout)[0]

    def lists(self) -> bool:
        return _local_path(self.root) is not None

    def list_dir(self, pfn: str) -> "tuple[Optional[List[localfs.Child]], Optional[Result]]":
        def one(p: str) -> "tuple[Optional[List[localfs.Child]], Optional[Result]]":
            found: List[List[localfs.Child]] = []
            got = self._act(lambda root, below: found.append(localfs.children(root, below)), p, OK, True)
            return (found[0], None) if found else (None, got)
        return watched_map(one, [pfn], self.timeout, lambda r: (None, r))[0]  # type: ignore[arg-type,return-value]


def _run(argv: List[str], env: Mapping[str, str], timeout: float,
         stdin: Optional[str] = None) -> "tuple[Optional[int], str, str]":
    """Run a tool in its own process group; on timeout the group is killed and rc is None."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=dict(env),
                            stdin=subprocess.DEVNULL if stdin is None else subprocess.PIPE,
                            universal_newlines=True, start_new_session=True)
    try:
        out, err = proc.communicate(stdin, timeout=timeout)
        return proc.returncode, out, err
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        out, err = proc.communicate()
        return None, out, err


def _tail(text: str) -> str:
    return " ".join(text.strip().splitlines()[-3:])[-300:]


_XRD_URL = re.compile(r"^(root|xroot)s?://[^/]+")
_HTTP_URL = re.compile(r"^(https?|davs?)://", re.IGNORECASE)
_XRD_LINE = re.compile(r"^(?:rm|rmdir) (\S+) : \[(SUCCESS|ERROR|FATAL)\] ?(.*)$")
# `xrdfs host` reading "stat <path>" lines: a block per found path; errors on stderr name the path.
_XRD_STAT = re.compile(r"^(Path|Size|MTime|CTime|Flags):\s*(.*)$")
_XRD_NOT_FILE = {"IsDir": "a directory", "Other": "not a regular file"}  # xrootd's stat flags (XrdCl StatInfo)


class XrootdDeleter(Deleter):
    """`xrdfs <host> rm p1 p2 ...`: one process for a whole batch, one answer line per path."""

    name = "xrootd"
    batch_size = 200
    mtime_step = 1.0  # xrdfs prints MTime in whole seconds (UTC)
    remote_checks = "stat"

    def problem(self) -> Optional[str]:
        return None if shutil.which("xrdfs", path=self.env.get("PATH")) else "xrdfs not found on PATH"

    @staticmethod
    def split(pfn: str) -> "tuple[str, str]":
        """root://host:port//path -> ("root://host:port", "/path"); ("", "") when not an xrootd URL."""
        m = _XRD_URL.match(pfn)
        if not m:
            return "", ""
        path = "/" + pfn[m.end():].lstrip("/")
        if "://" in path or len(path) < 2:  # a proxy-style prefix: not a plain path on this server
            return "", ""
        return m.group(0), path

    def accepts(self, pfn: str) -> bool:
        # xrdfs reads its stat commands as words: a path with whitespace would be split.
        return bool(self.split(pfn)[0]) and not re.search(r"\s", pfn)

    def _tool_env(self) -> Dict[str, str]:
        env = dict(self.env)
        # Per request: xrdfs gives up on a path after this many seconds and says so.
        env.setdefault("XRD_REQUESTTIMEOUT", str(max(1, int(self.timeout))))
        return env

    def inspect(self, pfns: List[str], directory: bool = False) -> List[Seen]:
        """Kind, size, mtime and ctime of files: one `xrdfs <host>` process reading a "stat <path>" line per file.

        The server resolves links itself and answers for their targets: xrootd shows clients no
        links, so none can be refused here (docs/jobs.md). A path whose flags say IsDir or Other is
        not a file. Directories are not looked at.
        """
        if directory or not pfns:
            return [Seen()] * len(pfns)
        host = self.split(pfns[0])[0]  # every PFN of a job is on the unmerged root's endpoint
        paths = [self.split(p)[1] for p in pfns]
        limit = 2 * self.timeout + 10
        # Interactive xrdfs aborts without HOME and keeps a history file there: give it a scratch one.
        with tempfile.TemporaryDirectory(prefix="msunmerged-xrdfs-") as home:
            rc, out, err = _run(["xrdfs", host], dict(self._tool_env(), HOME=home), limit,
                                stdin="".join("stat %s\n" % p for p in paths) + "exit\n")
        found: Dict[str, Dict[str, str]] = {}
        block: Dict[str, str] = {}
        for line in out.splitlines():
            m = _XRD_STAT.match(line.strip())
            if m and m.group(1) == "Path":
                block = found.setdefault(m.group(2), {})
            elif m:
                block[m.group(1)] = m.group(2)
        seen = []
        for path in paths:
            info = found.get(path)
            if info is not None and "Size" in info and "MTime" in info and "Flags" in info:
                try:
                    seen.append(_xrd_seen(host + "/" + path, info))
                except ValueError:
                    seen.append(Seen(Result(STORAGE_ERROR, "unreadable xrdfs stat answer: %r" % info, True)))
                continue
            said = [x for x in err.splitlines() if " %s;" % path in x or x.rstrip("\x00").endswith(" " + path)]
            if said:
                seen.append(Seen(from_message(said[0].rstrip("\x00"))))
            else:
                why = "xrdfs stat killed after %gs" % limit if rc is None else \
                    "no stat answer from xrdfs: %s" % _tail(err)
                seen.append(Seen(_no_answer(rc, why)))
        return seen

    def unlink(self, pfns: List[str], looks: List[Seen]) -> List[Result]:
        by_host: Dict[str, List[int]] = {}
        paths = []
        for i, pfn in enumerate(pfns):
            host, path = self.split(pfn)
            paths.append(path)
            by_host.setdefault(host, []).append(i)
        results: List[Optional[Result]] = [None] * len(pfns)
        for host, idx in by_host.items():
            wanted = [paths[i] for i in idx]
            # Requests run concurrently; the wall limit only catches a client that hangs.
            rc, out, err = _run(["xrdfs", host, "rm"] + wanted, self._tool_env(), 2 * self.timeout + 10)
            answers: Dict[str, Result] = {}
            for line in out.splitlines():
                m = _XRD_LINE.match(line.strip())
                if m:
                    answers[m.group(1)] = OK if m.group(2) == "SUCCESS" else from_message(m.group(3))
            for i in idx:
                got = answers.get(paths[i])
                if got is None:
                    why = "xrdfs killed after %gs" % (2 * self.timeout + 10) if rc is None else \
                        "no answer from xrdfs (exit %s): %s" % (rc, _tail(err or out))
                    got = _no_answer(rc, why)
                results[i] = got
        return [r for r in results if r is not None]

    def rmdir(self, pfn: str) -> Result:
        host, path = self.split(pfn)
        rc, out, err = _run(["xrdfs", host, "rmdir", path], self._tool_env(), 2 * self.timeout + 10)
        if rc == 0:
            return Result(REMOVED)
        if rc is None:
            return Result(TIMEOUT, "xrdfs rmdir killed after %gs" % (2 * self.timeout + 10), True)
        return from_message(_tail(err or out), directory=True)


def _xrd_time(text: str) -> float:
    return float(calendar.timegm(time.strptime(text, "%Y-%m-%d %H:%M:%S")))  # xrdfs prints UTC


def _xrd_seen(where: str, info: Dict[str, str]) -> Seen:
    """A Seen from one xrdfs stat block (ValueError when it cannot be read)."""
    words = re.findall(r"\w+", info["Flags"].partition("(")[2])
    int(info["Flags"].split()[0])  # the flags' number: a block without one is not understood
    for flag, kind in _XRD_NOT_FILE.items():
        if flag in words:
            return not_a_file(where, kind)
    ctime = _xrd_time(info["CTime"]) if "CTime" in info else None  # servers without extended stat give none
    return Seen(None, int(info["Size"]), _xrd_time(info["MTime"]), ctime)


def _gfal_url(pfn: str) -> str:
    return "file://" + pfn if pfn.startswith("/") else pfn


class _GfalDeleter(Deleter):
    """What both gfal2 deleters share: file:// PFNs are looked at locally, never following a link
    (gfal2 has no call relative to a directory, so the delete itself goes by path: docs/jobs.md)."""

    def accepts(self, pfn: str) -> bool:
        # Not WebDAV: its DELETE of a collection is recursive (worker/webdav.py deletes there).
        return pfn.startswith("/") or bool(re.match(r"^[a-z][a-z0-9+.-]*://", pfn)) and not _HTTP_URL.match(pfn)

    def _stat_remote(self, url: str) -> Seen:
        """A stat of one remote URL with this deleter's tool."""
        raise NotImplementedError

    def inspect(self, pfns: List[str], directory: bool = False) -> List[Seen]:
        if _local_path(self.root) or directory:
            return super().inspect(pfns, directory)
        return watched_map(self._stat_remote, [_gfal_url(p) for p in pfns], self.timeout + 10, Seen)


class Gfal2Deleter(_GfalDeleter):
    """The gfal2 Python module: one bulk `unlink` call per batch, a GError or None per file."""

    name = "gfal2"
    batch_size = 200
    mtime_step = 1.0  # gfal2 stat gives whole seconds
    remote_checks = "stat"

    def __init__(self, timeout: float, env: Optional[Mapping[str, str]] = None) -> None:
        super().__init__(timeout, env)
        self._ctx = None

    def problem(self) -> Optional[str]:
        try:
            import gfal2  # noqa: F401  (site-provided, outside the standard library)
        except ImportError as exc:
            return "python gfal2 module not importable: %s" % exc
        return None

    def _stat_remote(self, url: str) -> Seen:
        import gfal2
        try:
            st = self._context().stat(url)
        except gfal2.GError as exc:
            return Seen(from_errno(exc.code, exc.message))
        return seen_stat(url, st.st_mode, st.st_size, float(st.st_mtime), float(st.st_ctime))

    def _context(self):  # type: ignore[no-untyped-def]
        if self._ctx is None:
            import gfal2
            # XrdCl and davix inside this process read the credential from the process environment.
            os.environ.update({k: v for k, v in self.env.items() if k in credentials.TOOL_VARS})
            ctx = gfal2.creat_context()
            for group, key, value in credentials.gfal2_options(self.env):
                ctx.set_opt_string(group, key, value)
            for plugin, key in (("CORE", "NAMESPACE_TIMEOUT"), ("XROOTD PLUGIN", "OPERATION_TIMEOUT"),
                                ("HTTP PLUGIN", "OPERATION_TIMEOUT"), ("SRM PLUGIN", "OPERATION_TIMEOUT")):
                try:
                    ctx.set_opt_integer(plugin, key, max(1, int(self.timeout)))
                except Exception:  # an option this gfal2 build does not know: keep its default
                    pass
            self._ctx = ctx
        return self._ctx

    def _bulk(self, urls: List[str]) -> List[Result]:
        import gfal2
        try:
            errors = self._context().unlink(urls)
        except gfal2.GError as exc:  # the whole call failed (e.g. a plugin without bulk support)
            return [from_errno(exc.code, exc.message)] * len(urls)
        if not isinstance(errors, list):
            errors = [errors]
        return [OK if e is None else from_errno(e.code, e.message) for e in errors]

    def unlink(self, pfns: List[str], looks: List[Seen]) -> List[Result]:
        urls = [_gfal_url(p) for p in pfns]
        box: List[List[Result]] = []
        thread = threading.Thread(target=lambda: box.append(self._bulk(urls)), daemon=True)
        thread.start()
        thread.join(2 * self.timeout + 10)
        if not box:
            self._ctx = None  # the stuck call keeps its context; later batches get a fresh one
            return [Result(TIMEOUT, "gfal2 bulk unlink gave no answer after %gs" % (2 * self.timeout + 10),
                           True)] * len(pfns)
        return box[0]

    def rmdir(self, pfn: str) -> Result:
        import gfal2

        def one(url: str) -> Result:
            try:
                self._context().rmdir(url)
                return Result(REMOVED)
            except gfal2.GError as exc:
                result = from_errno(exc.code, exc.message, directory=True)
            if result.outcome == STORAGE_ERROR:
                # Plugins map "not empty" differently (xrootd: ENODEV); a listing tells for sure.
                try:
                    if [e for e in self._context().listdir(url) if e not in (".", "..")]:
                        return Result(NOT_EMPTY, result.error)
                except gfal2.GError:
                    pass
            return result
        return watched_map(one, [_gfal_url(pfn)], self.timeout + 10)[0]


_GFAL_LINE = re.compile(r"^(\S+)\t(DELETED|MISSING|FAILED)(?::\s*(.*))?$")
_GFAL_STAT = re.compile(r"^\s*(Size|Modify|Change):\s*(.*)$", re.M)  # gfal-stat's lines (gfal2-util)


class GfalRmDeleter(_GfalDeleter):
    """`gfal-rm --bulk URL...` when the gfal2 module is not importable by this python; remote files are looked
    at first with `gfal-stat`, one process per file."""

    name = "gfal-rm"
    batch_size = 200
    mtime_step = 1.0  # gfal2 stat gives whole seconds
    remote_checks = "stat"
    can_rmdir = False  # gfal-rm removes directories only recursively, which we never do

    def problem(self) -> Optional[str]:
        return None if shutil.which("gfal-rm", path=self.env.get("PATH")) else "gfal-rm not found on PATH"

    def _tool_env(self) -> Dict[str, str]:
        env = dict(self.env)
        # gfal-rm execs $GFAL_PYTHONBIN, else /usr/bin/python, which many systems no longer have.
        if "GFAL_PYTHONBIN" not in env and not os.path.exists("/usr/bin/python") \
                and os.path.exists("/usr/bin/python3"):
            env["GFAL_PYTHONBIN"] = "/usr/bin/python3"
        return env

    def _stat_remote(self, url: str) -> Seen:
        """`gfal-stat URL` (one file per call), its times printed in UTC."""
        limit = max(1, int(self.timeout))
        rc, out, err = _run(["gfal-stat", "-t", str(limit), url], dict(self._tool_env(), TZ="UTC"), limit + 30)
        if rc != 0:
            why = "gfal-stat killed after %ds" % (limit + 30) if rc is None else _tail(err or out)
            return Seen(_no_answer(rc, why) if rc is None else from_message(why))
        found = dict(m.groups() for m in _GFAL_STAT.finditer(out))
        try:
            size, kind = found["Size"].split("\t", 1)
            mtime, ctime = (float(calendar.timegm(time.strptime(found[k].split(".")[0], "%Y-%m-%d %H:%M:%S")))
                            for k in ("Modify", "Change"))
        except (KeyError, ValueError):
            return Seen(Result(STORAGE_ERROR, "unreadable gfal-stat answer: %s" % _tail(out), True))
        if kind.strip() not in ("regular file", "symbolic link"):
            return not_a_file(url, kind.strip())
        return Seen(None, int(size), mtime, ctime)

    def unlink(self, pfns: List[str], looks: List[Seen]) -> List[Result]:
        urls = [_gfal_url(p) for p in pfns]
        limit = max(1, int(self.timeout))
        rc, out, err = _run(["gfal-rm", "--bulk", "-t", str(limit)] + urls, self._tool_env(), limit + 30)
        answers: Dict[str, Result] = {}
        for line in out.splitlines():
            m = _GFAL_LINE.match(line.rstrip("\n"))
            if not m:
                continue
            word, msg = m.group(2), m.group(3) or ""
            answers[m.group(1)] = OK if word == "DELETED" else Result(MISSING) if word == "MISSING" \
                else from_message(msg or _tail(err))
        out_results = []
        for url in urls:
            got = answers.get(url)
            if got is None:
                why = "gfal-rm killed after %ds" % (limit + 30) if rc is None else \
                    "no answer from gfal-rm (exit %s): %s" % (rc, _tail(err or out))
                got = _no_answer(rc, why)
            out_results.append(got)
        return out_results

    def rmdir(self, pfn: str) -> Result:
        raise NotImplementedError("gfal-rm cannot remove a directory without removing its content")
