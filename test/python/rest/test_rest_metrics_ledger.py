"""/metrics against the ledger it reads, on a real SecantusDB: every per-RSE gauge equals the RSE's document (its
counters, state and time stamps), `msunmerged_jobs` equals the job documents, and the text is what
prometheus_client writes for the same families, byte for byte; scrapes follow the ledger's changes at once."""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Optional

import pytest
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from pymongo.database import Database

from MSUnmerged.config import Config
from MSUnmerged.ledger import Ledger
from MSUnmerged.rest import metrics
from MSUnmerged.rest.exposition import Families
from MSUnmerged.statemachine import RSEState
from rest_kit import seed_rse

pytestmark = pytest.mark.integration
DUMP = [f"/store/unmerged/Run3/Prim{i % 3}/RAW/v{i % 2}/f{i:05d}.root" for i in range(900)] + \
    [f"/store/unmerged/Run3/Kept/RAW/v1/f{i:05d}.root" for i in range(100)]
PROTECTED = ["/store/unmerged/Run3/Kept/RAW/v1"]
CLASSES = ("permission_denied", "timeout", 'odd "class"\\x')


def outcome(i: int, lfn: str) -> Optional[dict[str, Any]]:
    """Mostly deleted with a size, some failed in three classes, some missing, a few not reported."""
    if i % 40 == 39:
        return None
    if i % 10 < 6:
        return {"state": "deleted", "size": 1000 + i}
    if i % 10 < 9:
        return {"state": "failed", "error_class": CLASSES[i % 3], "error": "storage said no"}
    return {"state": "missing"}


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def per_rse(got: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, rse: str) -> dict[str, float]:
    """The samples of one family for one RSE, by their other label's value ("" when none)."""
    return {next((v for k, v in labels if k != "rse"), ""): value for (n, labels), value in got.items()
            if n == name and ("rse", rse) in labels}


@pytest.fixture()
def ledger(mongo_db: Database, tmp_path: Path) -> Ledger:
    """Three RSEs worked through the ledger's own write methods (one guarded), two cycles, one still running."""
    gen = time.time() - 7200  # the ConMon scan end_time of the recorded generation
    seed_rse(mongo_db, "T2_MT_Busy", tmp_path, DUMP, PROTECTED, gen, done_jobs=3, outcome=outcome,
             files_per_job=100)
    seed_rse(mongo_db, "T2_MT_Done", tmp_path, DUMP[:250] + DUMP[-50:], PROTECTED, gen, done_jobs=3, outcome=outcome,
             files_per_job=100, state="done_with_errors", reason="some files failed")
    seed_rse(mongo_db, "T1_MT_Guarded", tmp_path, DUMP[:150] + DUMP[-50:], PROTECTED, gen, done_jobs=1, outcome=outcome,
             files_per_job=100, state="guarded", reason="protected_list_shrank")
    led = Ledger(mongo_db)
    led.cycles.end_cycle(led.cycles.start_cycle("ms-unmer-t1", 1, ["T2_MT_Busy"]), failures=[
        {"source": "rucio", "reason": "rucio_http_status", "detail": "503", "rse": ""}])
    led.cycles.start_cycle("ms-unmer-t1", 2, ["T2_MT_Busy"])
    return led


def check_against_ledger(db: Database, text: str) -> None:
    got = samples(text)
    docs = list(db.rses.find())
    assert len(docs) == 3
    for doc in docs:
        rse, c = doc["_id"], doc["counters"]
        for family, key in (("msunmerged_files_deleted", "deleted"), ("msunmerged_files_to_delete", "to_delete"),
                            ("msunmerged_files_would_delete", "would_delete"), ("msunmerged_bytes_freed", "bytes_freed")):
            assert per_rse(got, family, rse) == {"": c[key]}, (family, rse)
        assert per_rse(got, "msunmerged_files_failed", rse) == c["failed_by_class"]
        assert per_rse(got, "msunmerged_jobs", rse) == c["jobs_by_state"]
        assert per_rse(got, "msunmerged_rse_state", rse) == {s: float(s == doc["state"]) for s in map(str, RSEState)}
        assert per_rse(got, "msunmerged_rse_updated_timestamp_seconds", rse) == {"": doc["updated"]}
        assert per_rse(got, "msunmerged_rse_progress_timestamp_seconds", rse) == {"": doc["progress_at"]}
        jobs: dict[str, int] = {}
        for j in db.jobs.find({"rse": rse}, {"state": 1}):
            jobs[j["state"]] = jobs.get(j["state"], 0) + 1
        assert per_rse(got, "msunmerged_jobs", rse) == jobs  # the counters are the job documents
    # The counters were not empty: the comparison could fail.
    assert sum(per_rse(got, "msunmerged_files_deleted", "T2_MT_Busy").values()) > 0
    assert set(per_rse(got, "msunmerged_files_failed", "T2_MT_Busy")) == set(CLASSES)
    assert got[("msunmerged_cycle_failures_total", (("reason", "rucio_http_status"), ("source", "rucio")))] == 1


def test_gauges_are_the_ledger_documents_and_prometheus_client_bytes(mongo_db: Database, ledger: Ledger) -> None:
    view, config = Ledger(mongo_db).view(), Config()
    text = metrics.render(view, config)
    check_against_ledger(mongo_db, text)
    parsed = list(text_string_to_metric_families(text))
    assert text == generate_latest(Families(*parsed)).decode()
    # Scrapes that follow changes: counters recounted after more outcomes, a state set, the running cycle ended.
    job = next(j["_id"] for j in mongo_db.jobs.find({"rse": "T2_MT_Busy", "state": "running"}))
    lfns = ledger.rounds.job_lfns(job)
    ledger.outcomes.record_outcomes(job, [{"lfn": lfn, "state": "deleted", "size": 7} for lfn in lfns])
    ledger.outcomes.close_job(job, "finished")
    ledger.base.set_rse_state("T2_MT_Done", "clean", "")
    ledger.counters.refresh_counters("T2_MT_Busy")
    ledger.counters.refresh_counters("T2_MT_Done")
    running = mongo_db.cycles.find_one({"finished": {"$exists": False}})["_id"]
    ledger.cycles.end_cycle(running)
    text = metrics.render(view, config)
    check_against_ledger(mongo_db, text)
    got = samples(text)
    assert got[("msunmerged_rse_state", (("rse", "T2_MT_Done"), ("state", "clean")))] == 1
    finished = mongo_db.cycles.find_one({"_id": running})["finished"]
    assert got[("msunmerged_cycle_last_end_timestamp_seconds", ())] == finished
