"""The compiled and the pure planlines engines give the same answers, on clean and hostile chunks."""
from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from MSUnmerged import planlines
from MSUnmerged.config import ConfigError, load_config
from planner_kit import CLEAN_LINES, HOSTILE_LINES

COMPILED = planlines.COMPILED
needs_compiled = pytest.mark.skipif(COMPILED is None, reason="the C extension is not built here "
                                    "(test_the_extension_is_built_where_a_compiler_exists fails then)")

def chunk_of(lines: list[bytes], final_newline: bool) -> bytes:
    return b"\n".join(lines) + (b"\n" if final_newline and lines else b"")


@needs_compiled
@settings(max_examples=1500, deadline=None)
@given(lines=st.lists(HOSTILE_LINES, max_size=12), final_newline=st.booleans(),
       max_length=st.sampled_from([64, 120, 300, 1024]))
def test_runs_agree_on_hostile_chunks(lines, final_newline, max_length):
    chunk = chunk_of(lines, final_newline)
    assert COMPILED.runs(chunk, max_length) == planlines.PURE.runs(chunk, max_length)


@needs_compiled
@settings(max_examples=500, deadline=None)
@given(lines=st.lists(CLEAN_LINES, min_size=1, max_size=30))
def test_clean_chunks_are_runs_of_their_lines(lines):
    chunk = chunk_of(lines, True)
    expected = planlines.split_runs(lines)
    assert COMPILED.runs(chunk, 1024) == planlines.PURE.runs(chunk, 1024) == expected
    assert b"".join(block for _, block, _ in expected) == chunk
    assert [count for _, _, count in expected] == [block.count(b"\n") for _, block, _ in expected]


@pytest.mark.parametrize("engine", [planlines.PURE, pytest.param(COMPILED, marks=needs_compiled)],
                         ids=lambda e: getattr(e, "name", "compiled"))
@pytest.mark.parametrize("line", [
    b"/store/unmerged/a/b/../c.root", b"/store/unmerged/a//c.root", b"/store/unmerged/a/./c.root",
    b"/store/unmerged/a/..", b"/store/unmerged/a/.", b"/store/unmerged/a/", b"/store/unmergedx/a/c.root",
    b"/store/merged/a/c.root", b"store/unmerged/a/c.root", b"/store/unmerged/a/b c.root",
    b"/store/unmerged/a/\xc3\xa9.root", b"/store/unmerged/a/" + b"n" * 256, b"/store/unmerged/a/c.root\r",
    b"/store/unmerged/a/c\x00.root", b"", b"/store/unmerged/" + b"d/" * 600 + b"f"])
def test_a_chunk_with_one_odd_line_goes_line_by_line(engine, line):
    chunk = b"/store/unmerged/a/ok.root\n" + line + b"\n"
    assert engine.runs(chunk, 1024) is None


@pytest.mark.parametrize("engine", [planlines.PURE, pytest.param(COMPILED, marks=needs_compiled)],
                         ids=lambda e: getattr(e, "name", "compiled"))
def test_runs_split_where_the_directory_changes(engine):
    chunk = (b"/store/unmerged/a/1.root\n/store/unmerged/a/2.root\n/store/unmerged/a/b/3.root\n"
             b"/store/unmerged/a/4.root\n/store/unmerged/5.root\n")
    assert engine.runs(chunk, 1024) == [
        (b"/store/unmerged/a", b"/store/unmerged/a/1.root\n/store/unmerged/a/2.root\n", 2),
        (b"/store/unmerged/a/b", b"/store/unmerged/a/b/3.root\n", 1),
        (b"/store/unmerged/a", b"/store/unmerged/a/4.root\n", 1),
        (b"/store/unmerged", b"/store/unmerged/5.root\n", 1)]
    assert engine.runs(chunk, 25) is None  # '/store/unmerged/a/b/3.root' is 26 bytes


@needs_compiled
@settings(max_examples=800, deadline=None)
@given(names=st.lists(st.sampled_from([b"a", b"b", b"ab", b"ba", b"x" * 70, b"y" * 70 + b"a", b"\xff", b"."]),
                      max_size=40), examples=st.integers(0, 6), prefix=st.sampled_from([b"/", b"/store/unmerged/a/"]))
