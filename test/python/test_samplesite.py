"""The sample site's scan starts after its files' newest change, by the kernel's dating, whatever the process's clock
reads at that moment."""
from __future__ import annotations

import json
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from MSUnmerged import samplesite
from MSUnmerged.samplesite import fill_storage, newest_change, rescan
from MSUnmerged.sources.offline import STATS_FILE

RSE = "T2_XX_Sample"


def test_a_scan_starts_after_the_newest_change_of_its_sites_files(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: the scan started at the process's time.time() once the files were made. A clock reading a little
    behind the kernel's dating of the last files (two readings of the time, not one) gave a scan that started
    before them: the workers refused those files as modified_since_scan in every try, and the RSE ended
    done_with_errors (test_revalidation_removes_queued_jobs_with_newly_protected_files, once in CI)."""
    dump = tmp_path / "dump.txt"
    dump.write_text("".join(f"/store/unmerged/Era/P/AOD/p-v1/000/f{i}.root\n" for i in range(20)))
    storage = tmp_path / "storage"
    fill_storage(storage, dump)
    (tmp_path / STATS_FILE).write_text(json.dumps({RSE: {"status": "done", "start_time": 1.0, "end_time": 2.0}}))
    newest = newest_change(storage)
    clock = [newest - 0.05]  # the process's clock, 50 ms behind the files' dating

    def sleep(seconds: float) -> None:
        clock[0] += seconds
    monkeypatch.setattr(samplesite, "time", SimpleNamespace(time=lambda: clock[0], sleep=sleep,
                                                            monotonic=time.monotonic))
    rescan(tmp_path, RSE, storage)
    scan = json.loads((tmp_path / STATS_FILE).read_text())[RSE]
    assert newest < scan["start_time"] <= scan["end_time"]
