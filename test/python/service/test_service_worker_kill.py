"""A worker killed mid-job: its partial report is collected and the files it did not report are re-planned."""
from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest
from pymongo.database import Database

from MSUnmerged.ledger import Ledger
from MSUnmerged.worker.ids import PID_NAME, REPORT_NAME
from service_kit import files_left, write_sources
from test_service_run import RSE, make_service

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def kill_when_reporting(job_dir: Path, timeout: float = 60.0) -> int:
    """SIGKILL the worker once its report holds file outcomes; returns how many it had written."""
    deadline = time.monotonic() + timeout
    report = job_dir / REPORT_NAME
    while time.monotonic() < deadline:
        if (job_dir / PID_NAME).exists() and report.exists():
            lines = report.read_bytes().count(b'"lfn"')
            if lines:
                pid = int((job_dir / PID_NAME).read_text())
                os.killpg(pid, signal.SIGKILL)  # the worker runs in a process group of its own
                return lines
        time.sleep(0.002)
    raise AssertionError(f"the worker in {job_dir} never reported")


def test_killed_worker_partial_report_then_replanned(tmp_path: Path, mongo_db: Database) -> None:
    src = write_sources(tmp_path / "src", [RSE], files=3_000)
    svc = make_service(tmp_path, mongo_db, src)
    svc.config.planner.files_per_job = 10_000  # one job, caught mid-way by the hook below
    storage = tmp_path / "storage" / RSE
    before = files_left(storage)

    killed_after: list[int] = []

    def kill_right_after_submit(step: str, rse: str) -> None:
        if step == "submitted" and not killed_after:
            (only,) = list(mongo_db.jobs.find({"rse": RSE}))
            killed_after.append(kill_when_reporting(svc.runner.jobs.backend.job_dir(only["_id"])))

    svc.runner.hook = kill_right_after_submit
    first = svc.runner.run_once(RSE)
    assert first.submitted == 1
    (job,) = list(mongo_db.jobs.find({"rse": RSE}))
    (reported,) = killed_after
    lines = [json.loads(x) for x in (svc.runner.jobs.backend.job_dir(job["_id"]) / REPORT_NAME).read_text().splitlines()]
    assert not any("summary" in x for x in lines), "the worker finished before it was killed: nothing tested"
    to_delete = job["files"]
    assert 0 < reported < to_delete

    # The next run collects the partial report, marks the rest unknown and submits them in a new round.
    second = svc.runner.run_once(RSE, wait_s=300)  # bounds a hang: under load the new round took ~95 s
    assert second.action == "resume" and second.submitted == 1
    assert second.collected == 2  # the killed job, then (waited for) the job of the new round
    killed = mongo_db.jobs.find_one({"_id": job["_id"]})
    assert killed["state"] in ("finished", "failed") and "cut off" in killed.get("reason", "")
    third = svc.runner.run_once(RSE)
    assert (third.action, third.state) == ("finish", "clean")

    # Every file has one record and an outcome; only the killed job's unreported last batch can be
    # "missing" (deleted, then the worker died before writing it down).
    files = Ledger(mongo_db).reads.file_records(RSE)
    assert len(files) == len({f["lfn"] for f in files}) == to_delete
    states = {f["state"] for f in files}
    assert states <= {"deleted", "missing"}
    assert sum(f["state"] == "missing" for f in files) <= 500
    # The storage holds exactly what the plan kept.
    assert files_left(storage) == before - {f["lfn"] for f in files}
    # Two jobs (the killed one, the re-planned rest), each submitted once.
    assert sorted(svc.runner.jobs.backend.submissions()) == sorted(j["_id"] for j in mongo_db.jobs.find({"rse": RSE}))
    assert len(svc.runner.jobs.backend.submissions()) == 2
