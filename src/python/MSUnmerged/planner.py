"""Turns a dump, a protected list and the configuration into a reviewable deletion plan on disk.

The work is batched: dump chunks are validated and split into runs of lines that share a
directory by planlines (in C when built), so Python-level work is per directory, not per line.
Deletable runs are spilled to partition files keyed by the dataset base (the first
`dir_floor_depth` path elements), then each partition is grouped, de-duplicated and written out
as job files. Memory depends on the partition size, not on the dump size.
"""
from __future__ import annotations

import dataclasses
import fcntl
import json
import os
import shutil
import struct
import time
import zlib
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping, Optional

from MSUnmerged import lfn, planlines, seal
from MSUnmerged.config import Config
from MSUnmerged.dumpreader import DumpChunks, DumpError, NotADump, check_lines, read_ahead_thread
from MSUnmerged.guards import (GUARD_DUMP_UNREADABLE, GUARD_LINE_COUNT, GUARD_NOT_A_DUMP, GuardTripped, Scan,
                               check_counts, check_protection, check_scan)
from MSUnmerged.lfn import PrefixSet
from MSUnmerged.sitelimits import limits_for
from MSUnmerged.throttle import AgeOrder, Slicer, dataset_of

SUMMARY_VERSION = 1
EXAMPLES_PER_REASON = 5

# Sizing the spill from the scan's file count: bytes per dump line assumed (CMS LFNs are ~100-200),
# the head-room left for uneven partitions, the most partitions, the least a partition is given when the dump is
# small, and their write buffers' total.
_LINE_BYTES_GUESS = 160
_PARTITION_HEADROOM = 1.5
_MAX_PARTITIONS = 512
_MIN_PARTITION_BYTES = 1024 * 1024
_SPILL_BUFFERS_BYTES = 16 * 1024 * 1024
_SPILL_BATCH_BYTES = 1024 * 1024
_JOBS_IN_FLIGHT = 8
_IOV_MAX = os.sysconf("SC_IOV_MAX") if "SC_IOV_MAX" in os.sysconf_names else 16  # buffers per writev
# The job files are written into a new folder of a random name, renamed to jobs/ once they all are.
_STAGED_JOBS = ".jobs-"
# linux/fs.h: the inode flags' ioctls (_IOR/_IOW('f', 1/2, long)) and "top of directory hierarchies" (chattr +T).
_FS_IOC_GETFLAGS = 2 << 30 | struct.calcsize("l") << 16 | ord("f") << 8 | 1
_FS_IOC_SETFLAGS = 1 << 30 | struct.calcsize("l") << 16 | ord("f") << 8 | 2
_FS_TOPDIR_FL = 0x00020000


@dataclass
class Plan:
    """What a planning run decided; `summary.json` in the plan directory holds the same."""

    rse: str
    files_total: int = 0
    files_to_delete: int = 0
    files_protected: int = 0
    files_excluded: int = 0
    files_invalid: dict[str, int] = field(default_factory=dict)
    invalid_examples: dict[str, list[str]] = field(default_factory=dict)
    dirs_removable: int = 0
    jobs: int = 0
    job_files: list[str] = field(default_factory=list)
    job_sizes: list[int] = field(default_factory=list)
    # The throttle (throttle.py): each job's slice, and the files of each slice; empty when not throttled.
    job_slices: list[int] = field(default_factory=list)
    slice_sizes: list[int] = field(default_factory=list)
    max_files_per_cycle: int = 0
    filters: dict[str, Any] = field(default_factory=dict)  # the RSE's path filters in force (sitelimits)
    guard: Optional[str] = None
    guard_detail: str = ""
    would_delete: int = 0  # what the plan held before a guard emptied it
    protected_count: int = 0
    dump_version: Optional[float] = None  # the scan's end_time
    scan_started: Optional[float] = None  # the scan's start_time: the workers refuse files modified after it
    scan_checked: bool = False
    created: float = 0.0
    seconds: float = 0.0
    version: int = SUMMARY_VERSION

    @property
    def invalid_total(self) -> int:
        return sum(self.files_invalid.values())

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


