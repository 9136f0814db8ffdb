"""A dump far larger than the memory it may use, streamed from the HTTP server through the planner."""
from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Iterator

import pytest

from MSUnmerged.config import AuthConfig, Config, ConMonConfig
from MSUnmerged.dumpreader import iter_chunks
from MSUnmerged.planner import plan
from MSUnmerged.sample import SampleSpec
from MSUnmerged.sources.conmon import ConMonClient
from servers.http_fakes import FakeCMSWeb

pytestmark = [pytest.mark.integration, pytest.mark.slow]
LINES = int(os.environ.get("MSUNMERGED_BIG_DUMP_LINES", "2000000"))
RSS_GROWTH_LIMIT = 200 * 1024 * 1024  # the default dump is 277 MiB of text; as a list of str ~500 MiB


class PeakRSS:
    """Samples this process's resident set size every 20 ms in a thread."""

    def __init__(self) -> None:
        self.page = os.sysconf("SC_PAGE_SIZE")
        self.base = self.peak = self.rss()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def rss(self) -> int:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * self.page

    def _run(self) -> None:
        while not self._stop.wait(0.02):
            self.peak = max(self.peak, self.rss())

    def __enter__(self) -> "PeakRSS":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


@pytest.fixture
def web() -> Iterator[FakeCMSWeb]:
    with FakeCMSWeb() as server:
        yield server


@pytest.mark.parametrize("fmt", ["raw", "text"])
def test_big_dump_streams_in_bounded_memory(web: FakeCMSWeb, tmp_path: Path, fmt: str) -> None:
    smp = web.add_generated_rse("T1_US_BIG_Disk", SampleSpec(files=LINES, seed=7))
    client = ConMonClient(ConMonConfig(url=web.conmon_url, format=fmt, read_timeout_s=60), AuthConfig())
    stats = client.stats("T1_US_BIG_Disk")
    t0 = time.monotonic()
    with PeakRSS() as mem, client.open_dump("T1_US_BIG_Disk") as stream:
        result = plan("T1_US_BIG_Disk", iter_chunks(stream), smp.protected, Config(), tmp_path / "plan", stats=stats)
    seconds = time.monotonic() - t0
    growth = mem.peak - mem.base
    print(f"\n{fmt}: {LINES} lines in {seconds:.1f} s = {LINES / seconds:,.0f} lines/s; "
          f"RSS {mem.base / 2**20:.0f} MiB -> peak {mem.peak / 2**20:.0f} MiB (+{growth / 2**20:.0f} MiB)")
    assert result.guard is None, result.guard_detail
    assert result.files_total == LINES  # every line arrived; the line-count guard agreed
    assert result.files_to_delete + result.files_protected + result.files_excluded + result.invalid_total == LINES
    assert growth < RSS_GROWTH_LIMIT
