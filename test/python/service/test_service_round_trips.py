"""The database round trips of one RSE's run, counted with pymongo's command monitoring on a real SecantusDB: a
small RSE's cost in a partition cycle is mostly these (issue 29), so reads that come back are caught here.
Counts only, never time."""
from __future__ import annotations

import json
import threading
import uuid
from collections import Counter
from pathlib import Path
from typing import Iterator

import pytest
from pymongo import MongoClient, monitoring
from pymongo.database import Database

from MSUnmerged.service import Service
from MSUnmerged.service.result import RunResult
from service_kit import STATS_FILE, write_sources
from test_service_run import RSE, make_service

pytestmark = [pytest.mark.integration, pytest.mark.slow]


class Commands(monitoring.CommandListener):
    """(command, collection) of each command sent by the run's own thread (not the lease heartbeat's)."""

    def __init__(self) -> None:
        self.counts: Counter[tuple[str, str]] = Counter()
        self.thread: object = None

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        if threading.current_thread() is self.thread:
            target = event.command.get(event.command_name)
            self.counts[(event.command_name, target if isinstance(target, str) else "")] += 1

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass

    def run_once(self, svc: Service) -> RunResult:
        """One run of RSE by this thread, its commands counted."""
        self.thread = threading.current_thread()
        try:
            return svc.runner.run_once(RSE)
        finally:
            self.thread = None


@pytest.fixture
def counted_db(mongo_url: str) -> Iterator[tuple[Database, Commands]]:
    commands = Commands()
    client: MongoClient = MongoClient(mongo_url, serverSelectionTimeoutMS=10000, event_listeners=[commands])
    name = f"t_{uuid.uuid4().hex[:12]}"
    try:
        yield client[name], commands
    finally:
        client.drop_database(name)
        client.close()


def test_a_new_small_rse_run_reads_its_document_three_times_and_counts_once(
        tmp_path: Path, counted_db: tuple[Database, Commands]) -> None:
    """A small RSE's first run (plan, record, one job submitted): its document is read once to decide, once by the
    slice release (whose entry the submission uses), once by the counters (the shrink guard's baseline, the
    recording's pruning and baseline use documents already read); its jobs are counted once, with the counters, its
    rows in one aggregation; it is written three times (the recording marked with its generation's entry, the
    recording finished with the baseline, the state with the counters); the room max_in_flight leaves is not read
    again (no job was live at the start); every step that guards the submission is still there (intent, lease
    check, submitted)."""
    db, commands = counted_db
    src = write_sources(tmp_path / "src", [RSE], files=300)
    svc = make_service(tmp_path, db, src)
    result = commands.run_once(svc)
    assert (result.action, result.submitted) == ("new_generation", 1)
    c = commands.counts
    assert c[("find", "rses")] == 3, c
    assert c[("aggregate", "jobs")] == 1, c  # jobs per state: with the counters, not again after them
    assert c[("aggregate", "files")] == 1, c  # rows per state and failed ones per class: one aggregation
    assert c[("update", "jobs")] == 2, c  # intent before the batch, then marked submitted
    assert c[("update", "leases")] == 2, c  # the lease checked before the submission, then released
    assert c[("find", "jobs")] == 3, c  # live jobs, those planned, the summaries
    assert c[("findAndModify", "rses")] + c[("update", "rses")] == 3, c  # 6 on main 0c2af26
    assert sum(c.values()) <= 24, c  # 35 before issue 29's fourth session, 28 after its first round
    doc = svc.ledger.base.rse(RSE)
    counts = doc["counters"]["jobs_by_state"]
    assert sum(counts.values()) == 1 and counts == {db.jobs.find_one({"rse": RSE})["state"]: 1}
    assert (doc["state"], doc["detail"]) == ("running", "1 jobs in the batch system") and doc["started"] >= doc["counted_at"] - 60
    assert "recording" not in doc and doc["protected_count"] == doc["generations"][0]["baseline_count"]
    svc.stop()


def test_a_skipped_rse_is_written_once(tmp_path: Path, counted_db: tuple[Database, Commands]) -> None:
    """An RSE skipped (here without a scan, never seen before): its state and its jobs per state are one write,
    which creates its document."""
    db, commands = counted_db
    src = write_sources(tmp_path / "src", [RSE], files=30)
    (src / STATS_FILE).write_text(json.dumps({}))
    svc = make_service(tmp_path, db, src)
    result = commands.run_once(svc)
    assert (result.action, result.reason) == ("skip", "scan_missing")
    c = commands.counts
    assert c[("update", "rses")] == 1 and c[("aggregate", "jobs")] == 1, c
    doc = svc.ledger.base.rse(RSE)
    assert (doc["state"], doc["reason"], doc["counters"]["jobs_by_state"]) == ("skipped", "scan_missing", {})
    assert doc["events"][-1]["reason"] == "scan_missing" and "created" in doc
    svc.stop()


def test_a_batch_of_jobs_is_marked_submitted_in_one_write(tmp_path: Path, counted_db: tuple[Database, Commands]) -> None:
    """Several jobs in one batch: their intent is one write and their batch ids one more, not one per job; each job
    is still recorded `submitting` before the batch and queued with its own batch id after it."""
    db, commands = counted_db
    src = write_sources(tmp_path / "src", [RSE], files=1200)
    svc = make_service(tmp_path, db, src)
    result = commands.run_once(svc)
    assert result.action == "new_generation" and 2 <= result.submitted <= svc.config.jobs.submit_batch
    assert commands.counts[("update", "jobs")] == 2, commands.counts
    jobs = list(db.jobs.find({"rse": RSE}))
    assert len(jobs) == result.submitted and len({j["batch_id"] for j in jobs}) == len(jobs)
    assert all(j["state"] != "submitting" and j["intent_at"] <= j["submitted_at"] for j in jobs)
    svc.stop()