ProgressFn = Callable[[int], None]
# A spill group's directories, sorted: (directory, its files without repeats, files kept,
# repeats, the first repeats).
_Group = list[tuple[bytes, bytes, int, int, list[bytes]]]


class _Counts:
    """Mutable tallies while reading, kept apart from the Plan until the end."""

    def __init__(self) -> None:
        self.total = 0
        self.protected = 0
        self.excluded = 0
        self.invalid: dict[str, int] = {}
        self.examples: dict[str, list[str]] = {}

    def add_invalid(self, reason: str, raw: bytes) -> None:
        self.invalid[reason] = self.invalid.get(reason, 0) + 1
        examples = self.examples.setdefault(reason, [])
        if len(examples) < EXAMPLES_PER_REASON:
            examples.append(raw.decode("utf-8", errors="backslashreplace")[:300])


def spill_partitions(configured: int, max_bytes: int, expected_files: Optional[int]) -> int:
    """Partitions to spill to: the configured number, more when the scan announces a dump whose
    partitions would exceed `max_bytes` (each would then take one more pass to be split), fewer when it
    announces a dump too small to give each of them `_MIN_PARTITION_BYTES`."""
    if not expected_files:
        return configured
    expected = int(expected_files * _LINE_BYTES_GUESS * _PARTITION_HEADROOM)
    needed = -(-expected // max_bytes)
    # Each partition file is created, written, read back and unlinked: ~1 ms of kernel time here, more than a
    # small dump's few KiB in it are worth (a 10k-line dump spread over 64 files: 30 of a run's 95 ms of CPU).
    thin = max(1, -(-expected // _MIN_PARTITION_BYTES))
    return max(min(configured, thin), min(_MAX_PARTITIONS, needed))


class _Spill:
    """Partition files of deletable runs, keyed by dataset base so a base never spans two.

    Records are written by a thread in batches of about `_SPILL_BATCH_BYTES` (one batch in
    flight): a write that waits for the page cache or the disk does not hold up the planning.
    """

    def __init__(self, directory: Path, partitions: int, floor: int,
                 encode: Callable[[bytes, planlines.Lines], planlines.Lines] = planlines.as_they_are,
                 order: Optional[AgeOrder] = None) -> None:
        self.directory = directory
        self.floor = floor
        self.encode = encode  # how a run is stored: (its directory and slash, its lines) -> its bytes
        # Throttled: the partitions are grouped by the dataset directory's age class, oldest first, so that
        # reading them in order gives the oldest directories first.
        self.order = order
        self.per_class = -(-partitions // order.classes) if order is not None else partitions
        directory.mkdir(parents=True, exist_ok=True)
        partitions = self.per_class * (order.classes if order is not None else 1)
        self.paths = [directory / f"part-{i:03d}" for i in range(partitions)]
        buffering = min(256 * 1024, max(64 * 1024, _SPILL_BUFFERS_BYTES // partitions))
        self._batch: list[tuple[int, bytes, planlines.Lines]] = []  # (partition, directory, lines)
        self._batch_bytes = 0
        self._writer = ThreadPoolExecutor(1, thread_name_prefix="spill")
        # Creating hundreds of files takes a while (~0.25 ms each here): the writer thread does
        # it first, while the dump starts to be read.
        self._opening = self._writer.submit(lambda: [open(p, "wb", buffering=buffering) for p in self.paths])
        self._in_flight: Optional[Future[None]] = None

    @property
    def files(self) -> list[Any]:
        return self._opening.result()

    def key(self, directory: bytes) -> bytes:
        return dataset_of(directory, self.floor)

    def write(self, directory: bytes, block: planlines.Lines, salt: int = 0) -> None:
        """Append one run as a record: b"<dir>\\0<bytes>\\n" then the run's lines, encoded."""
        key = self.key(directory)
        index = (zlib.adler32(key) if salt else zlib.crc32(key)) % self.per_class
        if self.order is not None:
            index += self.order(key) * self.per_class
        self._batch.append((index, directory, block))
        self._batch_bytes += len(block)
        if self._batch_bytes >= _SPILL_BATCH_BYTES:
            self._hand_over()

    def _hand_over(self) -> None:
        """Wait for the batch in flight (raising its error), then send the current one."""
        if self._in_flight is not None:
            self._in_flight.result()
            self._in_flight = None
        if self._batch:
            self._in_flight = self._writer.submit(self._write_batch, self._batch)
            self._batch, self._batch_bytes = [], 0

    def _write_batch(self, batch: list[tuple[int, bytes, planlines.Lines]]) -> None:
        for index, directory, block in batch:
            stored = self.encode(directory + b"/", block)
            out = self.files[index]
            out.write(b"%b\0%d\n" % (directory, len(stored)))
            out.write(stored)

    def close(self) -> None:
        self._hand_over()
        self._hand_over()  # the last batch
        self._writer.shutdown()
        for fh in self.files:
            fh.close()


def spread_subdirs(directory: Path) -> None:
    """Mark `directory` as the top of unrelated trees (`chattr +T`), so that ext4 places each new subdirectory, and
    the files then created in it, in a block group of its own instead of the parent's. Best effort: other file
    systems refuse it, and nothing else changes."""
    # Without a journal, ext4 creates each file after looking past every inode of its group deleted in the last
    # minutes (`recently_deleted`): 0.3-1 ms per job file in the parent's group, where the previous plan's job
    # files and every other program's files come and go; ~0.02 ms in a group of its own.
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return
    try:
        flags = struct.unpack("i", fcntl.ioctl(fd, _FS_IOC_GETFLAGS, bytes(4)))[0]
        if not flags & _FS_TOPDIR_FL:
            fcntl.ioctl(fd, _FS_IOC_SETFLAGS, struct.pack("i", flags | _FS_TOPDIR_FL))
    except OSError:
        pass
    finally:
        os.close(fd)


def _write_all(fd: int, parts: list[bytes]) -> None:
    """Write `parts` in order at the file's offset: a few calls for all of them (writev), a short write finished."""
    for first in range(0, len(parts), _IOV_MAX):
        batch = parts[first:first + _IOV_MAX]
        done = os.writev(fd, batch)
        if done < sum(map(len, batch)):  # a short write (a signal): the rest, one call at a time
            rest = memoryview(b"".join(batch))[done:]
            while rest:
                rest = rest[os.write(fd, rest):]


def _records(data: bytes) -> Iterable[tuple[bytes, bytes]]:
    """Read back the (directory, block) records of a spill partition."""
    pos, end = 0, len(data)
    while pos < end:
        nul = data.index(b"\0", pos)
        eol = data.index(b"\n", nul)
        stop = eol + 1 + int(data[nul + 1:eol])
        yield data[pos:nul], data[eol + 1:stop]
        pos = stop


class _JobWriter:
    """Writes planned LFNs into job files of at most `per_job` lines, of `most_lines` lines in all at most.

    Three threads work beside the planning one (each releases the GIL for most of its work): one creates
    the job files, empty, ahead of their use (creating a file costs 0.3-0.7 ms of kernel CPU here: ext4
    looks past recently deleted inodes), never more than `most_lines` can fill; one writes each job's
    lines, gathered in memory until the job is full, into its file; one takes the job's seal entry from
    the bytes written (no job file is read back). At most `_JOBS_IN_FLIGHT` jobs wait to be written.
    The files are created in a new folder beside `directory`, of a random name (so that ext4 places it apart
    from the last one: `spread_subdirs`), renamed to `directory` once every job is written.
    """

    def __init__(self, directory: Path, per_job: int, most_lines: int, slicer: Optional[Slicer] = None,
                 line_end: Callable[[bytes, int], int] = planlines.python_line_end) -> None:
        self.directory = directory
        self.per_job = per_job
        self.line_end = line_end  # where a block's n-th line ends (the engine's)
        self.slicer = slicer  # throttled: a job never spans two slices
        self._staging = directory.with_name(_STAGED_JOBS + os.urandom(8).hex())
        self._staging.mkdir()
        self.names: list[str] = []
        self.sizes: list[int] = []
        self.slices: list[int] = []  # each job's slice (throttled)
        self._parts: list[bytes] = []  # the current job's lines, not written yet
        self._room = 0
        self._creator = ThreadPoolExecutor(1, thread_name_prefix="job-create")
        self._writer = ThreadPoolExecutor(1, thread_name_prefix="job-write")
        self._hasher = ThreadPoolExecutor(1, thread_name_prefix="job-hash")
        self._in_flight: deque[Future[None]] = deque()
        self._described: dict[str, Future[dict[str, Any]]] = {}  # filled by the writer thread
        most_jobs = -(-most_lines // per_job)
        if slicer is not None:  # each slice may leave one job unfilled; slices are at least half full in pairs
            most_jobs += 2 * -(-most_lines // slicer.per_slice) + 1
        # The creation of job file n is the n-th.
        self._created = [self._creator.submit(self._create, self._path(n)) for n in range(1, most_jobs + 1)]

    @staticmethod
    def _create(path: Path) -> None:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666))

    @staticmethod
    def _name(number: int) -> str:
        return f"job-{number:06d}.txt"

    def _path(self, number: int) -> Path:
        return self._staging / self._name(number)

    def add(self, block: bytes, lines: int) -> None:
        """Append `block`, one directory's `lines` whole LFNs, cutting it where a job file (or a slice) is full."""
        slicer = self.slicer
        if slicer is not None and slicer.begin(lines):
            self._room = 0  # the directory starts a new slice, and so a new job
        while lines:
            if self._room == 0:
                self._open()
            take = min(lines, self._room, slicer.room if slicer is not None else lines)
            head = block
            if take < lines:  # the rest after the first `take` lines goes on to the next job
                cut = self.line_end(block, take)
                head, block = block[:cut], block[cut:]
            self._parts.append(head)
            self._room -= take
            self.sizes[-1] += take
            lines -= take
            if slicer is not None and slicer.take(take, bool(lines)):
                self._room = 0

    def _open(self) -> None:
        self.close()
        if len(self.names) == len(self._created):  # cannot happen: the spill holds no more files than expected
            raise RuntimeError("internal error: more planned files than spilled")
        self.names.append(self._name(len(self.names) + 1))
        self.sizes.append(0)
        if self.slicer is not None:
            self.slices.append(self.slicer.current)
        self._room = self.per_job

    def close(self) -> None:
        """Hand the current job to the writer thread (raising the error of a job written before it)."""
        if self._parts:
            self._in_flight.append(self._writer.submit(self._write, len(self.names), self._parts, self.sizes[-1]))
            self._parts = []
            while len(self._in_flight) > _JOBS_IN_FLIGHT:
                self._in_flight.popleft().result()

    def _write(self, number: int, parts: list[bytes], lines: int) -> None:
        # The parts are hashed and written as they are, in order (joining them would copy every planned byte).
        self._described[f"{seal.JOBS_DIR}/{self._name(number)}"] = self._hasher.submit(seal.describe_written,
                                                                                       parts, lines)
        self._created[number - 1].result()
        # Not truncated (the planner created it empty; anything else there is refused where the plan is used):
        # on ext4 a truncated file is written back as soon as it is closed.
        fd = os.open(self._path(number), os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            _write_all(fd, parts)
        finally:
            os.close(fd)

    def described(self) -> dict[str, dict[str, Any]]:
        """The seal entries of the job files, from the bytes written (after `close`), once they are in `directory`;
        files created but not needed (repeated lines made fewer jobs) are removed."""
        while self._in_flight:
            self._in_flight.popleft().result()
        for created in self._created:
            created.result()
        for number in range(len(self.names) + 1, len(self._created) + 1):
            self._path(number).unlink()
        os.rename(self._staging, self.directory)  # fails unless `directory` is missing or an empty folder
        for pool in (self._creator, self._writer, self._hasher):
            pool.shutdown()
        return {rel: entry.result() for rel, entry in self._described.items()}


class Planner:
    """Plans one RSE: feed dump chunks, then `finish` writes the plan directory."""

    def __init__(self, rse: str, protection: PrefixSet, config: Config, out_dir: os.PathLike | str,
                 progress: Optional[ProgressFn] = None, expected_files: Optional[int] = None,
                 ages: Optional[Mapping[bytes, float]] = None) -> None:
        """`ages`: when each dataset directory was first seen in a plan (ledger/ages.py), for the throttle's order."""
        pcfg = config.planner
        self.rse = rse
        self.protection = protection
        self.limits = limits_for(config, rse)
        self.exclude = PrefixSet(self.limits.exclude)
        self.include = PrefixSet(self.limits.include) if self.limits.include is not None else None
        self.per_cycle = self.limits.max_files_per_cycle
        self.config = config
        self.out_dir = Path(out_dir)
        self.max_length = pcfg.max_lfn_length
        self.floor = pcfg.dir_floor_depth
        self.progress = progress
        self.counts = _Counts()
        self.engine = planlines.engine(pcfg.engine)
        self.spilled = 0  # files spilled, repeats included
        self.described: dict[str, dict[str, Any]] = {}  # seal entries of the job files, by finish
        if self.out_dir.exists():
            stale = (seal.SEAL_NAME, seal.JOBS_DIR, ".spill", seal.DIRS_NAME, seal.SUMMARY_NAME)
            for target in [self.out_dir / name for name in stale] + list(self.out_dir.glob(_STAGED_JOBS + "*")):
                if target.is_dir():
                    shutil.rmtree(target)
                elif target.exists():
                    target.unlink()
        self.out_dir.mkdir(parents=True, exist_ok=True)
        spread_subdirs(self.out_dir)
        order = AgeOrder(ages or {}) if self.per_cycle else None
        self.spill = _Spill(self.out_dir / ".spill", spill_partitions(pcfg.spill_partitions, pcfg.partition_max_bytes,
                                                                      expected_files), self.floor, self.engine.spill,
                            order)

    # -- phase 1: classify every line, spill the deletable runs ---------------------------------

    def feed(self, chunk: bytes) -> None:
        """Take one chunk of whole lines (as produced by dumpreader.iter_chunks)."""
        if b"\r" in chunk:
            chunk = chunk.replace(b"\r\n", b"\n")
        if not chunk.endswith(b"\n"):
            chunk += b"\n"
        runs = self.engine.runs(chunk, self.max_length)
        if runs is None:  # anything odd in the chunk: check it line by line
            lines = chunk.split(b"\n")[:-1]
            self.counts.total += len(lines)
            runs = planlines.split_runs(self._clean(lines))
        else:
            self.counts.total += sum(run[2] for run in runs)
        for directory, block, files in runs:
            self._run(directory, block, files)
        if self.progress is not None:
            self.progress(self.counts.total)

    def _clean(self, lines: list[bytes]) -> list[bytes]:
        """The valid lines, counting the others by reason."""
        keep = []
        for raw in lines:
            line, reason = lfn.classify_line(raw, self.max_length)
            if reason is not None:
                self.counts.add_invalid(reason, raw)
            elif line is not None:
                keep.append(line)
            else:
                self.counts.total -= 1  # blank lines are not files
        return keep

    def _run(self, directory: bytes, block: planlines.Lines, files: int) -> None:
        """Classify a run of `files` files that share `directory`; spill the deletable ones (counted later)."""
        # Any line may name a directory: one holding a protected base (or an excluded prefix) is never planned.
        prot = self.protection.dir_state(directory)
        if prot == PrefixSet.ALL:
            self.counts.protected += files
            return
        excl = self.exclude.dir_state(directory)
        incl = self.include.dir_state(directory) if self.include is not None else PrefixSet.ALL
        if excl == PrefixSet.ALL or incl == PrefixSet.NONE:
            self.counts.excluded += files
            return
        if PrefixSet.SOME in (prot, excl, incl):
            block = self._filter_files(bytes(block), prot, excl, incl)
            if not block:
                return
            files = block.count(b"\n")
        self.spilled += files
        self.spill.write(directory, block)

    def _filter_files(self, block: bytes, prot: int, excl: int, incl: int) -> bytes:
        """A protected base or filter prefix names a file in this directory: check each file."""
        keep = []
        for path in block.split(b"\n")[:-1]:
            if prot == PrefixSet.SOME and self.protection.holds_below(path):
                self.counts.protected += 1
            elif (excl == PrefixSet.SOME and self.exclude.holds_below(path)) or (
                    incl == PrefixSet.SOME and not self.include.covers(path)):  # type: ignore[union-attr]
                self.counts.excluded += 1
            else:
                keep.append(path)
        return b"\n".join(keep) + b"\n" if keep else b""

    # -- phase 2: group, de-duplicate, write jobs and removable directories --------------------

    def finish(self, scan_end_time: Optional[float] = None, expected_files: Optional[int] = None,
               guard: Optional[GuardTripped] = None, scan_started: Optional[float] = None,
               count_guards: bool = True) -> Plan:
        """Write jobs/, dirs.txt and summary.json; apply the guards that need the whole dump (the count
        guards only with `count_guards`)."""
        started = time.time()
        self.spill.close()
        slicer = Slicer(self.per_cycle) if self.per_cycle else None
        jobs = _JobWriter(self.out_dir / seal.JOBS_DIR, self.config.planner.files_per_job, self.spilled, slicer,
                          self.engine.line_end)
        n_dirs = 0
        with open(self.out_dir / seal.DIRS_NAME, "wb") as dirs_out:
            # A thread reads and de-duplicates the next group (file reads and the compiled engine
            # release the GIL) while this one writes the job files of the current one.
            for group in read_ahead_thread(self._unique_groups(), 1):
                n_dirs += self._write_group(group, jobs, dirs_out)
        jobs.close()
        self.described = jobs.described()
        shutil.rmtree(self.spill.directory, ignore_errors=True)

        c = self.counts
        plan = Plan(rse=self.rse, files_total=c.total, files_protected=c.protected,
                    files_excluded=c.excluded, files_invalid=dict(sorted(c.invalid.items())),
                    invalid_examples=c.examples, dirs_removable=n_dirs, jobs=len(jobs.names),
                    job_files=jobs.names, job_sizes=jobs.sizes, protected_count=len(self.protection),
                    dump_version=scan_end_time, scan_started=scan_started,
                    scan_checked=scan_end_time is not None, created=time.time(),
                    max_files_per_cycle=self.per_cycle, filters=self.limits.filters())
        plan.files_to_delete = sum(jobs.sizes)
        if slicer is not None and plan.files_to_delete:
            plan.job_slices, plan.slice_sizes = jobs.slices, slicer.sizes
        if guard is None:
            guard = self._final_guard(plan, expected_files, count_guards)
        if guard is not None:
            self._empty(plan, guard)
        plan.seconds = round(time.time() - started, 3)
        write_summary(self.out_dir, plan)
        return plan

    def _final_guard(self, plan: Plan, expected_files: Optional[int], count_guards: bool) -> Optional[GuardTripped]:
        g = self.config.guards
        if g.check_line_count and plan.scan_checked:
            if expected_files is None:
                return GuardTripped(GUARD_LINE_COUNT, "the scan reports no file count to check the dump against")
            if plan.files_total != expected_files:
                return GuardTripped(GUARD_LINE_COUNT,
                                    f"read {plan.files_total} files, the scan reported {expected_files}")
        try:
            if count_guards:
                check_counts(plan.files_total, plan.files_to_delete, g, max(plan.slice_sizes, default=None))
        except GuardTripped as tripped:
            return tripped
        return None

    def _empty(self, plan: Plan, guard: GuardTripped) -> None:
        shutil.rmtree(self.out_dir / seal.JOBS_DIR, ignore_errors=True)
        (self.out_dir / seal.JOBS_DIR).mkdir()
        (self.out_dir / seal.DIRS_NAME).write_bytes(b"")
        self.described = {}  # the job files are gone
        plan.guard, plan.guard_detail = guard.reason, guard.detail
        plan.would_delete = plan.files_to_delete
        plan.files_to_delete = plan.jobs = plan.dirs_removable = 0
        plan.job_files, plan.job_sizes, plan.job_slices, plan.slice_sizes = [], [], [], []

    def _partition_groups(self, path: Path) -> Iterable[bytes]:
        """The partition's content, split further by dataset base when it is too large to hold."""
        limit = self.config.planner.partition_max_bytes
        size = path.stat().st_size
        if size <= limit:
            if size:
                yield path.read_bytes()
            return
        # Oversized: split by dataset base into sub-partitions with a hash unrelated to the one
        # that put them all here, then hand them out one at a time. One base larger than the
        # limit stays whole.
        n_sub = min(256, 2 * (size // limit + 1))
        sub = _Spill(path.with_name(path.name + "-sub"), n_sub, self.floor)
        with open(path, "rb") as fh:
            while True:
                header = fh.readline()
                if not header:
                    break
                directory, _, size_ = header.rstrip(b"\n").partition(b"\0")
                sub.write(directory, fh.read(int(size_)), salt=1)
        sub.close()
        for sub_path in sub.paths:
            if sub_path.stat().st_size:
                yield sub_path.read_bytes()
            sub_path.unlink()
        sub.directory.rmdir()

    def _unique_groups(self) -> Iterator[_Group]:
        """Each group of the spill as its directories, sorted, with their files de-duplicated."""
        # An unlink can wait milliseconds on the file system's journal: a thread does them while
        # the next partitions are read (it releases the GIL).
        with ThreadPoolExecutor(1) as unlinker:
            unlinked = []
            for path in self.spill.paths:
                for data in self._partition_groups(path):
                    by_dir: dict[bytes, list[bytes]] = {}
                    for directory, block in _records(data):
                        by_dir.setdefault(directory, []).append(block)
                    del data
                    yield [(directory, *self.engine.unique(directory + b"/",
                                                           blocks[0] if len(blocks) == 1 else b"".join(blocks),
                                                           EXAMPLES_PER_REASON))
                           for directory, blocks in sorted(by_dir.items())]
                unlinked.append(unlinker.submit(path.unlink))
            for done in unlinked:
                done.result()

    def _write_group(self, group: _Group, jobs: _JobWriter, dirs_out: Any) -> int:
        removable: set[bytes] = set()
        for directory, block, kept, repeats, examples in group:
            if repeats:
                self._count_duplicates(repeats, examples)
            jobs.add(block, kept)
            cut = len(directory)
            while cut > 0:
                parent = directory[:cut]
                if lfn.depth(parent) < self.floor or parent in removable:
                    break
                if not (self.protection.holds_below(parent) or self.exclude.holds_below(parent)):
                    removable.add(parent)
                cut = directory.rfind(b"/", 0, cut)
        if removable:
            # Leaf first: deeper directories before their parents.
            ordered = sorted(removable, key=lambda d: (-lfn.depth(d), d))
            dirs_out.write(b"\n".join(ordered) + b"\n")
        return len(removable)

    def _count_duplicates(self, n: int, examples: list[bytes]) -> None:
        c = self.counts
        c.invalid[lfn.DUPLICATE] = c.invalid.get(lfn.DUPLICATE, 0) + n
        kept = c.examples.setdefault(lfn.DUPLICATE, [])
        kept += [f.decode("utf-8", errors="backslashreplace") for f in examples[:EXAMPLES_PER_REASON - len(kept)]]


def write_summary(out_dir: Path, plan: Plan) -> None:
    tmp = out_dir / (seal.SUMMARY_NAME + ".tmp")
    tmp.write_text(json.dumps(plan.to_dict(), indent=1, sort_keys=True))
    os.replace(tmp, out_dir / seal.SUMMARY_NAME)


def read_summary(out_dir: os.PathLike | str) -> Plan:
    data = json.loads((Path(out_dir) / seal.SUMMARY_NAME).read_text())
    names = {f.name for f in dataclasses.fields(Plan)}
    return Plan(**{k: v for k, v in data.items() if k in names})


def plan(rse: str, chunks: Iterable[bytes], protected: Iterable[str], config: Config,
         out_dir: os.PathLike | str, stats: Optional[dict[str, Any]] = None,
         previous_protected_count: Optional[int] = None, require_scan: bool = True,
         now: Optional[float] = None, progress: Optional[ProgressFn] = None, count_guards: bool = True,
         ages: Optional[Mapping[bytes, float]] = None) -> Plan:
    """Plan one RSE from dump chunks into a sealed plan directory (seal.py). Any guard gives an empty
    plan with its reason, never a guess.

    `stats` is the RSE's entry of the ConMon `stats` answer; without it the scan guards are
    skipped only when `require_scan` is False (offline planning of a local dump: such a plan has no
    generation and no scan start, and `apply` refuses it). `previous_protected_count` is the shrink
    guard's baseline (the ledger's, or the operator's offline). `count_guards` False leaves out the
    deletion count and fraction limits (apply's re-derivation checks them on the plan it applies).
    `ages`: when the ledger first saw each dataset directory (the throttle's order; none offline).
    """
    g = config.guards
    now = time.time() if now is None else now
    guard: Optional[GuardTripped] = None
    scan: Optional[Scan] = None
    protection = PrefixSet(["/"])  # until the list is checked, everything is protected
    checked: Optional[PrefixSet] = None
    try:
        protection = checked = check_protection(protected, previous_protected_count, g.max_protected_shrink)
        if stats is not None or require_scan:
            scan = check_scan(stats, g.max_scan_age_h, now)
    except GuardTripped as tripped:
        guard = tripped
    expected = scan.files if scan is not None else None
    planner = Planner(rse, protection, config, out_dir, progress, expected, ages)
    # The seal's digest of the dump: of its bytes as read from the source (iter_chunks), else of the chunks given.
    dump = chunks if isinstance(chunks, DumpChunks) else seal.DumpDigest(chunks)
    if guard is None:
        try:
            for chunk in dump:
                planner.feed(chunk)
            check_lines(planner.counts.total, planner.counts.invalid)
        except NotADump as exc:
            guard = GuardTripped(GUARD_NOT_A_DUMP, f"not a dump: {exc}")
        except DumpError as exc:
            guard = GuardTripped(GUARD_DUMP_UNREADABLE, str(exc))
    end_time = scan.end_time if scan is not None else None
    result = planner.finish(end_time, expected, guard, scan.start_time if scan is not None else None, count_guards)
    seal.write_seal(out_dir, rse, end_time, dump.hexdigest() if guard is None else None, checked, g,
                    planner.described)
    return result
