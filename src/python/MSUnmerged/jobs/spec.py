"""A Cleanup task with one DeleteFiles step, built from one chunk of a plan; serialised as the job manifest."""
from __future__ import annotations

import json
import re
import time
from json.encoder import encode_basestring_ascii  # json.dumps' own encoder of a string as ASCII
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Iterable, Optional, Sequence

from MSUnmerged.config import Config, PlannerConfig
from MSUnmerged.lfn import PreparedByList, normalise_base
from MSUnmerged.sitelimits import limits_for
from MSUnmerged.worker import defaults, pfn
from MSUnmerged.worker.ids import MANIFEST_VERSION
from MSUnmerged.worker.paths import MIN_DIR_DEPTH, ancestors, depth


@dataclass
class DeleteFilesStep:
    """Parameters of the DeleteFiles step: what the worker at the site deletes, and how."""

    lfns: list[str]
    remove_dirs: list[str] = field(default_factory=list)  # may be removed once empty, leaf first
    keep_dirs: list[str] = field(default_factory=list)  # its directories that are or hold a protected base: kept
    protected: list[str] = field(default_factory=list)  # protected bases relevant to these files: refuse under them
    # When the protected list was fetched, and until when it may be used (jobs.max_protection_age_s): the worker
    # deletes nothing later.
    protected_at: Optional[float] = None
    protected_until: Optional[float] = None
    dry_run: bool = True
    file_timeout_s: float = defaults.FILE_TIMEOUT_S
    retries: int = defaults.RETRIES
    backoff_s: float = defaults.BACKOFF_S
    max_consecutive_denied: int = defaults.MAX_CONSECUTIVE_DENIED
    unmerged_pfn: Optional[str] = None  # Rucio's PFN of /store/unmerged/ for the RSE; None: not asked (offline)
    mapping_check: str = pfn.mapping_check(None)  # "rucio" when unmerged_pfn is set: the worker compares the two
    pfn_layout: str = "standard"  # "site_specific": PFNs need not end with the LFN's path (jobs.sites.<RSE>)
    unmerged_root: Optional[str] = None  # site_specific: the PFN of /store/unmerged/ the site config must give
    scan_started: Optional[float] = None  # the ConMon scan's start_time: files modified later are refused
    # Directories an earlier plan gave as removable, not removed yet: removed when empty (service/dirretry.py).
    retry_dirs: list[str] = field(default_factory=list)
    sweep_empty_dirs: bool = False  # also remove old empty directories below the datasets cleaned
    dir_floor_depth: int = PlannerConfig.dir_floor_depth  # no directory above it is ever removed
    include: Optional[list[str]] = None  # the RSE's path filters (sitelimits), re-checked at the site
    exclude: list[str] = field(default_factory=list)
    max_ops_per_s: float = defaults.MAX_OPS_PER_S  # storage operations per second of the job (0: unpaced)
    # off: remote storage is not looked at before each delete (docs/jobs.md)
    look_before_delete: bool = defaults.LOOK_BEFORE_DELETE
    name: str = "DeleteFiles"
    type: str = "DeleteFiles"

    def __post_init__(self) -> None:
        """A step made without a fetch time (tests, tools) holds a list given now, for the default bound."""
        self.protected_at = time.time() if self.protected_at is None else self.protected_at
        if self.protected_until is None:
            self.protected_until = self.protected_at + defaults.MAX_PROTECTION_AGE_S


# The manifest's "resources": its key -> the CleanupJob field it holds.
RESOURCES = {"memory_mb": "request_memory_mb", "disk_mb": "request_disk_mb", "runtime_s": "max_runtime_s"}


