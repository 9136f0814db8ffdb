"""The throttle (planner.max_files_per_cycle and its per-RSE override): slices of at most N files, whole
directories together, oldest dataset directories first, deterministic; the count guard judges a cycle's
slice, the fraction guard the whole dump; per-RSE path filters in the plan and its summary."""
from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from MSUnmerged.config import Config, SiteConfig
from MSUnmerged.guards import GuardTripped
from MSUnmerged.ledger import slices
from planner_kit import each_engine, permissive, planned_lfns, run_plan, summary

pytestmark = pytest.mark.usefixtures(each_engine.__name__)
RSE = "T2_XX_Test"


def dataset(era: str, n: int) -> str:
    return f"/store/unmerged/{era}/Prim{n}/AODSIM/Proc{n}-v1"


def dump(datasets: int = 12, runs: int = 4, files: int = 9, era: str = "Run3") -> list[bytes]:
    """`datasets` dataset directories of `runs` run directories of `files` files each."""
    return [f"{dataset(era, d)}/000/{r:03d}/f{i}.root".encode()
            for d in range(datasets) for r in range(runs) for i in range(files)]


def throttled(n: int, **guards: object) -> Config:
    config = permissive()
    config.planner.max_files_per_cycle = n
    config.planner.files_per_job = 20
    for key, value in guards.items():
        setattr(config.guards, key, value)
    return config


def job_lines(out: Path, plan) -> list[list[bytes]]:
    return [(out / "jobs" / name).read_bytes().split(b"\n")[:-1] for name in plan.job_files]


def test_slices_hold_at_most_n_files_of_whole_directories(tmp_path: Path) -> None:
    lines = dump()
    plan = run_plan(tmp_path, lines, ["/store/unmerged/none"], throttled(50))
    assert plan.guard is None and plan.files_to_delete == len(lines)
    assert plan.max_files_per_cycle == 50 and sum(plan.slice_sizes) == len(lines)
    assert all(0 < n <= 50 for n in plan.slice_sizes) and len(plan.slice_sizes) >= len(lines) // 50
    assert len(plan.job_slices) == plan.jobs and plan.job_slices == sorted(plan.job_slices)
    # Each job lies in one slice, and the slices' sizes are the sums of their jobs.
    per_slice = Counter()
    for sl, size in zip(plan.job_slices, plan.job_sizes):
        per_slice[sl] += size
    assert [per_slice[i] for i in range(1, len(plan.slice_sizes) + 1)] == plan.slice_sizes
    # A directory (9 files, smaller than a slice) is never cut between two slices.
    slice_of_dir: dict[bytes, set[int]] = {}
    for sl, names in zip(plan.job_slices, job_lines(tmp_path, plan)):
        for name in names:
            slice_of_dir.setdefault(name.rsplit(b"/", 1)[0], set()).add(sl)
    assert all(len(s) == 1 for s in slice_of_dir.values())
    assert summary(tmp_path)["slice_sizes"] == plan.slice_sizes


def test_the_order_is_deterministic(tmp_path: Path) -> None:
    """The same dump gives the same slices; a dump listing the files in another order the same directories in
    each slice (files keep their dump order inside their directory)."""
    lines = dump()
    plans = [run_plan(tmp_path / name, dumped, ["/store/unmerged/none"], throttled(50))
             for name, dumped in (("a", lines), ("b", lines), ("c", list(reversed(lines))))]
    assert len({(tuple(p.slice_sizes), tuple(p.job_slices)) for p in plans}) == 1
    assert planned_lfns(tmp_path / "a") == planned_lfns(tmp_path / "b")

    def dirs_by_slice(out: Path, plan) -> list[set[bytes]]:
        found: dict[int, set[bytes]] = {}
        for sl, names in zip(plan.job_slices, job_lines(out, plan)):
            found.setdefault(sl, set()).update(n.rsplit(b"/", 1)[0] for n in names)
        return [found[k] for k in sorted(found)]
    assert dirs_by_slice(tmp_path / "a", plans[0]) == dirs_by_slice(tmp_path / "c", plans[2])


def test_oldest_dataset_directories_come_first(tmp_path: Path) -> None:
    lines = dump()
    # Datasets 7 and 3 were seen two and one generations ago; the others are new.
    ages = {dataset("Run3", 7).encode(): 1000.0, dataset("Run3", 3).encode(): 2000.0}
    plan = run_plan(tmp_path, lines, ["/store/unmerged/none"], throttled(40), ages=ages)
    order = [name.rsplit(b"/", 3)[0] for names in job_lines(tmp_path, plan) for name in names]
    first_seen = list(dict.fromkeys(order))
    assert first_seen[:2] == [dataset("Run3", 7).encode(), dataset("Run3", 3).encode()]
    slice_of = {n: sl for sl, names in zip(plan.job_slices, job_lines(tmp_path, plan)) for n in names}
    assert slice_of[f"{dataset('Run3', 7)}/000/000/f0.root".encode()] == 1


