"""What the operator sees of a run: dry run ends `dry_run_done` (never clean) and real mode deletes the same
generation; `run --wait` ends settled; job records name the batch system and keep its exit code; a cycle's
failures are on the cycle document even when it fails before any RSE; daily history is kept."""
from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from pymongo.database import Database

from MSUnmerged.jobs.local import LocalBackend
from MSUnmerged.jobs.router import RoutingBackend
from MSUnmerged.ledger import Ledger
from MSUnmerged.ledger.history import FAILURE_SOURCES
from MSUnmerged.ledger.cycles import CYCLES_META
from MSUnmerged.present import shares, shares_label
from MSUnmerged.sources.errors import SourceError
from MSUnmerged.sources.offline import RSES_FILE, STATS_FILE
from service_kit import files_left, make_site, write_sources
from test_service_run import RSE, make_service

pytestmark = pytest.mark.integration


def test_dry_run_is_dry_run_done_then_real_mode_deletes_the_same_generation(tmp_path: Path,
                                                                           mongo_db: Database) -> None:
    src = write_sources(tmp_path / "src", [RSE], files=600)
    svc = make_service(tmp_path, mongo_db, src, dry_run=True)
    local = svc.runner.jobs.backend
    svc.runner.jobs.backend = RoutingBackend(svc.config, lambda rse: rse, factory=lambda kind, site: local)
    before = files_left(tmp_path / "storage" / RSE)

    first = svc.runner.run_once(RSE, wait_s=60)
    doc = svc.ledger.base.rse(RSE)
    c = doc["counters"]
    # Every job was collected within --wait: the RSE is settled, not `running`, and says it was a dry run.
    assert (first.state, doc["state"], doc["reason"]) == ("dry_run_done", "dry_run_done", "dry_run")
    assert c["would_delete"] == c["to_delete"] > 0 and c["deleted"] == 0
    assert shares(c)["deleted"] == 0 and shares_label(c) == "100% would delete"  # not a full bar of deletions
    assert files_left(tmp_path / "storage" / RSE) == before  # nothing deleted
    jobs = list(mongo_db.jobs.find({"rse": RSE}))
    assert {j["backend"] for j in jobs} == {"local"}  # the batch system, not the router
    assert {j["exit_code"] for j in jobs} == {0} and {j["worker_exit_code"] for j in jobs} == {0}
    generation = doc["generation"]

    again = svc.runner.run_once(RSE)  # still dry run: nothing to do
    assert (again.action, again.state) == ("finish", "dry_run_done")

    svc.config.service.dry_run = False
    real = svc.runner.run_once(RSE, wait_s=60)
    doc = svc.ledger.base.rse(RSE)
    assert (real.action, real.generation, real.submitted > 0) == ("resume", generation, True)
    assert (doc["state"], doc["generation"], len(doc["generations"])) == ("clean", generation, 1)
    assert doc["counters"]["deleted"] == c["to_delete"] and doc["counters"]["would_delete"] == 0
    deleted = {f["lfn"] for f in Ledger(mongo_db).reads.file_records(RSE, state="deleted")}
    assert files_left(tmp_path / "storage" / RSE) == before - deleted
    days = Ledger(mongo_db).history.rse_days(RSE)
    assert sum(d["deleted"] for d in days) == len(deleted)
    assert sum(d["would_delete"] for d in days) == c["to_delete"]  # the dry run's findings stay in history
    svc.stop()


def test_preflight_refusal_refreshes_the_counters(tmp_path: Path, mongo_db: Database) -> None:
    src = write_sources(tmp_path / "src", [RSE], files=200)
    svc = make_service(tmp_path, mongo_db, src)
    svc.runner.jobs.backend = LocalBackend(svc.config, tmp_path / "batch", python="/nonexistent/python3")
    result = svc.runner.run_once(RSE)
    doc = svc.ledger.base.rse(RSE)
    assert (result.reason, result.source, doc["state"]) == ("backend_unreachable", "backend", "failed")
    assert doc["counters"]["to_delete"] > 0 and doc["counters"]["pending"] == doc["counters"]["to_delete"]


