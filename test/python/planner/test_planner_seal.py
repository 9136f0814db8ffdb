"""What the planner seals: the dump's digest over its bytes as read from the source, and each job file's entry
from the bytes written (never read back): an edit made at any time after the write is refused by seal.verify."""
import fcntl
import gzip
import hashlib
import io
import json
import os
import struct
from pathlib import Path

import pytest

from MSUnmerged import guards, planner, seal
from MSUnmerged.dumpreader import iter_chunks
from planner_kit import chunked, each_engine, permissive, planned_lfns, run_plan

pytestmark = pytest.mark.usefixtures(each_engine.__name__)  # both engines seal alike

LINES = [f"/store/unmerged/E/P{p}/T/v-v1/{d:04d}/{i}.root".encode() for p in range(6) for d in range(4)
         for i in range(13)]
TEXT = b"\n".join(LINES) + b"\n"
PROTECTED = ["/store/unmerged/E/P2"]
DELETABLE = sorted(x for x in LINES if not x.startswith(b"/store/unmerged/E/P2/"))
FORMS = {
    "plain": TEXT,
    "no_final_newline": TEXT[:-1],
    "gzip": gzip.compress(TEXT),
    "gzip_members": gzip.compress(TEXT[:999]) + gzip.compress(TEXT[999:]) + b"\0" * 64,
    "json": json.dumps([x.decode() for x in LINES]).encode() + b" \n" * 3000,  # spaces after ']' are read too
}


def sealed_files(out: Path) -> dict:
    return seal.read_seal(out).files


def config(per_job: int = 7, per_cycle: int = 0):
    cfg = permissive()
    cfg.planner.files_per_job = per_job
    cfg.planner.max_files_per_cycle = per_cycle
    return cfg


@pytest.mark.parametrize("form", sorted(FORMS))
def test_the_dump_digest_is_of_the_bytes_as_read_from_the_source(tmp_path: Path, form: str) -> None:
    """sha256sum of the dump file as served (compressed for gzip), whatever its form and chunk size."""
    path = tmp_path / "dump"
    path.write_bytes(FORMS[form])
    made = planner.plan("T2_XX_Test", iter_chunks(path, 1000), PROTECTED, permissive(), tmp_path / "file",
                        require_scan=False)
    assert made.guard is None and made.files_to_delete == len(DELETABLE)
    assert seal.read_seal(tmp_path / "file").dump_sha256 == hashlib.sha256(FORMS[form]).hexdigest()
    planner.plan("T2_XX_Test", iter_chunks(io.BytesIO(FORMS[form]), 333, read_ahead=0), PROTECTED, permissive(),
                 tmp_path / "stream", require_scan=False)
    assert seal.read_seal(tmp_path / "stream").dump_sha256 == hashlib.sha256(FORMS[form]).hexdigest()


def test_chunks_handed_over_are_the_dump_digested(tmp_path: Path) -> None:
    run_plan(tmp_path, LINES, PROTECTED)
    assert seal.read_seal(tmp_path).dump_sha256 == hashlib.sha256(b"".join(chunked(LINES))).hexdigest()


def test_a_refused_dump_has_no_digest(tmp_path: Path) -> None:
    made = planner.plan("T2_XX_Test", iter_chunks(io.BytesIO(gzip.compress(TEXT)[:-20])), PROTECTED, permissive(),
                        tmp_path, require_scan=False)
    assert made.guard == guards.GUARD_DUMP_UNREADABLE and seal.read_seal(tmp_path).dump_sha256 is None


@pytest.mark.parametrize("per_cycle", [0, 30])
def test_job_entries_from_the_bytes_written_match_the_disk(tmp_path: Path, per_cycle: int) -> None:
    """Every job file the plan names, created ahead of its writing, holds what its seal entry says;
    files created but not needed (repeats made fewer jobs) are gone."""
    lines = LINES + LINES[::3]  # repeats: fewer jobs than the spilled files could fill
    made = run_plan(tmp_path, lines, PROTECTED, config(per_cycle=per_cycle))
    assert made.guard is None and made.jobs > 10
    on_disk = sorted(p.name for p in (tmp_path / "jobs").iterdir())
    assert on_disk == made.job_files == [f"job-{n:06d}.txt" for n in range(1, made.jobs + 1)]
    assert sealed_files(tmp_path) == {rel: seal.describe_file(tmp_path / rel)
                                      for rel in ["summary.json", "dirs.txt"] + [f"jobs/{n}" for n in on_disk]}
    assert sorted(planned_lfns(tmp_path)) == DELETABLE
    assert seal.verify(tmp_path, 1024).files == sealed_files(tmp_path)