def test_spilled_and_deduplicated_alike(names, examples, prefix):
    lines = [prefix + name for name in names]
    block = b"".join(line + b"\n" for line in lines)
    got = COMPILED.unique(prefix, COMPILED.spill(prefix, block), examples)
    assert got == planlines.PURE.unique(prefix, planlines.PURE.spill(prefix, block), examples)
    kept = list(dict.fromkeys(lines))
    assert got == (b"".join(line + b"\n" for line in kept), len(kept), len(lines) - len(kept),
                   [line for i, line in enumerate(lines) if line in lines[:i]][:examples])


@needs_compiled
@pytest.mark.parametrize("block", [b"/a/b/x\n/a/c/y\n", b"/a/b/x\n/a/b/\n", b"/a/b/x\n/a/b/c/y\n", b"/a/b\n",
                                   b"/a/bx/y\n", b"/a/b/x"])
def test_spilling_names_refuses_a_line_of_another_directory(block):
    """Only the prefix is left out of each line: a line it does not start would come back wrong."""
    with pytest.raises(ValueError, match="names"):
        COMPILED.spill(b"/a/b/", block)


@needs_compiled
def test_unique_refuses_a_partial_line():
    with pytest.raises(ValueError, match="whole lines"):
        COMPILED.unique(b"/", b"a\nb", 5)


def test_engines_by_name():
    assert planlines.engine("pure") is planlines.PURE
    assert planlines.engine("auto") is (COMPILED or planlines.PURE)
    with pytest.raises(ValueError, match="unknown planner engine 'fast'"):
        planlines.engine("fast")


def test_the_configuration_names_the_engine():
    with pytest.raises(ConfigError, match="planner.engine.*one of auto, compiled, pure"):
        load_config(env={"MSUNMERGED_PLANNER__ENGINE": "fast"})
    assert load_config(env={"MSUNMERGED_PLANNER__ENGINE": "pure"}).planner.engine == "pure"


def test_the_extension_is_built_where_a_compiler_exists():
    """CI builds the package with a compiler: the compiled engine must be there, not silently skipped."""
    compiler = (sysconfig.get_config_var("CC") or "cc").split()[0]
    if shutil.which(compiler) is None:
        pytest.skip(f"no C compiler ({compiler}) on this machine: the pure engine serves")
    assert COMPILED is not None, "MSUnmerged._planfast is not built: run `python3 setup.py build_ext --inplace`"
    assert planlines.engine("auto") is planlines.engine("compiled") is COMPILED


def test_planning_without_the_extension_uses_the_pure_engine(tmp_path):
    """An install where the extension failed to build imports and plans with the pure engine."""
    probe = ("import sys; sys.modules['MSUnmerged._planfast'] = None\n"
             "from MSUnmerged import planlines; from MSUnmerged.config import ConfigError, load_config\n"
             "print(planlines.engine(load_config(env={}).planner.engine).name)\n"
             "try:\n    load_config(env={'MSUNMERGED_PLANNER__ENGINE': 'compiled'})\n"
             "except ConfigError as exc:\n    print(exc)")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.split("\n")[:2] == ["pure", "configuration key 'planner.engine': compiled, but the C "
                                         "extension MSUnmerged._planfast is not built (no compiler at install?)"]


@needs_compiled
@settings(max_examples=400, deadline=None)
@given(lines=st.lists(st.sampled_from([b"", b"a", b"/store/unmerged/x/y.root", b"b" * 300]), max_size=20),
       final_newline=st.booleans(), n=st.integers(-1, 22))
def test_line_ends_agree(lines, final_newline, n):
    """Where a job file is cut: just after the n-th line; a block with fewer lines is refused by both engines."""
    block = chunk_of(lines, final_newline)
    whole = block.count(b"\n")
    if 0 <= n <= whole:
        end = COMPILED.line_end(block, n)
        assert end == planlines.PURE.line_end(block, n) == len(b"".join(line + b"\n" for line in lines[:n]))
        assert COMPILED.line_end(memoryview(block), n) == end
    else:
        for engine in (COMPILED, planlines.PURE):
            with pytest.raises(ValueError, match="fewer lines"):
                engine.line_end(block, n)
