"""The seal of a plan directory: what `plan` wrote, so that `apply` records exactly that plan.

`seal.json` holds the sha256 and line count of every file of the plan (each jobs file, dirs.txt,
summary.json), the RSE, the generation (the dump's end_time), the sha256 of the dump as the planner
read it (its bytes as read from the source to its end: the compressed bytes of a gzip dump, what
`sha256sum` of the file gives), the sha256 of the protected list (its normalised bases, sorted, one
per line), the guards in force, and `digest`: the sha256 of all of that. The planner takes a job
file's entry from the bytes it writes, never from the disk, so that an edit made at any time after
the planner wrote the file is refused wherever the plan is used (`verify`, and `PlanReader` as the ledger
records each jobs file). The seal is a check against edits and mistakes, not a signature: whoever
can write the plan directory could reseal it; the guards and the LFN checks at apply do not depend on it.
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping, Optional

from MSUnmerged.config import GuardConfig, PlannerConfig
from MSUnmerged.guards import PLAN_MODIFIED, GuardTripped, check_plan_lines
from MSUnmerged.lfn import PrefixSet

SEAL_NAME = "seal.json"
SEAL_VERSION = 2  # 2: dump_sha256 of the bytes as read from the source (was: of its lines, decompressed)
JOBS_DIR = "jobs"
DIRS_NAME = "dirs.txt"
SUMMARY_NAME = "summary.json"


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class DumpDigest:
    """Passes dump chunks handed over as they are (not read by dumpreader.iter_chunks) while hashing them."""

    def __init__(self, chunks: Iterable[bytes]) -> None:
        self._chunks = chunks
        self._hash = hashlib.sha256()

    def __iter__(self) -> Iterator[bytes]:
        for chunk in self._chunks:
            self._hash.update(chunk)
            yield chunk

    def hexdigest(self) -> str:
        return self._hash.hexdigest()


@functools.lru_cache(maxsize=2)  # by the index itself (identity): each list's index is made once (guards._indexes)
def protected_digest(protection: PrefixSet) -> str:
    """sha256 of the normalised bases, sorted, one per line (the index's bases never change)."""
    return sha256(b"".join(p + b"\n" for p in sorted(protection.prefixes)))


@dataclass
class Seal:
    """The content of seal.json (see the module docstring)."""

    rse: str
    generation: Optional[float]
    files: dict[str, dict[str, Any]]  # relative path -> {"sha256", "lines"}
    dump_sha256: Optional[str]
    protected_sha256: Optional[str]
    protected_count: int
    guards: dict[str, Any]
    version: int = SEAL_VERSION
    digest: str = ""

    def body(self) -> dict[str, Any]:
        # The fields as they are (asdict would deep-copy the entry of every plan file, thousands of them).
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "digest"}

    def compute_digest(self) -> str:
        return sha256(json.dumps(self.body(), sort_keys=True, separators=(",", ":")).encode())

    def __post_init__(self) -> None:
        # Not a field (not in the digest): the files whose sealed content this object has seen line-checked, and
        # at which max_length (apply's verify, then the ledger recording the same bytes).
        self._lines_checked: dict[str, int] = {}

    def check_file(self, rel: str, data: bytes) -> None:
        """Raise GuardTripped(plan_modified) unless `data` is the sealed content of `rel`."""
        if self.files.get(rel) != _describe(data):
            raise GuardTripped(PLAN_MODIFIED, f"{rel} changed since the plan was sealed")

    def check_plan_file(self, rel: str, data: bytes, max_length: int) -> None:
        """check_file, then every line a canonical LFN (check_plan_lines; GuardTripped(plan_modified) else). The
        lines are checked once per file and limit: bytes with the sealed digest that passed are those bytes."""
        self.check_file(rel, data)
        if self._lines_checked.get(rel) != max_length:
            check_plan_lines(data, max_length, rel)
            self._lines_checked[rel] = max_length


@dataclass
class PlanReader:
    """A plan directory's jobs files as the ledger records them (ledger.plans.record_plan): each file is checked when it
    is read, against `sealed` (its sealed content, then every line a canonical LFN below /store/unmerged), or,
    for a plan without a seal, every line alone; GuardTripped(plan_modified) else."""

    plan_dir: Path
    sealed: Optional[Seal] = None
    max_length: int = PlannerConfig.max_lfn_length

    def jobs(self, names: Iterable[str]) -> Iterator[list[str]]:
        """The LFNs of each jobs file named, in order, read as bytes and split on b"\\n" only, each list once its
        file passed the check."""
        for name in names:
            rel = f"{JOBS_DIR}/{name}"
            data = (self.plan_dir / rel).read_bytes()
            if self.sealed is not None:
                self.sealed.check_plan_file(rel, data, self.max_length)
            else:
                check_plan_lines(data, self.max_length, rel)
            # Decoded whole, then split: b"\n" is never part of a UTF-8 sequence, and surrogateescape decodes
            # each other byte alike wherever the lines are cut (guards.split_lines' lines, decoded one by one).
            lfns = data.decode("utf-8", errors="surrogateescape").split("\n")
            if lfns[-1] == "":
                lfns.pop()
            yield lfns

    def sealed_fields(self) -> dict[str, Any]:
        """What a generation's entry keeps of the seal: its digest (the same plan recognised) and dirs.txt's
        sha256 (checked before each use); none for a plan without a seal."""
        if self.sealed is None:
            return {}
        return {"seal": self.sealed.digest, "dirs_sha256": self.sealed.files[DIRS_NAME]["sha256"]}


