"""The planner on the real WMCore samples and on hand-made trees; guards fail closed."""
from __future__ import annotations

import copy
import time

import pytest

from MSUnmerged import guards, lfn, planner
from planner_kit import each_engine, permissive, planned_lfns, removable_dirs, run_plan, summary

pytestmark = pytest.mark.usefixtures(each_engine.__name__)  # both engines plan alike

BASE = "/store/unmerged/Era/Prim/TIER/proc-v1"


def under(prefix: str, path: bytes) -> bool:
    p = prefix.rstrip("/").encode()
    return path == p or path.startswith(p + b"/")


def test_real_samples(tmp_path, conmon_dump_lfns, protected_lfns):
    lines = [x.encode() for x in conmon_dump_lfns]
    plan = run_plan(tmp_path, lines, protected_lfns, per_chunk=1000)
    got = planned_lfns(tmp_path)
    assert plan.files_total == len(lines) == 11938
    assert plan.files_to_delete == len(got) == len(set(got))
    assert plan.files_to_delete + plan.files_protected + plan.files_excluded + plan.invalid_total == plan.files_total
    # Nothing planned is under a protected base; everything else is planned.
    expected = [x for x in lines if not any(under(p, x) for p in protected_lfns)]
    assert sorted(got) == sorted(expected)
    assert plan.files_protected == len(lines) - len(expected) > 0
    for d in removable_dirs(tmp_path):
        assert not any(under(p, d) or under(d.decode(), p.rstrip("/").encode()) for p in protected_lfns)
    assert plan.guard is None


def test_real_stats_guard(tmp_path, conmon_dump_lfns, protected_lfns, conmon_stats):
    lines = [x.encode() for x in conmon_dump_lfns]
    stats = conmon_stats["T1_DE_KIT_Disk"]  # done, but a 2021 scan: stale today
    plan = run_plan(tmp_path, lines, protected_lfns, stats=stats)
    assert plan.guard == guards.GUARD_SCAN_STALE and plan.files_to_delete == 0
    started = conmon_stats["T1_IT_CNAF_Disk"]
    assert run_plan(tmp_path, lines, protected_lfns, stats=started).guard == guards.GUARD_SCAN_RUNNING


def test_deep_protected_base_protects_its_files_only(tmp_path):
    deep = f"{BASE}/000/380/123"
    lines = [f"{BASE}/000/380/123/a.root".encode(), f"{BASE}/000/380/124/b.root".encode(),
             f"{BASE}/000/380/1234/c.root".encode()]
    plan = run_plan(tmp_path, lines, [deep + "/"])
    assert sorted(planned_lfns(tmp_path)) == sorted([lines[1], lines[2]])
    assert plan.files_protected == 1
    dirs = removable_dirs(tmp_path)
    # The protected run directory and every ancestor of it stay.
    assert f"{BASE}/000/380/124".encode() in dirs
    for keep in (deep, f"{BASE}/000/380", f"{BASE}/000", BASE):
        assert keep.encode() not in dirs


def test_version_suffix_is_not_a_prefix_match(tmp_path):
    lines = [f"{BASE}/0000/a.root".encode(), f"{BASE}0/0000/b.root".encode()]
    run_plan(tmp_path, lines, [BASE])
    assert planned_lfns(tmp_path) == [lines[1]]


def test_protected_base_naming_a_single_file(tmp_path):
    lines = [f"{BASE}/0000/keep.root".encode(), f"{BASE}/0000/go.root".encode()]
    plan = run_plan(tmp_path, lines, [f"{BASE}/0000/keep.root"])
    assert planned_lfns(tmp_path) == [lines[1]] and plan.files_protected == 1
    assert f"{BASE}/0000".encode() not in removable_dirs(tmp_path)


def test_excludes_and_includes_are_component_wise(tmp_path):
    cfg = permissive()
    cfg.planner.include = ["/store/unmerged/Era"]
    lines = [b"/store/unmerged/logs/prod/2024/x.tar", b"/store/unmerged/Era/P/T/p-v1/0000/a.root",
             b"/store/unmerged/Era2/P/T/p-v1/0000/b.root", b"/store/unmerged/Era/x.root"]
    plan = run_plan(tmp_path, lines, ["/store/unmerged/Other"], cfg)
    assert sorted(planned_lfns(tmp_path)) == sorted([lines[1], lines[3]])
    assert plan.files_excluded == 2