def sealing_after(tamper):
    """seal.write_seal as the planner calls it, with `tamper(plan_dir)` done just before: an edit made after the
    planner wrote its job files and before the seal was written."""
    write = seal.write_seal

    def tampered(plan_dir, *args, **kwargs):
        tamper(Path(plan_dir))
        return write(plan_dir, *args, **kwargs)

    return tampered


def first_job(out: Path) -> Path:
    return out / "jobs" / "job-000001.txt"


def swap_first_line(out: Path) -> None:
    """The same number of lines, each a canonical LFN below /store/unmerged: only the digest tells."""
    data = first_job(out).read_bytes()
    first = data.split(b"\n", 1)[0]
    first_job(out).write_bytes(data.replace(first, b"/store/unmerged/E/P2/T/v-v1/0000/0.root", 1))


TAMPERS = {
    "swapped_line": swap_first_line,
    "appended_line": lambda out: first_job(out).open("ab").write(b"/store/unmerged/E/P2/T/v-v1/0000/1.root\n"),
    "added_jobs_file": lambda out: (out / "jobs" / "job-999999.txt").write_bytes(b"/store/unmerged/E/P2/x.root\n"),
}


@pytest.mark.parametrize("name", sorted(TAMPERS))
def test_a_job_file_edited_before_the_seal_is_refused_where_the_plan_is_used(tmp_path: Path, monkeypatch,
                                                                              name: str) -> None:
    monkeypatch.setattr(seal, "write_seal", sealing_after(TAMPERS[name]))
    made = run_plan(tmp_path, LINES, PROTECTED, config())
    assert made.guard is None
    with pytest.raises(guards.GuardTripped, match=guards.PLAN_MODIFIED):
        seal.verify(tmp_path, 1024)


@pytest.mark.parametrize("name", sorted(TAMPERS))
def test_a_job_file_edited_after_the_seal_is_refused(tmp_path: Path, name: str) -> None:
    run_plan(tmp_path, LINES, PROTECTED, config())
    seal.verify(tmp_path, 1024)
    TAMPERS[name](tmp_path)
    with pytest.raises(guards.GuardTripped, match=guards.PLAN_MODIFIED):
        seal.verify(tmp_path, 1024)


def test_a_link_put_in_place_of_a_job_file_is_not_written_through(tmp_path: Path, monkeypatch) -> None:
    """A job file created ahead and replaced by a symbolic link before it is written: planning fails, the
    link's target is untouched."""
    victim = tmp_path / "victim"
    victim.write_bytes(b"keep me\n")
    create = planner._JobWriter._create

    def create_then_link(path: Path) -> None:
        create(path)
        if path.name == "job-000002.txt":
            path.unlink()
            path.symlink_to(victim)

    monkeypatch.setattr(planner._JobWriter, "_create", staticmethod(create_then_link))
    with pytest.raises(OSError):
        run_plan(tmp_path / "plan", LINES, PROTECTED, config())
    assert victim.read_bytes() == b"keep me\n"


def test_a_job_file_written_into_before_the_planner_is_refused(tmp_path: Path, monkeypatch) -> None:
    """Bytes put into a job file created ahead, before the planner writes it: the planner writes over the start
    only, the seal holds what it wrote, verify refuses what is on disk."""
    create = planner._JobWriter._create

    def create_and_fill(path: Path) -> None:
        create(path)
        path.write_bytes(b"/store/unmerged/E/P2/T/v-v1/0000/0.root\n" * 50)

    monkeypatch.setattr(planner._JobWriter, "_create", staticmethod(create_and_fill))
    run_plan(tmp_path, LINES, PROTECTED, config())
    with pytest.raises(guards.GuardTripped, match=guards.PLAN_MODIFIED):
        seal.verify(tmp_path, 1024)
    assert seal.describe_file(first_job(tmp_path)) != sealed_files(tmp_path)["jobs/job-000001.txt"]


def test_job_files_are_written_apart_and_appear_in_jobs_only_when_all_are_written(tmp_path: Path,
                                                                                   monkeypatch) -> None:
    """The job files are created in a new folder of their own, not in jobs/, which holds them (and only them) once
    every job is written; no such folder is left beside the plan."""
    create = planner._JobWriter._create
    folders = set()

    def create_and_look(path: Path) -> None:
        create(path)
        folders.add(path.parent)
        assert not (tmp_path / "jobs").exists()

    monkeypatch.setattr(planner._JobWriter, "_create", staticmethod(create_and_look))
    made = run_plan(tmp_path, LINES, PROTECTED, config())
    assert len(folders) == 1 and folders.pop().parent == tmp_path
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dirs.txt", "jobs", "seal.json", "summary.json"]
    assert sorted(p.name for p in (tmp_path / "jobs").iterdir()) == made.job_files
    assert sorted(planned_lfns(tmp_path)) == DELETABLE
    seal.verify(tmp_path, 1024)


