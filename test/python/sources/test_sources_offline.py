"""OfflineSources reads the directory its writers (the demo, the sample generator) lay out with its own names."""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from MSUnmerged import sample
from MSUnmerged.cli.demo import write_sources
from MSUnmerged.samplesite import DEMO_RSE
from MSUnmerged.sources.errors import BAD_CONTENT, HTTP_STATUS, NO_MATCH, SourceError
from MSUnmerged.sources.offline import (DUMPS_DIR, PROTECTED_FILE, RSE_ATTRIBUTES_FILE, RSES_FILE, STATS_FILE,
                                        OfflineSources, dump_file)


def test_the_demo_writes_what_offline_sources_read(tmp_path: Path) -> None:
    directory = write_sources(tmp_path / "sources", 200)
    sources = OfflineSources(directory)
    assert sources.rses() == [DEMO_RSE] and sources.stats()[DEMO_RSE]["files"] == 200
    with sources.open_dump(DEMO_RSE) as fh:
        lines = fh.read().split()
    assert len(lines) == 200 and all(line.startswith(b"/store/unmerged/") for line in lines)
    assert sources.protected() and all(p.startswith("/store/unmerged/") for p in sources.protected())
    assert sorted(p.name for p in directory.iterdir()) == sorted([PROTECTED_FILE, STATS_FILE, DUMPS_DIR])


def test_sample_inputs_are_named_as_offline_sources_read_them(tmp_path: Path) -> None:
    inputs = sample.write_sample_inputs(tmp_path, "T2_XX_Gz", sample.SampleSpec(files=50), compress=True)
    dump = dump_file(tmp_path, "T2_XX_Gz", ".gz")
    dump.parent.mkdir()
    inputs["dump"].rename(dump)
    sources = OfflineSources(tmp_path)
    with sources.open_dump("T2_XX_Gz") as fh:
        assert len(gzip.decompress(fh.read()).split()) == 50
    assert sources.rses() == ["T2_XX_Gz"]  # from the stats, no rses file
    assert sources.protected() == json.loads(inputs["protected"].read_text())["result"]


def test_optional_files_and_errors_name_the_file(tmp_path: Path) -> None:
    sources = OfflineSources(tmp_path)
    with pytest.raises(SourceError) as err:
        sources.stats()
    assert err.value.kind == HTTP_STATUS and STATS_FILE in str(err.value)
    assert sources.rse_attributes("T2_XX_A") == {}
    (tmp_path / RSE_ATTRIBUTES_FILE).write_text(json.dumps({"T2_XX_A": {"site": "T2_XX"}}))
    (tmp_path / RSES_FILE).write_text(json.dumps(["T2_XX_B", "T2_XX_A"]))
    assert sources.rse_attributes("T2_XX_A") == {"site": "T2_XX"} and sources.rses() == ["T2_XX_A", "T2_XX_B"]
    (tmp_path / PROTECTED_FILE).write_text(json.dumps({"result": [1]}))
    with pytest.raises(SourceError) as err:
        sources.protected()
    assert err.value.kind == BAD_CONTENT and PROTECTED_FILE in str(err.value)
    with pytest.raises(SourceError) as err:
        sources.open_dump("T2_XX_A")
    assert err.value.kind == NO_MATCH


def test_the_protected_list_is_read_each_time_and_parsed_again_only_when_it_changed(tmp_path: Path) -> None:
    """Every call reads the file: a list rewritten at once, to the same size, is answered (never the last one);
    the same bytes give the same strings again (a cycle's RSEs share their preparation), in a list of the
    caller's own."""
    sources = OfflineSources(tmp_path)
    path = tmp_path / PROTECTED_FILE
    path.write_text(json.dumps({"result": ["/store/unmerged/a/1", "/store/unmerged/a/2"]}))
    first = sources.protected()
    first.append("/store/unmerged/mine")  # the caller's list: the next answer is not changed by it
    again = sources.protected()
    assert again == ["/store/unmerged/a/1", "/store/unmerged/a/2"]
    assert all(x is y for x, y in zip(first, again))  # not parsed again
    path.write_text(json.dumps({"result": ["/store/unmerged/a/1", "/store/unmerged/b/2"]}))  # same size
    assert sources.protected() == ["/store/unmerged/a/1", "/store/unmerged/b/2"]
    path.write_text(json.dumps({"result": ["/store/unmerged/a/1", 2]}))
    with pytest.raises(SourceError) as err:
        sources.protected()
    assert err.value.kind == BAD_CONTENT
    path.unlink()
    with pytest.raises(SourceError) as err:
        sources.protected()
    assert err.value.kind == HTTP_STATUS