@dataclass
class CleanupJob:
    """One cleanup job: a Cleanup task holding a DeleteFiles step, for one RSE at one site."""

    job_id: str  # ledger id: worker.ids.job_id
    rse: str
    site: str
    deadline: float  # epoch seconds; the worker refuses to start after it
    step: DeleteFilesStep
    generation: float = 0.0  # the dump version (ConMon end_time) this job comes from
    request_memory_mb: int = defaults.MEMORY_MB
    request_disk_mb: int = defaults.DISK_MB
    max_runtime_s: int = defaults.RUNTIME_S
    task_name: str = "Cleanup"
    task_type: str = "Cleanup"

    def manifest(self) -> dict[str, Any]:
        """The manifest that travels with the job (read by the worker, standard library only)."""
        return {
            "version": MANIFEST_VERSION,
            "job_id": self.job_id,
            "rse": self.rse,
            "site": self.site,
            "generation": self.generation,
            "deadline": self.deadline,
            "resources": {key: getattr(self, name) for key, name in RESOURCES.items()},
            # The step's fields as they are (str, numbers, lists of str): asdict would deep-copy every LFN.
            "task": {"name": self.task_name, "type": self.task_type,
                     "steps": [{f.name: getattr(self.step, f.name) for f in fields(self.step)}]},
        }

    def manifest_bytes(self) -> bytes:
        """The manifest as the worker reads it: ASCII JSON, no NaN/Infinity (refused at the site), one LFN (one
        protected base, one directory) a line."""
        manifest = self.manifest()
        step = manifest["task"]["steps"][0]  # a dict of its own (manifest()): self.step is left as it is
        # The step's lists of strings (LFNs, protected bases, directories) by json_lines: json.dumps with an indent
        # encodes in Python, a call per string (~2 ms for a job's ~800 protected bases).
        lists = {key: value for key, value in step.items() if isinstance(value, list) and value}  # list[str] all
        step.update(dict.fromkeys(lists, []))
        text = json.dumps(manifest, indent=1, allow_nan=False)
        if lists:
            # The only `"<key>": []` of the text, each filled in one pass: every string's own quotes are escaped,
            # only a key has ": " next.
            keys = re.compile('"(' + "|".join(map(re.escape, lists)) + ')": \\[\\]')
            text = keys.sub(lambda m: f'"{m[1]}": [\n{json_lines(lists[m[1]])}\n]', text)
        return text.encode("ascii")

    def write_manifest(self, path: Path) -> Path:
        path.write_bytes(self.manifest_bytes())
        return path

    @property
    def lfns(self) -> list[str]:
        return self.step.lfns

    @classmethod
    def from_manifest(cls, data: dict[str, Any]) -> "CleanupJob":
        """The job a manifest describes; a resource it leaves out takes the job's default."""
        step = data["task"]["steps"][0]
        res = data.get("resources", {})
        return cls(job_id=data["job_id"], rse=data["rse"], site=data["site"], deadline=data["deadline"],
                   generation=data.get("generation", 0.0), step=DeleteFilesStep(**step),
                   task_name=data["task"]["name"], task_type=data["task"]["type"],
                   **{name: res[key] for key, name in RESOURCES.items() if key in res})


# The characters json.dumps writes as they are (ensure_ascii): printable ASCII but the quote and the backslash.
_JSON_AS_IS = bytes(range(0x20, 0x7F)).replace(b'"', b"").replace(b"\\", b"")


def json_lines(strings: Sequence[str]) -> str:
    """The JSON (ASCII) of these strings, one a line, comma-separated: what json.dumps writes for each string. Most
    of a manifest: when every string is printable ASCII without a quote or backslash (as canonical LFNs mostly are),
    each is itself in quotes, joined whole (C-level work, not a call a string); json's string encoder otherwise."""
    whole = "".join(strings)
    if whole.isascii() and not whole.encode("ascii").translate(None, _JSON_AS_IS):
        return '"' + '",\n"'.join(strings) + '"'
    return ",\n".join(map(encode_basestring_ascii, strings))


def file_dirs(lfns: Iterable[str]) -> set[str]:
    """Every directory holding one of these files at any depth, down to /store."""
    dirs: set[str] = set()
    last = None
    for name in lfns:
        parent = name[:name.rfind("/")]
        if parent == last:  # a job's files come sorted: most share the last one's directory
            continue
        last = parent
        for d in ancestors(name):
            if d in dirs:
                break  # its ancestors were added with it
            dirs.add(d)
    return dirs


def held_dirs(lfns: Iterable[str], retry_dirs: Sequence[str] = ()) -> set[str]:
    """The directories a job acts in: those holding its files (`file_dirs`), its retried directories and those
    holding them (a directory job holds no file)."""
    return file_dirs(lfns) | set(retry_dirs) | file_dirs(retry_dirs)


def job_dirs(dirs: set[str], removable: set[str]) -> list[str]:
    """The plan's removable directories among a job's directories (`held_dirs`), leaf first."""
    return sorted(dirs & removable, key=lambda d: (-depth(d), d))