def test_a_jobs_folder_put_in_place_while_planning_is_not_taken_over(tmp_path: Path, monkeypatch) -> None:
    """A jobs/ folder made by someone else while the planner writes its job files: the planner fails rather than
    merging its files into it or replacing it, and leaves its files in it untouched."""
    create = planner._JobWriter._create

    def create_and_plant(path: Path) -> None:
        create(path)
        (tmp_path / "jobs").mkdir(exist_ok=True)
        (tmp_path / "jobs" / "job-000001.txt").write_bytes(b"/store/unmerged/E/P2/T/v-v1/0000/0.root\n")

    monkeypatch.setattr(planner._JobWriter, "_create", staticmethod(create_and_plant))
    with pytest.raises(OSError):
        run_plan(tmp_path, LINES, PROTECTED, config())
    assert [p.name for p in (tmp_path / "jobs").iterdir()] == ["job-000001.txt"]
    assert (tmp_path / "jobs" / "job-000001.txt").read_bytes() == b"/store/unmerged/E/P2/T/v-v1/0000/0.root\n"
    assert not (tmp_path / seal.SEAL_NAME).exists()


def test_the_folder_of_a_failed_plan_is_removed_by_the_next(tmp_path: Path, monkeypatch) -> None:
    """A plan that failed while writing its job files leaves their folder; the next plan of the same directory
    removes it, and its seal holds."""
    create = planner._JobWriter._create

    def create_then_fail(path: Path) -> None:
        create(path)
        raise OSError("disk full")

    with monkeypatch.context() as patched:
        patched.setattr(planner._JobWriter, "_create", staticmethod(create_then_fail))
        with pytest.raises(OSError, match="disk full"):
            run_plan(tmp_path, LINES, PROTECTED, config())
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".jobs-")]
    made = run_plan(tmp_path, LINES, PROTECTED, config())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dirs.txt", "jobs", "seal.json", "summary.json"]
    assert sorted(p.name for p in (tmp_path / "jobs").iterdir()) == made.job_files
    seal.verify(tmp_path, 1024)


def test_spreading_subfolders_is_best_effort(tmp_path: Path) -> None:
    """The ext4 placement hint is asked for on any folder; where the file system has no such flag, or the path is
    no folder, nothing happens and nothing is raised."""
    planner.spread_subdirs(tmp_path)
    planner.spread_subdirs(tmp_path)  # once set, left as it is
    (tmp_path / "file").write_bytes(b"x")
    planner.spread_subdirs(tmp_path / "file")
    planner.spread_subdirs(tmp_path / "missing")
    assert (tmp_path / "file").read_bytes() == b"x"


def test_spreading_subfolders_sets_the_flag_where_the_file_system_takes_it(tmp_path: Path) -> None:
    """On a file system with inode flags that takes "top of directory hierarchies" (ext4), the folder has it."""
    folder = tmp_path / "plan"
    folder.mkdir()
    planner.spread_subdirs(folder)
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        try:
            flags = struct.unpack("i", fcntl.ioctl(fd, planner._FS_IOC_GETFLAGS, bytes(4)))[0]
        except OSError:
            return  # no inode flags here (tmpfs, ...): nothing was set
        if not flags & planner._FS_TOPDIR_FL:  # then the file system refuses the flag
            with pytest.raises(OSError):
                fcntl.ioctl(fd, planner._FS_IOC_SETFLAGS, struct.pack("i", flags | planner._FS_TOPDIR_FL))
    finally:
        os.close(fd)


def test_check_plan_file_checks_the_lines_of_sealed_bytes_once_per_limit_and_the_bytes_every_time() -> None:
    """A line that is not a canonical LFN is refused even when its file matches the seal; once a file's sealed
    bytes passed at a limit, the same bytes are not line-checked again at that limit (apply's verify, then the
    ledger), but any other bytes are still refused and another limit checks the lines again."""
    good, bad = b"/store/unmerged/E/P/a.root\n", b"/store/unmerged/E//a.root\n"
    sealed = seal.Seal("T2_XX_Test", 1.0, {"jobs/good.txt": seal.describe_written([good], 1),
                                           "jobs/bad.txt": seal.describe_written([bad], 1)}, None, None, 0, {})
    for _ in range(2):
        with pytest.raises(guards.GuardTripped) as refused:
            sealed.check_plan_file("jobs/bad.txt", bad, 100)
        assert refused.value.reason == guards.PLAN_MODIFIED and "not a valid LFN" in refused.value.detail
    sealed.check_plan_file("jobs/good.txt", good, 100)
    sealed.check_plan_file("jobs/good.txt", good, 100)
    with pytest.raises(guards.GuardTripped, match="changed since the plan was sealed"):
        sealed.check_plan_file("jobs/good.txt", bad, 100)
    with pytest.raises(guards.GuardTripped, match="not a valid LFN"):
        sealed.check_plan_file("jobs/good.txt", good, 20)