def test_include_naming_a_file(tmp_path):
    cfg = permissive()
    cfg.planner.include = [f"{BASE}/0000/a.root"]
    lines = [f"{BASE}/0000/a.root".encode(), f"{BASE}/0000/b.root".encode()]
    plan = run_plan(tmp_path, lines, ["/store/unmerged/Other"], cfg)
    assert planned_lfns(tmp_path) == [lines[0]] and plan.files_excluded == 1


def test_invalid_lines_counted_with_examples_never_planned(tmp_path):
    good = [f"{BASE}/0000/{i}.root".encode() for i in range(20)]
    bad = [b"/store/mc/x/y.root", b"relative/x.root", b"/store/unmerged/a/../b.root",
           b"/store/unmerged//a.root", b"/store/unmerged/a/", b"/store/unmerged/a b.root",
           b"/store/unmerged/\xff.root", b"/store/unmerged/" + b"y" * 1100, good[3]]
    lines = good[:10] + bad + [b"  " + good[10] + b"\r", b""] + good[11:]
    plan = run_plan(tmp_path, lines, ["/store/unmerged/Other"], per_chunk=4)
    assert sorted(planned_lfns(tmp_path)) == sorted(good)
    assert plan.files_invalid == {lfn.OUTSIDE_UNMERGED: 1, lfn.RELATIVE: 1, lfn.DOT_COMPONENT: 1,
                                  lfn.EMPTY_COMPONENT: 1, lfn.TRAILING_SLASH: 1, lfn.CONTROL_OR_SPACE: 1,
                                  lfn.NON_UTF8: 1, lfn.TOO_LONG: 1, lfn.DUPLICATE: 1}
    assert plan.files_total == len(good) + len(bad)  # the blank line is not a file
    assert plan.invalid_examples[lfn.NON_UTF8] == ["/store/unmerged/\\xff.root"]
    assert plan.invalid_examples[lfn.DUPLICATE] == [good[3].decode()]


def test_lfns_only_the_line_by_line_path_accepts_are_planned(tmp_path):
    """Non-ASCII UTF-8 and names over 255 bytes are valid LFNs (lfn.classify_line): the chunk
    that holds them is checked line by line, and they are planned with its other files."""
    plain = [f"{BASE}/0000/{i}.root".encode() for i in range(5)]
    odd = [f"{BASE}/0000/é.root".encode(), f"{BASE}/0000/{'n' * 256}".encode()]
    plan = run_plan(tmp_path, plain[:2] + odd + [f"{BASE}/../x.root".encode()] + plain[2:],
                    ["/store/unmerged/Other"], per_chunk=100)
    assert planned_lfns(tmp_path) == plain[:2] + odd + plain[2:]  # one directory: in dump order
    assert plan.files_invalid == {lfn.DOT_COMPONENT: 1} and plan.files_total == 8
    assert plan.invalid_examples[lfn.DOT_COMPONENT] == [f"{BASE}/../x.root"]


def test_dot_named_file_in_fast_path_is_rejected(tmp_path):
    lines = [f"{BASE}/0000/a.root".encode(), f"{BASE}/0000/..".encode(), f"{BASE}/0000/.".encode()]
    plan = run_plan(tmp_path, lines, ["/store/unmerged/Other"], per_chunk=100)
    assert planned_lfns(tmp_path) == [lines[0]] and plan.files_invalid == {lfn.DOT_COMPONENT: 2}


def test_directory_split_across_the_dump_is_grouped_and_deduplicated(tmp_path):
    a = [f"{BASE}/0000/{i}.root".encode() for i in range(5)]
    b = [f"{BASE}/0001/{i}.root".encode() for i in range(5)]
    lines = a[:3] + b + a[2:]  # directory 0000 appears twice, one file twice
    plan = run_plan(tmp_path, lines, ["/store/unmerged/Other"], per_chunk=3)
    got = planned_lfns(tmp_path)
    assert sorted(got) == sorted(a + b) and plan.files_invalid == {lfn.DUPLICATE: 1}
    # Files of one directory stay together in job order.
    assert got == a + b or got == b + a


