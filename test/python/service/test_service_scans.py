"""The cycle's ConMon `stats` read handed to a run (service/scans.py): used while fresh, its failure recorded by
the run as if it had read it itself, read again when older than service.stats_reuse_s; a run without one reads
itself."""
from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from pymongo.database import Database

from MSUnmerged.config import Config
from MSUnmerged.service.scans import StatsRead, scan_of
from MSUnmerged.sources.errors import TIMEOUT, SourceError
from MSUnmerged.sources.offline import STATS_FILE
from servers.http_fakes import FakeCMSWeb
from service_kit import ConMonStatsSources, write_sources
from test_service_loop import stats_reads
from test_service_run import RSE, make_service

pytestmark = pytest.mark.integration
REUSE_S = Config().service.stats_reuse_s


def test_a_fresh_read_is_used_and_a_stale_one_read_again(tmp_path: Path) -> None:
    src = write_sources(tmp_path / "src", [RSE], files=10)
    with FakeCMSWeb() as web:
        web.stats = json.loads((src / STATS_FILE).read_text())
        sources = ConMonStatsSources(src, web.conmon_url)
        read = StatsRead.read(sources)
        assert stats_reads(web) == 1 and read.error is None and read.fresh(REUSE_S)
        assert scan_of(sources, RSE, read, REUSE_S) == web.stats[RSE] and stats_reads(web) == 1
        web.stats[RSE] = {**web.stats[RSE], "files": 11}  # a new scan ended since
        stale = StatsRead(time.monotonic() - REUSE_S - 1, read.answer)
        assert not stale.fresh(REUSE_S)
        assert scan_of(sources, RSE, stale, REUSE_S)["files"] == 11 and stats_reads(web) == 2
        assert scan_of(sources, RSE, None, REUSE_S)["files"] == 11 and stats_reads(web) == 3  # a run by hand reads
        assert scan_of(sources, "T2_XX_NoScan", read, REUSE_S) is None


def test_a_failed_read_is_raised_to_each_run_as_its_own_error(tmp_path: Path) -> None:
    src = write_sources(tmp_path / "src", [RSE], files=10)
    with FakeCMSWeb() as web:
        web.fault("stats", delay_s=2.0)
        read = StatsRead.read(ConMonStatsSources(src, web.conmon_url, 0.3))
        assert stats_reads(web) == 1 and read.answer == {}
    assert isinstance(read.error, SourceError) and read.error.kind == TIMEOUT
    raised = []
    for _ in range(2):
        with pytest.raises(SourceError) as exc:
            read.scan(RSE)
        raised.append(exc.value)
    assert raised[0] is not raised[1] and raised[0] is not read.error
    assert all((e.kind, e.source, e.message) == (TIMEOUT, "conmon", read.error.message) for e in raised)


def test_a_run_uses_the_handed_read_or_reads_again_when_stale(tmp_path: Path, mongo_db: Database) -> None:
    src = write_sources(tmp_path / "src", [RSE], files=400)
    with FakeCMSWeb() as web:
        web.stats = json.loads((src / STATS_FILE).read_text())
        sources = ConMonStatsSources(src, web.conmon_url)
        svc = make_service(tmp_path, mongo_db, src, sources=sources)
        try:
            failed = StatsRead(time.monotonic(), error=SourceError(TIMEOUT, "stats: read timed out", "conmon"))
            first = svc.runner.run_once(RSE, stats=failed)
            assert stats_reads(web) == 0  # the handed failure, no read of its own
            assert (first.action, first.source, first.reason) == ("failed", "conmon", "conmon_timeout")
            assert svc.ledger.base.rse(RSE)["reason"] == "conmon_timeout"
            # service.stats_reuse_s as set, not the default: a read 31 s old is stale with 30 s (fresh with 300 s).
            svc.config.service.stats_reuse_s = 30.0
            stale = StatsRead(time.monotonic() - 31, error=failed.error)
            second = svc.runner.run_once(RSE, stats=stale)  # ConMon answers again: the run reads it and works
            assert stats_reads(web) == 1
            assert second.action == "new_generation" and second.submitted > 0
        finally:
            svc.stop()


class _Broken:
    """Sources whose `stats` fails with an error that is not a SourceError (a bug), then answers."""

    def __init__(self, answer: dict) -> None:
        self.answer, self.calls = answer, 0

    def stats(self) -> dict:
        self.calls += 1
        if self.calls == 1:
            raise KeyError("files")
        return self.answer


def test_an_unexpected_error_leaves_each_run_to_read_for_itself() -> None:
    sources = _Broken({RSE: {"files": 3}})
    read = StatsRead.read(sources)  # type: ignore[arg-type]
    assert read.error is None and not read.fresh(REUSE_S)
    assert scan_of(sources, RSE, read, REUSE_S) == {"files": 3} and sources.calls == 2  # type: ignore[arg-type]
