"""The spill is sized from the scan's file count, so that no partition needs a second pass."""
import time

import pytest

from MSUnmerged import planner
from planner_kit import each_engine, permissive, planned_lfns, removable_dirs, run_plan

pytestmark = pytest.mark.usefixtures(each_engine.__name__)  # both engines plan alike


def test_partitions_grow_with_the_announced_dump_and_stay_bounded():
    assert planner.spill_partitions(64, 8 << 20, None) == 64
    assert planner.spill_partitions(64, 8 << 20, 1_000_000) == 64  # ~160 MB: 64 partitions of ~2.5 MB
    many = planner.spill_partitions(64, 8 << 20, 10_000_000)
    assert 64 < many <= 512 and 10_000_000 * 160 / many < 8 << 20
    assert planner.spill_partitions(64, 8 << 20, 10**9) == 512


def test_a_small_announced_dump_is_spilled_to_fewer_files():
    """Each partition file costs its creation, reading and unlink: a small dump gets about one per
    _MIN_PARTITION_BYTES expected, never fewer than needed to stay under partition_max_bytes."""
    assert planner.spill_partitions(64, 8 << 20, 10_000) == 3  # ~2.4 MB expected
    assert planner.spill_partitions(64, 8 << 20, 100_000) == 23  # ~24 MB
    assert planner.spill_partitions(64, 8 << 20, 1) == 1
    assert planner.spill_partitions(2, 8 << 20, 100_000) == 3  # no more than configured, unless needed
    assert planner.spill_partitions(8, 1 << 20, 100_000) == 23  # the bound on a partition still decides


def test_a_sized_spill_plans_the_same_files(tmp_path, monkeypatch):
    lines = [f"/store/unmerged/E/P{p}/T/v-v1/{d:04d}/{i}.root".encode()
             for p in range(40) for d in range(3) for i in range(20)]
    lines.append(lines[5])
    stats = {"status": "done", "end_time": time.time() - 3600, "start_time": time.time() - 7200,
             "files": len(lines)}
    cfg = permissive()
    cfg.planner.spill_partitions = 1
    cfg.planner.partition_max_bytes = 20_000  # below the validated minimum: 1 partition would need a split
    sized = []
    make = planner._Spill.__init__

    def record(self, directory, partitions, *args):
        sized.append(partitions)
        make(self, directory, partitions, *args)

    monkeypatch.setattr(planner._Spill, "__init__", record)
    plan = run_plan(tmp_path / "sized", lines, ["/store/unmerged/E/P7"], cfg, stats=stats, per_chunk=50)
    assert plan.guard is None and sized == [planner.spill_partitions(1, 20_000, len(lines))] and sized[0] > 1
    sized.clear()
    run_plan(tmp_path / "unsized", lines, ["/store/unmerged/E/P7"], cfg, per_chunk=50)
    assert sized[0] == 1 and len(sized) == 2  # the one partition was split in a second pass
    assert sorted(planned_lfns(tmp_path / "sized")) == sorted(planned_lfns(tmp_path / "unsized"))
    assert sorted(removable_dirs(tmp_path / "sized")) == sorted(removable_dirs(tmp_path / "unsized"))
    assert plan.files_to_delete == len(set(lines)) - 60


def test_a_failed_spill_write_is_raised_not_lost(tmp_path):
    spill = planner._Spill(tmp_path / "spill", 1, 7)
    spill.write(b"/store/unmerged/a/b", b"/store/unmerged/a/b/f.root\n")
    spill.files[0].close()  # the writer thread's next write fails
    spill.write(b"/store/unmerged/a/c", b"/store/unmerged/a/c/f.root\n")
    with pytest.raises(ValueError, match="closed file"):
        spill.close()


def test_spilled_records_read_back_in_order(tmp_path, monkeypatch):
    monkeypatch.setattr(planner, "_SPILL_BATCH_BYTES", 4096)  # many batches through the writer thread
    spill = planner._Spill(tmp_path / "spill", 3, 7)
    written = [(b"/store/unmerged/E/P%d/T/v-v1/%04d" % (i % 7, i), b"/x/%d.root\n" % i * (i % 5 + 1))
               for i in range(3000)]
    for directory, block in written:
        spill.write(directory, block)
    spill.close()
    got = [record for path in spill.paths for record in planner._records(path.read_bytes())]
    assert sorted(got) == sorted(written)
    for path in spill.paths:  # each partition keeps the order the records were written in
        records = list(planner._records(path.read_bytes()))
        assert records == [r for r in written if r in set(records)]


def test_job_files_described_while_planning_match_the_files_on_disk(tmp_path):
    from MSUnmerged import seal

    cfg = permissive()
    cfg.planner.files_per_job = 7
    lines = [f"/store/unmerged/E/P{p}/T/v-v1/{d:04d}/{i}.root".encode() for p in range(5) for d in range(3)
             for i in range(11)]
    plan = run_plan(tmp_path, lines, ["/store/unmerged/E/P3"], cfg)
    sealed = seal.read_seal(tmp_path).files
    jobs = sorted(p.name for p in (tmp_path / "jobs").iterdir())
    assert plan.jobs == len(jobs) > 10
    assert sealed == {rel: seal.describe_file(tmp_path / rel)
                      for rel in ["summary.json", "dirs.txt"] + [f"jobs/{n}" for n in jobs]}


def _spills_made(monkeypatch) -> list[int]:
    """The partition count of every spill the planner makes from now on."""
    made: list[int] = []
    make = planner._Spill.__init__

    def record(self, directory, partitions, *args):
        made.append(partitions)
        make(self, directory, partitions, *args)

    monkeypatch.setattr(planner._Spill, "__init__", record)
    return made


DATASETS = [f"/store/unmerged/E/P{p}/T/v-v1/{d:04d}" for p in range(4) for d in range(3)]


@pytest.mark.parametrize("again_at", [22, 40, 132])  # listed again after the next directory, a few, all
def test_a_directory_listed_again_takes_the_files_written_back_to_the_spill(tmp_path, monkeypatch, again_at):
    from MSUnmerged import lfn, seal

    cfg = permissive()
    cfg.planner.files_per_job = 7  # directories span job files
    grouped = [f"{d}/{i}.root".encode() for d in DATASETS for i in range(11)]
    again = [b"/store/unmerged/E/P0/T/v-v1/0000/%d.root" % i for i in (3, 20, 21)]  # one repeat, two new files
    lines = grouped[:again_at] + again + grouped[again_at:]
    made = _spills_made(monkeypatch)
    plan = run_plan(tmp_path / "again", lines, ["/store/unmerged/E/P1"], cfg, per_chunk=5)
    assert made and not (tmp_path / "again" / ".spill").exists()
    reference = run_plan(tmp_path / "once", sorted(set(lines), key=lines.index), ["/store/unmerged/E/P1"], cfg)
    got = planned_lfns(tmp_path / "again")
    assert sorted(got) == sorted(planned_lfns(tmp_path / "once")) and len(got) == len(set(got)) == 101
    assert sorted(removable_dirs(tmp_path / "again")) == sorted(removable_dirs(tmp_path / "once"))
    assert plan.files_invalid == {lfn.DUPLICATE: 1} and plan.files_to_delete == reference.files_to_delete
    assert plan.files_total == len(lines) and plan.files_protected == reference.files_protected
    directories = [x[:x.rfind(b"/")] for x in got]  # the files of one directory stay together
    assert len(list(dict.fromkeys(directories))) == len(set(directories))
    assert sorted(p.name for p in (tmp_path / "again" / "jobs").iterdir()) == plan.job_files
    seal.verify(tmp_path / "again", cfg.planner.max_lfn_length)