def test_jobs_are_chunked_and_dirs_leaf_first(tmp_path):
    cfg = permissive()
    cfg.planner.files_per_job = 4
    lines = [f"{BASE}/{d:04d}/{i}.root".encode() for d in range(3) for i in range(5)]
    plan = run_plan(tmp_path, lines, ["/store/unmerged/Other"], cfg)
    assert plan.jobs == 4 and plan.job_sizes == [4, 4, 4, 3]
    assert all(len(f.read_bytes().split(b"\n")) - 1 <= 4 for f in (tmp_path / "jobs").iterdir())
    dirs = removable_dirs(tmp_path)
    assert dirs[-1] == BASE.encode() and len(dirs) == 4
    assert summary(tmp_path)["dirs_removable"] == 4


def test_floor_depth_limits_removable_dirs(tmp_path):
    lines = [b"/store/unmerged/SAM/testSRM/host/a.root", b"/store/unmerged/x.root"]
    run_plan(tmp_path, lines, ["/store/unmerged/Other"])
    assert len(planned_lfns(tmp_path)) == 2 and removable_dirs(tmp_path) == []


def test_oversized_partition_is_split_and_still_exact(tmp_path):
    cfg = permissive()
    cfg.planner.spill_partitions = 1
    cfg.planner.partition_max_bytes = 20_000  # below the validated minimum, to force the split path
    lines = [f"/store/unmerged/E/P{p}/T/v-v1/{d:04d}/{i}.root".encode()
             for p in range(40) for d in range(3) for i in range(20)]
    lines.append(lines[5])
    plan = run_plan(tmp_path, lines, ["/store/unmerged/E/P7"], cfg, per_chunk=50)
    got = planned_lfns(tmp_path)
    assert sorted(got) == sorted(x for x in set(lines) if b"/P7/" not in x)
    assert plan.files_invalid == {lfn.DUPLICATE: 1}
    dirs = removable_dirs(tmp_path)
    assert len(dirs) == len(set(dirs)) == 39 * 4


def fresh_stats(n: int, **over) -> dict:
    stats = {"status": "done", "start_time": time.time() - 7200, "end_time": time.time() - 3600, "files": n}
    stats.update(over)
    return stats


LINES = [f"{BASE}/{d:04d}/{i}.root".encode() for d in range(4) for i in range(25)]


@pytest.mark.parametrize("protected, stats, prev, reason", [
    ([], fresh_stats(100), None, guards.GUARD_PROTECTED_EMPTY),
    (["relative/base"], fresh_stats(100), None, guards.GUARD_PROTECTED_INVALID),
    (["/store/unmerged/Other"], fresh_stats(100), 10, guards.GUARD_PROTECTED_SHRANK),
    (["/store/unmerged/Other"], None, None, guards.GUARD_SCAN_MISSING),
    (["/store/unmerged/Other"], fresh_stats(100, status="started"), None, guards.GUARD_SCAN_RUNNING),
    (["/store/unmerged/Other"], fresh_stats(100, status="failed"), None, guards.GUARD_SCAN_FAILED),
    (["/store/unmerged/Other"], fresh_stats(100, status="paused"), None, guards.GUARD_SCAN_NOT_DONE),
    (["/store/unmerged/Other"], fresh_stats(100, end_time=None), None, guards.GUARD_SCAN_NO_END_TIME),
    (["/store/unmerged/Other"], fresh_stats(100, end_time=time.time() - 400 * 3600), None, guards.GUARD_SCAN_STALE),
    (["/store/unmerged/Other"], fresh_stats(101), None, guards.GUARD_LINE_COUNT),
    (["/store/unmerged/Other"], fresh_stats(None), None, guards.GUARD_LINE_COUNT),
])
def test_guards_give_an_empty_plan_with_a_reason(tmp_path, protected, stats, prev, reason):
    plan = planner.plan("T2_XX_Test", [b"\n".join(LINES) + b"\n"], protected, permissive(), tmp_path,
                        stats=copy.deepcopy(stats), previous_protected_count=prev, require_scan=True)
    assert plan.guard == reason and plan.guard_detail
    assert plan.files_to_delete == plan.jobs == plan.dirs_removable == 0
    assert planned_lfns(tmp_path) == [] and removable_dirs(tmp_path) == []
    assert summary(tmp_path)["guard"] == reason


@pytest.mark.parametrize("setting, value, reason", [
    ("max_delete_fraction", 0.95, guards.GUARD_DELETE_FRACTION),  # the default
    ("max_delete_files", 99, guards.GUARD_DELETE_COUNT),
])
def test_delete_maxima(tmp_path, setting, value, reason):
    cfg = permissive()
    setattr(cfg.guards, setting, value)
    plan = run_plan(tmp_path, LINES, ["/store/unmerged/Other"], cfg, stats=fresh_stats(100))
    assert plan.guard == reason and plan.would_delete == 100 and planned_lfns(tmp_path) == []