def test_a_cycle_failing_before_any_rse_is_recorded_with_its_source(tmp_path: Path, mongo_db: Database) -> None:
    src = write_sources(tmp_path / "src", [RSE], files=100)
    svc = make_service(tmp_path, mongo_db, src, interval_s=60, alert_after_cycles=2)
    make_site(tmp_path, src, RSE, svc.config)
    (src / RSES_FILE).write_text("<html>Rucio is down</html>")  # what a broken front end answers
    with pytest.raises(SourceError):
        svc.cycle(slot=1)
    view = Ledger(mongo_db).view()
    health = view.health(svc.config.service.stale_after_s)
    last = health["last_cycle"]
    assert last["ok"] is False and last["dry_run"] is False and last["rses"] == []
    assert [(f["source"], f["reason"]) for f in last["failures"]] == [("rucio", "rucio_bad_content")]
    # Rucio failed; ConMon, WMStats and the batch system were never called: unknown, not "up".
    assert health["sources"] == {"rucio": 0, "ledger": 1, "internal": 1}
    # A new ledger honours the alert's delay (2 intervals = 120 s), counted from its first cycle.
    assert health["last_good_cycle_at"] is None and health["never_good"] is True and health["alert"] == ""
    assert 0 <= health["last_good_age_s"] < 60
    mongo_db.meta.update_one({"_id": "cycles"}, {"$inc": {"first_started": -200}})  # as if it started 200 s ago
    health = view.health(svc.config.service.stale_after_s)
    assert "no polling cycle succeeded since the first cycle 3 min ago" in health["alert"]
    assert "rucio_bad_content" in health["alert"] and 200 <= health["last_good_age_s"] < 260
    assert view.failure_totals() == {("rucio", "rucio_bad_content"): 1}

    (src / RSES_FILE).write_text(f'["{RSE}"]')
    (src / STATS_FILE).unlink()  # now ConMon fails: every RSE fails with its reason, the cycle says so
    svc.cycle(slot=2)
    last = view.health(svc.config.service.stale_after_s)["last_cycle"]
    assert [(f["source"], f["reason"], f["rse"]) for f in last["failures"]] == [("conmon", "conmon_http_status", RSE)]

    (src / RSES_FILE).write_text("[]")  # a cycle with nothing to do and nothing failing is a good one
    svc.cycle(slot=3)
    health = view.health(svc.config.service.stale_after_s)
    assert health["last_cycle"]["ok"] is True and health["alert"] == ""
    assert health["last_good_age_s"] is not None and health["last_good_age_s"] < 60
    assert view.failure_totals() == {("rucio", "rucio_bad_content"): 1, ("conmon", "conmon_http_status"): 1}
    svc.stop()


def test_alert_when_the_last_good_cycle_is_too_old(mongo_db: Database) -> None:
    ledger = Ledger(mongo_db)
    cid = ledger.cycles.start_cycle("old", 1, [])
    ledger.cycles.end_cycle(cid)
    # Ended two hours ago: end_cycle keeps the end on the cycle and on the cycles' meta document (health reads it
    # there).
    ended = time.time() - 7200
    mongo_db.cycles.update_one({"_id": cid}, {"$set": {"finished": ended}})
    mongo_db.meta.update_one({"_id": CYCLES_META}, {"$set": {"last_good.finished": ended}})
    failing = ledger.cycles.start_cycle("now", 2, [])
    ledger.cycles.end_cycle(failing, failures=[{"source": "ledger", "reason": "ledger_unavailable", "detail": "",
                                                "rse": ""}])
    health = Ledger(mongo_db).view().health(3600)
    assert 7100 < health["last_good_age_s"] < 7300 and "for 120 min" in health["alert"]
    assert "ledger_unavailable" in health["alert"] and health["sources"]["ledger"] == 0
    assert Ledger(mongo_db).view().health(3 * 3600)["alert"] == ""


def test_serve_records_a_cycle_that_broke_on_a_bug(tmp_path: Path, mongo_db: Database) -> None:
    src = write_sources(tmp_path / "src", [RSE], files=100)
    svc = make_service(tmp_path, mongo_db, src, interval_s=1)

    def broken() -> list[str]:
        raise RuntimeError("a bug in listing the RSEs")

    svc.runner.my_rses = broken  # type: ignore[method-assign]
    loop = threading.Thread(target=svc.serve)
    loop.start()
    try:
        deadline = time.monotonic() + 30
        while mongo_db.cycles.count_documents({"ok": False}) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        svc.stop()
        loop.join(30)
    assert not loop.is_alive()
    assert mongo_db.cycles.count_documents({"ok": False}) >= 2  # the loop went on after the bug
    doc = mongo_db.cycles.find_one({"ok": False})
    assert [(f["source"], f["reason"]) for f in doc["failures"]] == [("internal", "internal_error")]
    assert "a bug in listing the RSEs" in doc["failures"][0]["detail"]


def test_a_good_cycle_records_the_sources_that_answered(tmp_path: Path, mongo_db: Database) -> None:
    """source_up is 1 for the sources a cycle heard from: Rucio (its RSEs), ConMon (stats, dump), WMStats (the
    protected list), the batch system (jobs submitted), the ledger."""
    src = write_sources(tmp_path / "src", [RSE], files=100)
    svc = make_service(tmp_path, mongo_db, src, interval_s=60)
    make_site(tmp_path, src, RSE, svc.config)
    (result,) = svc.cycle(slot=1).values()
    assert result.submitted > 0, result
    health = Ledger(mongo_db).view().health(svc.config.service.stale_after_s)
    assert health["last_cycle"]["answered"] == ["backend", "conmon", "internal", "ledger", "rucio", "wmstats"]
    # The state folder's disk has a sample only when a run failed on it (state_disk_full; its free space is a gauge).
    assert health["sources"] == {s: 1 for s in FAILURE_SOURCES if s != "disk"}
