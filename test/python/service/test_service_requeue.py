"""A job planned again (its batch system gave up before it started, a revalidation removed it, its worker refused
a too-old protected list) after a newer dump's plan was recorded ends superseded: only the current generation is
ever submitted, so planned it would wait for ever. Also when the newer plan is recorded at the same moment. On a
real SecantusDB, with a batch system that gives up on every job."""
from __future__ import annotations

from pathlib import Path
from typing import Callable, Mapping, Optional

import pytest
from pymongo.database import Database

from MSUnmerged.config import Config
from MSUnmerged.jobs.backend import JobState, JobStatus
from MSUnmerged.ledger import Ledger, job_id
from MSUnmerged.seal import PlanReader
from MSUnmerged.service.jobkeeper import JobKeeper
from ledger.test_ledger_job_view import GEN, RSE, make_plan, submit

pytestmark = pytest.mark.integration


class GaveUp:
    """A batch system that gave up on every job before it started (no report)."""

    name = "local"

    def poll(self, batch_ids: Mapping[str, str]) -> dict[str, JobStatus]:
        return {j: JobStatus(j, JobState.FAILED, b, "removed while idle", started=False) for j, b in batch_ids.items()}

    def fetch_report(self, job_id_: str, batch_id: str, dest: Path) -> Optional[Path]:
        return None

    def remove(self, job_id_: str, batch_id: str, reason: str) -> None:
        pass


def keeper(tmp_path: Path, ledger: Ledger) -> JobKeeper:
    config = Config()
    config.service.state_dir = str(tmp_path / "state")
    return JobKeeper(config, ledger, None, None, GaveUp(), lambda step, rse: None)  # type: ignore[arg-type]


@pytest.mark.parametrize("newer", ["before", "meanwhile_before", "meanwhile_after"])
def test_a_job_of_an_older_generation_planned_again_ends_superseded(tmp_path: Path, mongo_db: Database,
                                                                    newer: str) -> None:
    """Before: it went back to planned and stayed so. `meanwhile_*`: the newer plan is recorded right before or
    right after the job is planned again (the moments a check of the generation could miss)."""
    ledger = Ledger(mongo_db, generations_kept=2)
    ledger.ensure_indexes()
    ledger.plans.record_plan(PlanReader(tmp_path / "a"), make_plan(tmp_path, "a"), GEN)
    waiting = [job_id(RSE, GEN, 1, n) for n in (1, 2)]
    submit(ledger, waiting)
    jobs = keeper(tmp_path, ledger)

    def record_newer() -> None:
        ledger.plans.record_plan(PlanReader(tmp_path / "b"), make_plan(tmp_path, "b", files=300), GEN + 100)

    if newer == "before":
        record_newer()
    else:
        requeue: Callable[[str, str], None] = ledger.rounds.requeue_job
        done: list[str] = []

        def racing(jid: str, reason: str) -> None:
            if newer == "meanwhile_before" and not done:
                record_newer()
            requeue(jid, reason)
            if newer == "meanwhile_after" and not done:
                record_newer()
            done.append(jid)
        ledger.rounds.requeue_job = racing  # type: ignore[method-assign]
    jobs.poll(RSE)
    docs = {d["_id"]: d for d in mongo_db.jobs.find({"_id": {"$in": waiting}})}
    assert {d["state"] for d in docs.values()} == {"superseded"}, docs
    assert all(d["requeued"] == 1 and "superseded by the plan of dump" in d["reason"] for d in docs.values())
    # Their files stay as superseding leaves them; the newer generation's jobs are planned, untouched.
    assert {r["state"] for jid in waiting for r in ledger.reads.file_records(job=jid)} == {"planned"}
    assert {d["state"] for d in mongo_db.jobs.find({"gen": GEN + 100})} == {"planned"}
    assert jobs.changed(RSE) and not jobs.changed(RSE)


def test_a_job_of_the_current_generation_planned_again_stays_planned(tmp_path: Path, mongo_db: Database) -> None:
    """The control: no newer plan, the job is planned again to be sent with the next submission."""
    ledger = Ledger(mongo_db, generations_kept=2)
    ledger.ensure_indexes()
    ledger.plans.record_plan(PlanReader(tmp_path / "a"), make_plan(tmp_path, "a"), GEN)
    waiting = [job_id(RSE, GEN, 1, n) for n in (1, 2)]
    submit(ledger, waiting)
    keeper(tmp_path, ledger).poll(RSE)
    assert {d["state"] for d in mongo_db.jobs.find({"_id": {"$in": waiting}})} == {"planned"}