def test_fresh_complete_scan_passes(tmp_path):
    plan = run_plan(tmp_path, LINES, ["/store/unmerged/Other"], stats=fresh_stats(100))
    assert plan.guard is None and plan.files_to_delete == 100 and plan.scan_checked


def test_shrink_within_limit_passes(tmp_path):
    plan = run_plan(tmp_path, LINES, ["/store/unmerged/Other", "/store/unmerged/O2"], previous_protected_count=3)
    assert plan.guard is None


def test_unreadable_dump_trips_a_guard(tmp_path):
    from MSUnmerged.dumpreader import DumpError

    def broken():
        yield b"\n".join(LINES[:10]) + b"\n"
        raise DumpError("gzip stream is truncated or corrupt")

    plan = planner.plan("T2_XX_Test", broken(), ["/store/unmerged/Other"], permissive(), tmp_path,
                        require_scan=False)
    assert plan.guard == guards.GUARD_DUMP_UNREADABLE and planned_lfns(tmp_path) == []


def test_replanning_into_the_same_directory_replaces_the_old_plan(tmp_path):
    run_plan(tmp_path, LINES, ["/store/unmerged/Other"])
    run_plan(tmp_path, LINES[:10], ["/store/unmerged/Other"])
    assert len(planned_lfns(tmp_path)) == 10 and not (tmp_path / ".spill").exists()


def test_summary_round_trip(tmp_path):
    plan = run_plan(tmp_path, LINES, ["/store/unmerged/Other"])
    again = planner.read_summary(tmp_path)
    assert again == plan


def test_a_shared_protection_index_is_still_checked_against_each_baseline():
    bases = [f"/store/unmerged/era/p/AOD/v{i}" for i in range(10)]
    index = guards.check_protection(bases, None, 0.5)
    assert guards.check_protection(list(bases), 10, 0.5) is index  # prepared once for every caller
    with pytest.raises(guards.GuardTripped) as tripped:  # another RSE's baseline: the same list shrank for it
        guards.check_protection(list(bases), 30, 0.5)
    assert tripped.value.reason == guards.GUARD_PROTECTED_SHRANK
    with pytest.raises(guards.GuardTripped) as empty:
        guards.check_protection([], None, 0.5)
    assert empty.value.reason == guards.GUARD_PROTECTED_EMPTY


def test_a_line_naming_a_directory_above_a_protected_base_is_never_planned(tmp_path):
    """Issue 23: any dump line may name a directory (a WebDAV DELETE of a collection is recursive). A line that
    is a protected base or an ancestor of one, at any depth, is protected; one above an excluded prefix is
    excluded; a sibling with a longer name is not."""
    config = permissive()
    config.planner.exclude = [f"{BASE}/logs/keep"]
    lines = [f"{BASE}/000".encode(),  # the base lies below this line
             f"{BASE}/000/380".encode(),  # ... and below this one
             f"{BASE}/000/380/123".encode(),  # the base itself
             f"{BASE}/000/3801".encode(),  # not an ancestor: a longer name
             f"{BASE}/logs".encode(),  # above the excluded prefix
             f"{BASE}/000/380/124/a.root".encode()]
    plan = run_plan(tmp_path, lines, [f"{BASE}/000/380/123"], config=config, per_chunk=2)
    assert sorted(planned_lfns(tmp_path)) == sorted([lines[3], lines[5]])
    assert (plan.files_protected, plan.files_excluded) == (3, 1)


def test_job_bytes_are_written_whole_after_a_short_write(tmp_path, monkeypatch):
    """A job's parts go out in few calls (writev); a call that writes less than asked (a signal) is finished,
    also when the parts are more than one call takes."""
    real = planner.os.writev
    monkeypatch.setattr(planner, "_IOV_MAX", 3)
    monkeypatch.setattr(planner.os, "writev", lambda fd, parts: real(fd, [bytes(b"".join(parts)[:5])]))
    parts = [b"/store/unmerged/a/%d.root\n" % i for i in range(8)]
    fd = planner.os.open(tmp_path / "job", planner.os.O_WRONLY | planner.os.O_CREAT)
    try:
        planner._write_all(fd, parts)
    finally:
        planner.os.close(fd)
    assert (tmp_path / "job").read_bytes() == b"".join(parts)