def _plan_files(plan_dir: Path) -> list[str]:
    """The plan's files as relative paths: summary.json, dirs.txt and everything in jobs/."""
    jobs = plan_dir / JOBS_DIR
    names = sorted(p.name for p in jobs.iterdir()) if jobs.is_dir() else []
    return [SUMMARY_NAME, DIRS_NAME] + [f"{JOBS_DIR}/{n}" for n in names]


def _describe(data: bytes) -> dict[str, Any]:
    return describe_written([data], data.count(b"\n"))


def describe_written(parts: Iterable[bytes], lines: int) -> dict[str, Any]:
    """A plan file's entry in the seal from the bytes written to it (`parts`, in order), which hold `lines`
    lines (as counted while they were planned: whoever checks the file counts them on disk)."""
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part)
    return {"sha256": digest.hexdigest(), "lines": lines}


def describe_file(path: os.PathLike | str) -> dict[str, Any]:
    """A plan file's entry in the seal: its sha256 and line count, as on disk now."""
    return _describe(Path(path).read_bytes())


def write_seal(plan_dir: os.PathLike | str, rse: str, generation: Optional[float], dump_sha256: Optional[str],
               protection: Optional[PrefixSet], guards: GuardConfig,
               described: Optional[Mapping[str, dict[str, Any]]] = None) -> Seal:
    """Seal the plan directory (call after summary.json is written). `described`: the entries of the
    files the planner wrote, from the bytes written (its job files); every other file in the directory
    is read here."""
    plan_dir = Path(plan_dir)
    known = described or {}
    seal = Seal(rse=rse, generation=generation,
                files={rel: known[rel] if rel in known else describe_file(plan_dir / rel)
                       for rel in _plan_files(plan_dir)},
                dump_sha256=dump_sha256,
                protected_sha256=protected_digest(protection) if protection is not None else None,
                protected_count=len(protection) if protection is not None else 0,
                guards=dataclasses.asdict(guards))
    seal.digest = seal.compute_digest()
    tmp = plan_dir / (SEAL_NAME + ".tmp")
    tmp.write_text(json.dumps({**seal.body(), "digest": seal.digest}, indent=1, sort_keys=True))
    os.replace(tmp, plan_dir / SEAL_NAME)
    return seal


def read_seal(plan_dir: os.PathLike | str) -> Seal:
    """The seal as written, or GuardTripped(plan_modified) when it is missing or not a seal."""
    path = Path(plan_dir) / SEAL_NAME
    try:
        data = json.loads(path.read_bytes())
        seal = Seal(**data)
    except FileNotFoundError:
        raise GuardTripped(PLAN_MODIFIED, f"{path} is missing: the plan is not sealed (plan it again)") from None
    except (OSError, ValueError, TypeError) as exc:
        raise GuardTripped(PLAN_MODIFIED, f"{path} is not a readable seal: {exc}") from None
    if not isinstance(seal.files, dict) or seal.digest != seal.compute_digest():
        raise GuardTripped(PLAN_MODIFIED, f"{path} was edited (its digest does not match its content)")
    return seal


def claimed_rse(plan_dir: os.PathLike | str) -> Optional[str]:
    """The RSE the plan directory names (its seal's, else its summary's), checked or not: where a
    refusal of it is recorded. None when neither names one."""
    for name in (SEAL_NAME, SUMMARY_NAME):
        try:
            rse = json.loads((Path(plan_dir) / name).read_bytes()).get("rse")
        except (OSError, ValueError, AttributeError):
            continue
        if isinstance(rse, str) and rse:
            return rse
    return None


def verify(plan_dir: os.PathLike | str, max_length: int) -> Seal:
    """The plan directory is exactly what was sealed, and every line of its jobs files and dirs.txt is a
    canonical LFN below /store/unmerged; returns the seal, else raises GuardTripped(plan_modified)."""
    plan_dir = Path(plan_dir)
    seal = read_seal(plan_dir)
    present = _plan_files(plan_dir)
    if sorted(present) != sorted(seal.files):
        extra, missing = sorted(set(present) - set(seal.files)), sorted(set(seal.files) - set(present))
        raise GuardTripped(PLAN_MODIFIED, f"files added {extra}, removed {missing} since the plan was sealed")
    for rel in present:
        try:
            data = (plan_dir / rel).read_bytes()
        except OSError as exc:
            raise GuardTripped(PLAN_MODIFIED, f"{rel} is not readable: {exc}") from None
        if rel == SUMMARY_NAME:
            seal.check_file(rel, data)
        else:
            seal.check_plan_file(rel, data, max_length)
    _check_summary(plan_dir, seal)
    return seal


def _check_summary(plan_dir: Path, seal: Seal) -> None:
    """summary.json agrees with the seal: same RSE and generation, the same jobs files and counts."""
    try:
        summary = json.loads((plan_dir / SUMMARY_NAME).read_bytes())
        names = [f"{JOBS_DIR}/{n}" for n in summary["job_files"]]
        facts = (summary["rse"], summary["dump_version"], names, summary["job_sizes"], summary["files_to_delete"])
    except (ValueError, KeyError, TypeError) as exc:
        raise GuardTripped(PLAN_MODIFIED, f"{SUMMARY_NAME} is not a plan summary: {exc}") from None
    jobs = sorted(rel for rel in seal.files if rel.startswith(JOBS_DIR + "/"))
    sealed = (seal.rse, seal.generation, jobs, [seal.files[rel]["lines"] for rel in jobs],
              sum(seal.files[rel]["lines"] for rel in jobs))
    if facts != sealed:
        raise GuardTripped(PLAN_MODIFIED, f"{SUMMARY_NAME} does not agree with the seal (RSE, generation, "
                                          f"jobs files or their counts)")

