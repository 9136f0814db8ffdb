"""Property tests: the planner against a naive reference over random trees and protected sets."""
from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from MSUnmerged import lfn, planlines, planner, seal
from planner_kit import HOSTILE_LINES, permissive, planned_lfns, removable_dirs, run_plan

NAMES = st.sampled_from(["a", "b", "ab", "a-v1", "a-v10", "000", "123", "x.root", "y.root"])
PATHS = st.lists(NAMES, min_size=1, max_size=6).map(lambda parts: "/store/unmerged/" + "/".join(parts))
BASES = st.lists(NAMES, min_size=0, max_size=5).map(
    lambda parts: "/store/unmerged/" + "/".join(parts)) | PATHS.map(lambda p: p + "/")


def covered(path: str, prefixes: list[str]) -> bool:
    for prefix in prefixes:
        p = prefix.rstrip("/")
        if path == p or path.startswith(p + "/"):
            return True
    return False


def holds(path: str, prefixes: list[str]) -> bool:
    """A prefix covers `path` or lies below it: any line may name a directory (issue 23)."""
    return covered(path, prefixes) or any(prefix.rstrip("/").startswith(path + "/") for prefix in prefixes)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(files=st.lists(PATHS, max_size=60), protected=st.lists(BASES, min_size=1, max_size=6),
       exclude=st.lists(BASES, max_size=2), per_chunk=st.integers(1, 9), per_job=st.integers(1, 7))
def test_planner_matches_reference(files, protected, exclude, per_chunk, per_job):
    # A path listed as a file and also used as a directory cannot exist on storage; keep the tree real.
    dirs_in_use = {f.rsplit("/", k)[0] for f in files for k in range(1, f.count("/"))}
    files = [f for f in files if f not in dirs_in_use]
    cfg = permissive()
    cfg.planner.exclude = exclude
    cfg.planner.files_per_job = per_job
    cfg.planner.dir_floor_depth = 4
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        plan = run_plan(out, [f.encode() for f in files], protected, cfg, per_chunk=per_chunk)
        got = [x.decode() for x in planned_lfns(out)]
        jobs_on_disk = sorted(p.name for p in (out / "jobs").iterdir())
        dirs = [d.decode() for d in removable_dirs(out)]

    expected = [f for f in dict.fromkeys(files) if not holds(f, protected) and not holds(f, exclude)]
    # Safety: nothing planned has a protected ancestor, equals a protected base or lies above one.
    assert not any(holds(f, protected) for f in got)
    # No over-protection: every valid, unprotected, non-excluded file is planned exactly once.
    assert sorted(got) == sorted(expected)
    # Counts add up.
    assert plan.files_total == len(files)
    assert plan.files_to_delete + plan.files_protected + plan.files_excluded + plan.invalid_total == len(files)
    assert plan.files_to_delete == len(got) and all(size <= per_job for size in plan.job_sizes)
    assert jobs_on_disk == plan.job_files  # no file created ahead and left unused
    # No removable directory has a protected base (or an excluded prefix) at or below it.
    for d in dirs:
        for base in protected + exclude:
            b = base.rstrip("/")
            assert not (b == d or b.startswith(d + "/") or d.startswith(b + "/")), (d, base)
        assert any(f.startswith(d + "/") for f in got)
    # Leaf first: a directory never comes before one of its descendants.
    for i, d in enumerate(dirs):
        assert not any(later.startswith(d + "/") for later in dirs[i + 1:])


def plan_output(out: Path) -> dict[str, object]:
    """Every file of a plan directory, without the timings and the seal entries that hold them."""
    files: dict[str, object] = {str(p.relative_to(out)): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    summary = json.loads(files.pop(seal.SUMMARY_NAME))
    files[seal.SUMMARY_NAME] = {k: v for k, v in summary.items() if k not in ("created", "seconds")}
    sealed = json.loads(files.pop(seal.SEAL_NAME))
    sealed["files"].pop(seal.SUMMARY_NAME)
    files[seal.SEAL_NAME] = {k: v for k, v in sealed.items() if k != "digest"}
    return files


@pytest.mark.skipif(planlines.COMPILED is None, reason="the C extension is not built here")
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(valid=st.lists(PATHS.map(str.encode), max_size=50), hostile=st.lists(HOSTILE_LINES, max_size=12), data=st.data(),
       protected=st.lists(BASES, min_size=1, max_size=4), per_job=st.integers(1, 9),
       max_length=st.sampled_from([300, 1024]), final_newline=st.booleans())
def test_compiled_and_pure_engines_write_the_same_plan(valid, hostile, data, protected, per_job, max_length,
                                                        final_newline):
    lines = data.draw(st.permutations(valid + hostile))
    dump = b"\n".join(lines) + (b"\n" if final_newline else b"")
    cuts = sorted(data.draw(st.lists(st.integers(0, len(dump)), max_size=6)))  # anywhere, mid-line too
    chunks = [dump[a:b] for a, b in zip([0] + cuts, cuts + [len(dump)])]
    cfg = permissive()
    cfg.planner.files_per_job = per_job
    cfg.planner.max_lfn_length = max_length
    cfg.planner.dir_floor_depth = 4
    outputs = []
    with tempfile.TemporaryDirectory() as tmp:
        for engine in (planlines.COMPILED, planlines.PURE):
            out = Path(tmp) / engine.name
            cfg.planner.engine = engine.name
            plan = planner.plan("T2_XX_Test", chunks, protected, cfg, out, require_scan=False)
            outputs.append(plan_output(out))
            seal.verify(out, max_length)  # the entries taken from the bytes written are those of the disk
            if plan.guard is None:  # every line is counted once
                assert (plan.files_to_delete + plan.files_protected + plan.files_excluded + plan.invalid_total
                        == plan.files_total)
            # Safety, whatever the engine: only canonical unprotected LFNs under /store/unmerged/.
            for f in planned_lfns(out):
                assert lfn.classify_line(f, max_length) == (f, None)
                assert not holds(f.decode(errors="surrogateescape"), protected)
    assert outputs[0] == outputs[1]