def test_a_directory_larger_than_a_slice_spans_consecutive_slices(tmp_path: Path) -> None:
    big = [f"{dataset('Run3', 0)}/000/000/f{i}.root".encode() for i in range(130)]
    plan = run_plan(tmp_path, big + dump(datasets=2, runs=1, era="Run4"), ["/store/unmerged/none"], throttled(50))
    assert max(plan.slice_sizes) == 50 and sum(plan.slice_sizes) == plan.files_to_delete == 148
    spans = sorted({sl for sl, names in zip(plan.job_slices, job_lines(tmp_path, plan)) for n in names if n in big})
    assert len(spans) == 3 and spans == list(range(spans[0], spans[0] + 3))


def test_a_backlog_larger_than_the_count_guard_passes_in_slices(tmp_path: Path) -> None:
    lines = dump()  # 432 files
    refused = run_plan(tmp_path / "whole", lines, ["/store/unmerged/none"], throttled(0, max_delete_files=100))
    assert refused.guard == "delete_count_exceeded"
    plan = run_plan(tmp_path / "sliced", lines, ["/store/unmerged/none"], throttled(100, max_delete_files=100))
    assert plan.guard is None and plan.files_to_delete == 432 and max(plan.slice_sizes) <= 100


def test_the_fraction_guard_judges_the_whole_dump_not_a_slice(tmp_path: Path) -> None:
    lines = dump()
    plan = run_plan(tmp_path, lines, ["/store/unmerged/none"], throttled(40, max_delete_fraction=0.5))
    # Each slice is under 10 % of the dump, the plan deletes all of it.
    assert plan.guard == "delete_fraction_exceeded" and plan.files_to_delete == 0 and plan.would_delete == 432
    assert plan.slice_sizes == [] and plan.job_slices == [] and not list((tmp_path / "jobs").iterdir())


def test_the_rse_override_wins_and_the_plan_is_unthrottled_without_one(tmp_path: Path) -> None:
    config = throttled(0)
    config.jobs.sites[RSE] = SiteConfig(max_files_per_cycle=60)
    plan = run_plan(tmp_path / "own", dump(), ["/store/unmerged/none"], config)
    assert plan.max_files_per_cycle == 60 and max(plan.slice_sizes) <= 60
    plain = run_plan(tmp_path / "plain", dump(), ["/store/unmerged/none"], throttled(0))
    assert plain.slice_sizes == [] and plain.job_slices == [] and plain.max_files_per_cycle == 0


def test_per_rse_exclude_and_include_join_the_global_filters(tmp_path: Path) -> None:
    config = throttled(0)
    config.planner.include = ["/store/unmerged/Run3"]
    config.jobs.sites[RSE] = SiteConfig(exclude=[dataset("Run3", 1)], include=["/store/unmerged/Run3/Prim0",
                                                                                "/store/unmerged/Run3/Prim1"])
    lines = dump(datasets=3, runs=1, files=2) + [b"/store/unmerged/Run4/Prim0/AODSIM/X-v1/000/f.root"]
    plan = run_plan(tmp_path, lines, ["/store/unmerged/none"], config)
    assert {n.rsplit(b"/", 3)[0] for n in planned_lfns(tmp_path)} == {dataset("Run3", 0).encode()}
    assert plan.files_excluded == len(lines) - 2
    shown = summary(tmp_path)["filters"]
    assert shown["include"] == ["/store/unmerged/Run3/Prim0", "/store/unmerged/Run3/Prim1"]
    assert dataset("Run3", 1) in shown["exclude"] and "/store/unmerged/logs/prod/" in shown["exclude"]
    # Removable directories never hold an excluded prefix.
    assert not any(d.startswith(dataset("Run3", 1).encode()) for d in (tmp_path / "dirs.txt").read_bytes().split())


def test_disjoint_includes_plan_nothing(tmp_path: Path) -> None:
    config = throttled(0)
    config.planner.include = ["/store/unmerged/Run3"]
    config.jobs.sites[RSE] = SiteConfig(include=["/store/unmerged/Run4"])
    plan = run_plan(tmp_path, dump(datasets=2, runs=1, files=2), ["/store/unmerged/none"], config)
    assert plan.files_to_delete == 0 and plan.files_excluded == 4
    assert summary(tmp_path)["filters"]["include"] == []


def test_slices_that_do_not_fit_the_jobs_are_refused(tmp_path: Path) -> None:
    """What apply checks before the count guard judges the largest slice."""
    plan = run_plan(tmp_path, dump(), ["/store/unmerged/none"], throttled(50))
    slices.check(plan.job_sizes, plan.job_slices, plan.slice_sizes)
    slices.check([5, 5], [], [])  # not throttled
    for job_slices, slice_sizes in ((plan.job_slices, [sum(plan.slice_sizes)]),  # one slice claimed for all
                                    ([1] * len(plan.job_sizes), plan.slice_sizes),
                                    (list(reversed(plan.job_slices)), plan.slice_sizes),
                                    (plan.job_slices[:-1], plan.slice_sizes)):
        with pytest.raises(GuardTripped) as refused:
            slices.check(plan.job_sizes, job_slices, slice_sizes)
        assert refused.value.reason == "plan_modified"
