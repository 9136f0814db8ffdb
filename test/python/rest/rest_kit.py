"""Seeding for the REST tests, through the ledger's own write methods only (never hand-written documents)."""
from __future__ import annotations

import contextlib
import json
import logging
import time
from pathlib import Path
from typing import Any, Iterator, Sequence

import cherrypy
import pytest

from pymongo import MongoClient
from pymongo.database import Database

from MSUnmerged import planner, sample
from MSUnmerged.config import Config
from MSUnmerged.jobs.spec import ProtectedBases, make_job
from MSUnmerged.jobs.backend import JobState
from MSUnmerged.ledger import FileState, Ledger, retry
from MSUnmerged.rest import app as rest
from MSUnmerged.samplesite import DEMO_RSE, fill_storage, rescan, write_site
from MSUnmerged.seal import PlanReader
from MSUnmerged.sources.offline import DUMPS_DIR, RSES_FILE, dump_file


def seed_rse(db: Database, rse: str, work: Path, dump: list[str], protected: list[str],
             generation: float, done_jobs: int, outcome: Any, files_per_job: int = 500,
             state: str = "running", reason: str = "", dirs: Sequence[dict[str, Any]] = ()) -> dict[str, Any]:
    """Plan `dump` against the `protected` bases, record it, submit every job, report `outcome(i, lfn)`
    (a ledger outcome dict, or None to leave the file unreported) for the files of the first `done_jobs`
    jobs and close them (the first one also reporting the directory outcomes `dirs`), leave the rest
    running; then state and counters. Returns what was written."""
    config = Config()
    config.planner.files_per_job = files_per_job
    stats = {"status": "done", "start_time": generation - 600, "end_time": generation, "files": len(dump)}
    plan_dir = work / rse.replace("/", "_")
    plan = planner.plan(rse, [("\n".join(dump) + "\n").encode()], protected, config, plan_dir, stats=stats)
    assert not plan.guard, plan.guard_detail
    ledger = Ledger(db)
    ledger.ensure_indexes()
    ledger.plans.record_plan(PlanReader(plan_dir), plan, generation)
    job_ids = [j["_id"] for j in ledger.base.jobs_in(rse, [JobState.PLANNED], generation)]
    bases = ProtectedBases(protected)
    jobs = [make_job(jid, rse, rse, ledger.rounds.job_lfns(jid), set(), bases, config, generation)
            for jid in job_ids]
    ledger.rounds.record_job_intent(jobs, "local")
    outcomes: dict[str, dict[str, Any]] = {}
    i = 0
    for n, job in enumerate(jobs):
        ledger.rounds.mark_submitted(job.job_id, f"local:{n}")
        if n >= done_jobs:
            ledger.rounds.set_job_state(job.job_id, "running")
            continue
        reported = []
        for lfn in job.step.lfns:
            o = outcome(i, lfn)
            i += 1
            if o is not None:
                reported.append({"lfn": lfn, **o})
                outcomes[lfn] = o
        ledger.outcomes.record_outcomes(job.job_id, reported)
        ledger.outcomes.record_dirs(job.job_id, dirs if n == 0 else ())
        ledger.outcomes.close_job(job.job_id, "finished")
    ledger.base.set_rse_state(rse, state, reason, detail=f"{len(jobs) - done_jobs} jobs in the batch system")
    counters = ledger.counters.refresh_counters(rse)
    return {"plan": plan, "jobs": job_ids, "outcomes": outcomes, "counters": counters,
            "failed": sorted(lfn for lfn, o in outcomes.items() if o["state"] == FileState.FAILED)}


def record_cycle(db: Database, rse: str, result: dict[str, Any]) -> str:
    """One finished polling cycle, as the service records it."""
    ledger = Ledger(db)
    cid = ledger.cycles.start_cycle("rest-test", int(time.time() // 3600), [rse])
    ledger.cycles.record_cycle_result(cid, rse, result)
    ledger.cycles.end_cycle(cid, unfinished=[])
    return cid


def offline_site(work: Path) -> tuple[Path, Path, Path]:
    """OfflineSources folder (stats, protected list, dump) of the sample RSE, its storage filled with the
    dump's files, and its SITECONFIG_PATH; returns (sources, storage, siteconf). The RSE is the instance's
    only RSE (rses.json): keep it out of a polling loop with planner.skip_rses."""
    sources = work / "sources"
    inputs = sample.write_sample_inputs(sources, DEMO_RSE, sample.SampleSpec(files=600, files_per_block=10,
                                                                              blocks_per_dataset=4))
    (sources / DUMPS_DIR).mkdir()
    dump = inputs["dump"].rename(dump_file(sources, DEMO_RSE))
    (sources / RSES_FILE).write_text(json.dumps([DEMO_RSE]))
    storage = work / "storage"
    fill_storage(storage, dump)
    rescan(sources, DEMO_RSE, storage)  # the scan starts after the site's files are made, as a real one would
    return sources, storage, write_site(work, storage)


def mounted(rest_app: Any, db: Database, base: str) -> Iterator[str]:
    """A fixture's body: the app mounted again at `base` on the session's server, over `db`; yields its URL, unmounts
    after."""
    config = Config()
    config.rest.base = base
    rest.mount(config, Ledger(db).view())
    try:
        yield rest_app.url.rsplit(rest_app.config.rest.base, 1)[0] + base
    finally:
        del cherrypy.tree.apps[base]


SELECTION_LOG = "pymongo.serverSelection"  # pymongo's server selection events (the drivers' logging spec)


@contextlib.contextmanager
def ledger_logged(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    """caplog gets the ledger's retries and pymongo's server selections, for `assert_cut_by_the_deadline`."""
    with caplog.at_level(logging.WARNING, retry.log.name), caplog.at_level(logging.DEBUG, SELECTION_LOG):
        yield


def assert_cut_by_the_deadline(caplog: pytest.LogCaptureFixture, away: MongoClient, timeout_s: float) -> None:
    """The request's ledger calls ended at its deadline (ledger.retry.deadline), whatever the time they took: no call
    ran out of its attempts (no retry whose backoff ends past the deadline; else all 6), and each server selection
    of the `away` client was given at most `timeout_s` (pymongo.timeout; else the client's 2 s)."""
    retries = [(r.args[2], r.args[3]) for r in caplog.records if r.name == retry.log.name]  # (attempt n, of N)
    assert all(n < last - 1 for n, last in retries), retries  # the retry after attempt N-1 never announced
    (host, port), = away.topology_description.server_descriptions()  # its selections name it, others' do not
    selections = [json.loads(r.getMessage()) for r in caplog.records
                  if r.name == SELECTION_LOG and f"({host!r}, {port})" in r.getMessage()]
    given_ms = [s["remainingTimeMS"] for s in selections if "remainingTimeMS" in s]
    assert given_ms and max(given_ms) <= timeout_s * 1000, given_ms
