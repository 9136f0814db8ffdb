"""subset.first_outside (apply's re-derivation): the first line of a plan that is neither in the current plan nor
covered now, whatever the order of the lines, the way they fall into files and the read sizes."""
from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from MSUnmerged import planlines, subset

LINES = [f"/store/unmerged/E/P{d}/f{i}.root".encode() for d in range(4) for i in range(6)]
LONG = b"/store/unmerged/E/" + b"L" * 300 + b"/f.root"  # longer than a stretch compared after a difference


def write(folder: Path, name: str, lines: list[bytes], files: int) -> list[Path]:
    """`lines` in order over `files` files (some maybe empty)."""
    paths, step = [], max(1, -(-len(lines) // files))
    for n in range(files):
        path = folder / f"{name}-{n:03d}.txt"
        path.write_bytes(b"".join(line + b"\n" for line in lines[n * step:(n + 1) * step]))
        paths.append(path)
    return paths


def outside(candidates: list[bytes], allowed: list[bytes], exempt: set[bytes], files: tuple[int, int],
            tmp: Path) -> bytes | None:
    mine, theirs = write(tmp, "mine", candidates, files[0]), write(tmp, "theirs", allowed, files[1])
    return subset.first_outside(mine, theirs, tmp / "work", 3, exempt.__contains__, planlines.PURE, 1000)


@pytest.fixture(autouse=True)
def small_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    """Read sizes far below a file, so that stretches, chunks and files end anywhere in the lines."""
    monkeypatch.setattr(subset, "READ_BYTES", 97)
    monkeypatch.setattr(subset, "LOOK_BYTES", 16)
    monkeypatch.setattr(subset, "MATCH_BYTES", 200)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.sampled_from(LINES + [LONG]), unique=True, max_size=25), st.data())
def test_the_answer_is_the_set_difference(allowed: list[bytes], data: st.DataObject) -> None:
    candidates = data.draw(st.lists(st.sampled_from(LINES + [LONG]), unique=True, max_size=25))
    if data.draw(st.booleans()):  # mostly the same lines in the same order, as a re-derivation gives
        candidates = [line for line in allowed if data.draw(st.booleans())] + candidates[:2]
    exempt = set(data.draw(st.lists(st.sampled_from(LINES), max_size=5)))
    files = (data.draw(st.integers(1, 4)), data.draw(st.integers(1, 4)))
    with tempfile.TemporaryDirectory() as tmp:
        found = outside(candidates, allowed, exempt, files, Path(tmp))
        assert not (Path(tmp) / "work").exists()
    missing = set(candidates) - set(allowed) - exempt
    assert found in missing if missing else found is None


def test_in_order_with_lines_dropped_and_added(tmp_path: Path) -> None:
    """Lines the current plan no longer has (covered now) and lines only it has: found in one pass."""
    candidates = LINES[:10] + [LONG] + LINES[10:]
    allowed = LINES[:3] + LINES[5:9] + [b"/store/unmerged/E/New/a.root", LONG] + LINES[10:]
    mine, theirs = write(tmp_path, "mine", candidates, 3), write(tmp_path, "theirs", allowed, 2)
    assert subset._in_order(mine, theirs, {LINES[3], LINES[4], LINES[9]}.__contains__)
    assert not subset._in_order(mine, theirs, {LINES[3], LINES[4]}.__contains__)


def test_out_of_order_falls_back_to_partitions(tmp_path: Path) -> None:
    """The same lines in another order are not found in one pass, and are all found by partitions."""
    mine, theirs = write(tmp_path, "mine", LINES[::-1], 2), write(tmp_path, "theirs", LINES, 3)
    assert not subset._in_order(mine, theirs, set().__contains__)
    assert subset.first_outside(mine, theirs, tmp_path / "work", 3, set().__contains__, planlines.PURE, 1000) is None
    extra = write(tmp_path, "extra", LINES[::-1] + [b"/store/unmerged/E/X/x.root"], 2)
    assert subset.first_outside(extra, theirs, tmp_path / "work", 3, set().__contains__, planlines.PURE,
                                1000) == b"/store/unmerged/E/X/x.root"