class ProtectedBases:
    """A protected list prepared once for all the jobs of a submission: each job's relevant bases and
    kept directories come from dictionary look-ups of the job's own directories."""

    def __init__(self, protected: Iterable[str]) -> None:
        self._bases: set[str] = set()
        # A base's chain: itself and its ancestors at or below the worker's directory floor. Chain member -> the
        # bases it belongs to.
        self._by_dir: dict[str, set[str]] = {}
        for raw in protected:
            base = normalise_base(raw).decode("utf-8", errors="surrogateescape")
            self._bases.add(base)
            for d in (base, *(a for a in ancestors(base) if depth(a) >= MIN_DIR_DEPTH)):
                self._by_dir.setdefault(d, set()).add(base)

    def for_job(self, lfns: Sequence[str], dirs: set[str]) -> tuple[list[str], list[str]]:
        """(protected, keep_dirs) for a job whose files are `lfns` and directories `dirs` (`file_dirs`): the
        bases that are one of its files or whose chain holds one of its files or directories (a base covering a
        file, lying under one of its files' directories at or below the floor, or under a file line naming a
        directory), and those chain members among its directories at or below the floor
        (worker.paths.MIN_DIR_DEPTH)."""
        hits = [d for d in dirs if d in self._by_dir]
        bases = self._bases.intersection(lfns) if self._bases else set()
        for d in hits + [f for f in lfns if f in self._by_dir]:  # a file line naming a directory above a base
            bases |= self._by_dir[d]
        return sorted(bases), sorted(d for d in hits if depth(d) >= MIN_DIR_DEPTH)


# Each protected list prepared once (by its content) for every submission of every RSE.
protected_bases: PreparedByList[ProtectedBases] = PreparedByList(ProtectedBases)


def make_job(job_id: str, rse: str, site: str, lfns: list[str], removable: set[str],
             protected: ProtectedBases, config: Config, generation: float = 0.0,
             now: Optional[float] = None, unmerged_pfn: Optional[str] = None,
             scan_started: Optional[float] = None, retry_dirs: Sequence[str] = (),
             protected_at: Optional[float] = None) -> CleanupJob:
    """One CleanupJob from a chunk of planned files, with the job settings of `config` and the RSE's limits.

    `protected`: the protected list, prepared once for all the jobs made from it; `protected_at`: when that list
    was fetched (the job deletes nothing after it plus jobs.max_protection_age_s; None: now, a list just fetched);
    `unmerged_pfn`: Rucio's PFN of /store/unmerged/ for `rse` (None offline: only the site config's
    own mapping is checked); `scan_started`: the start time of the scan the plan comes from;
    `retry_dirs`: directories of earlier plans still to remove (a job may hold no file, only these).
    """
    j = config.jobs
    limits = limits_for(config, rse)
    dirs = held_dirs(lfns, retry_dirs)
    bases, keep = protected.for_job(lfns, dirs)
    now = time.time() if now is None else now
    protected_at = now if protected_at is None else protected_at
    step = DeleteFilesStep(lfns=lfns, remove_dirs=job_dirs(dirs, removable), keep_dirs=keep, protected=bases,
                           protected_at=protected_at, protected_until=protected_at + j.max_protection_age_s,
                           dry_run=config.service.dry_run, file_timeout_s=j.file_timeout_s, retries=j.retries,
                           max_consecutive_denied=j.max_consecutive_denied, unmerged_pfn=unmerged_pfn,
                           mapping_check=pfn.mapping_check(unmerged_pfn),
                           pfn_layout=j.for_rse(rse).pfn_layout, unmerged_root=j.for_rse(rse).unmerged_root or None,
                           scan_started=scan_started, retry_dirs=sorted(retry_dirs),
                           sweep_empty_dirs=limits.remove_empty_dirs, dir_floor_depth=config.planner.dir_floor_depth,
                           max_ops_per_s=limits.max_ops_per_s, look_before_delete=limits.look_before_delete,
                           **limits.filters())
    return CleanupJob(job_id=job_id, rse=rse, site=site, step=step, generation=generation,
                      deadline=now + j.deadline_h * 3600,
                      request_memory_mb=j.request_memory_mb, request_disk_mb=j.request_disk_mb,
                      max_runtime_s=j.max_runtime_s)
