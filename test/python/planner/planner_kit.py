"""Helpers shared by the planner tests: run a plan from lists and read its directory back."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Iterable, Optional

import pytest
from hypothesis import strategies as st

from MSUnmerged import lfn, planlines, planner
from MSUnmerged.config import Config


@pytest.fixture(params=[e.name for e in (planlines.COMPILED, planlines.PURE) if e is not None])
def each_engine(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> planlines.Engine:
    """The test runs once per planlines engine built here, whatever `planner.engine` says (a test
    module uses it with `pytestmark = pytest.mark.usefixtures(each_engine.__name__)`)."""
    chosen = planlines.engine(request.param)
    monkeypatch.setattr(planlines, "engine", lambda name: chosen)
    return chosen


def chunked(lines: Iterable[bytes], per_chunk: int = 7) -> list[bytes]:
    """Lines into chunks of whole lines, small so that runs cross chunk borders."""
    lines = list(lines)
    return [b"".join(x + b"\n" for x in lines[i:i + per_chunk]) for i in range(0, len(lines), per_chunk)]


def permissive() -> Config:
    """Default configuration except the deletable-fraction guard, which small test trees trip."""
    config = Config()
    config.guards.max_delete_fraction = 1.0
    return config


def run_plan(tmp: Path, lines: Iterable[bytes], protected: list[str], config: Optional[Config] = None,
             stats: Optional[dict] = None, per_chunk: int = 7, **kwargs) -> planner.Plan:
    return planner.plan("T2_XX_Test", chunked(lines, per_chunk), protected, config or permissive(), tmp,
                        stats=stats, require_scan=stats is not None, **kwargs)


def planned_lfns(out: Path) -> list[bytes]:
    """Every LFN in the plan's job files, in job order."""
    found = []
    for job in sorted((out / "jobs").iterdir()):
        found += job.read_bytes().split(b"\n")[:-1]
    return found


def removable_dirs(out: Path) -> list[bytes]:
    return (out / "dirs.txt").read_bytes().split(b"\n")[:-1]


def summary(out: Path) -> dict:
    return json.loads((out / "summary.json").read_text())


# Dump lines for property tests: path elements plain, or odd (no LFN may hold them, or only the
# line-by-line path accepts them: non-ASCII, names over 255 bytes).
PLAIN = st.sampled_from([b"a", b"b", b"v-v1", b"000", b"x.root", b"y.root", b"C" * 255, b"~!-+_="])
ODD = st.sampled_from([b"B" * 256, b".", b"..", b"", "é".encode(), b"a b", b"a\x00b", b"\xff\xfe", b"a\rb", b"\t",
                       b"\x7f"])
ELEMENTS = PLAIN | ODD


def paths(elements: st.SearchStrategy[bytes], root: bytes = lfn.UNMERGED, most: int = 6) -> st.SearchStrategy[bytes]:
    return st.lists(elements, min_size=1, max_size=most).map(lambda parts: root + b"/".join(parts))


# A plain LFN but for one odd element, in its directory or as its name.
ONE_ODD = st.tuples(paths(PLAIN, most=3), ODD, st.sampled_from([b"", b"/x.root", b"/a/y.root"])).map(
    lambda t: t[0] + b"/" + t[1] + t[2])
HOSTILE_LINES = st.one_of(
    paths(PLAIN), paths(PLAIN), ONE_ODD, ONE_ODD, paths(ELEMENTS), paths(ELEMENTS, b"/"),
    paths(ELEMENTS, b"/store/unmerged"),
    paths(PLAIN, b"/store/merged/"), paths(PLAIN, b"store/unmerged/"),
    paths(PLAIN).map(lambda p: p + b"/"), paths(PLAIN).map(lambda p: b" " + p + b"\r"),
    st.binary(max_size=40), st.just(b"/store/unmerged/" + b"c/" * 600 + b"f.root"), st.just(b""))
CLEAN_LINES = paths(PLAIN, most=3)  # at most 784 bytes
