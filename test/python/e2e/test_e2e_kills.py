"""SIGKILL of the service at every step of a cycle (and in the middle of the ledger write), then a restart.

Each kill point has an RSE of its own; one service process per RSE runs run_once until the hook reaches
the step (its `occurrence`-th time: for reconciled/polled the second run, when jobs are in the batch
system), pauses, and is killed with SIGKILL. "recording" kills itself inside record_plan, once its first buckets
are written and before its jobs are (e2e_service_driver.kill_inside_recording). Then ONE restarted service (serve
mode) must bring every RSE to the same end state as a run without a kill, file by file, with no job submitted
twice and no file deleted by two jobs. The scenario runs once (`kills`, what it saw); each test asserts one
behaviour of it.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Iterator

import pytest

from e2e.e2e_checks_kit import RseSeen, batches_per_job, checked, deleted_twice, fate_counts, observe_rse
from e2e.e2e_layout_kit import DELETE, Layout, make_layout
from e2e.e2e_service_kit import ServiceProcess, wait_until
from e2e.e2e_world_kit import World, configure
from MSUnmerged.ledger import Ledger

pytestmark = [pytest.mark.integration, pytest.mark.slow]

# (name, step, occurrence); "recording" has no step: it is killed inside record_plan
KILL_POINTS = [
    ("reconciled", "reconciled", 2),
    ("polled", "polled", 2),
    ("planned", "planned", 1),
    ("recording", "", 0),
    ("recorded", "recorded", 1),
    ("intent", "intent", 1),
    ("submitted", "submitted", 1),
    ("marked", "marked", 1),
    ("collected", "collected", 1),
    ("counted", "counted", 1),
]


@dataclass
class KillsSeen:
    """What the scenario observed after the restarted service finished every killed RSE."""

    ends: list[RseSeen]
    deleted_twice: dict[str, int]
    batches: dict[str, set[str]]
    cut: dict[str, int]  # the recording RSE in the ledger when its service died: buckets, jobs, `recording` set


def kill_layouts(w: World) -> dict[str, Layout]:
    """An RSE per kill point, its files on storage and its scan published."""
    lays = {}
    for i, (name, *_rest) in enumerate(KILL_POINTS):
        site = "T2_XE_Alpha" if i % 2 == 0 else "T2_XE_Beta"
        # The mid-write kill gets a bigger dump: several directories' buckets.
        lay = make_layout(f"T2_XE_KILL_{name.upper()}", site, f"K{i}", datasets=6,
                          files=200 if name == "recording" else 12)
        w.add_rse(lay)
        w.create_files(lay)
        lays[name] = lay
    for lay in lays.values():
        w.publish(lay)
    configure(w)
    return lays


def kill_each(w: World, lays: dict[str, Layout]) -> None:
    """A service process per RSE, killed at its step (or killing itself while recording)."""
    procs = []
    for name, step, occurrence in KILL_POINTS:
        rse = lays[name].rse
        env = {"E2E_PAUSE": f"{step}:{rse}:{occurrence}"} if step else {"E2E_KILL_RECORDING": rse}
        procs.append((name, ServiceProcess(w, f"kill-{name}", "once", lays[name].rse, env=env)))
        time.sleep(0.5)  # each process builds the worker zipapp once; they share the state folder
    for name, proc in procs:
        if name == "recording":
            proc.wait_mark("armed", 240)
            proc.wait(60)
        else:
            proc.wait_mark("paused", 240)
            proc.kill()


@pytest.fixture(scope="module")
def kills(e2e_world: World) -> Iterator[KillsSeen]:
    """The scenario, run once: every RSE's service killed at its step, then one restarted service until every
    RSE is clean."""
    w = e2e_world
    lays = kill_layouts(w)
    kill_each(w, lays)
    db, rse = w.db(), lays["recording"].rse
    cut = {"buckets": db.buckets.count_documents({"rse": rse}), "jobs": db.jobs.count_documents({"rse": rse}),
           "recording": int("recording" in (db.rses.find_one({"_id": rse}) or {}))}
    partial = len(Ledger(db).reads.file_records(rse))
    planned = sum(1 for f in lays["recording"].fates.values() if f == DELETE)

    restarted = ServiceProcess(w, "kill-restart", "serve")
    try:
        wait_until("every killed RSE finished", lambda: all(
            w.rse_doc(lay.rse).get("state") == "clean" for lay in lays.values()), 420, proc=restarted)
        seen = KillsSeen([observe_rse(w, lay) for lay in lays.values()],
                         deleted_twice(w, "T2_XE_KILL_"),
                         batches_per_job(w, "T2_XE_KILL_"), cut)
    finally:
        restarted.stop()
    by_fate = fate_counts(*seen.ends)
    figures = {"kill_points": len(KILL_POINTS), "files_checked": sum(by_fate.values()), "by_fate": by_fate,
               "recording_kill_left_files": f"{partial} of {planned}", "recording_kill_left": cut,
               "condor_jobs": len(seen.batches)}
    (w.dir / "out" / "figures-kills.json").write_text(json.dumps(figures))
    yield seen


def test_no_file_is_lost_or_left_without_a_reason(kills: KillsSeen) -> None:
    tally = checked(*kills.ends)
    assert not tally.lost and not tally.unexplained, (tally.lost, tally.unexplained)


def test_no_file_is_deleted_by_two_jobs(kills: KillsSeen) -> None:
    assert not kills.deleted_twice, kills.deleted_twice


def test_no_job_is_submitted_twice(kills: KillsSeen) -> None:
    twice = {j: b for j, b in kills.batches.items() if len(b) > 1}
    assert not twice, f"jobs submitted twice: {twice}"


def test_the_recording_kill_lands_inside_the_ledger_write(kills: KillsSeen) -> None:
    """The kill the restart must recover from is a real mid-write: buckets written, no job, `recording` still set."""
    assert kills.cut["buckets"] > 0 and kills.cut["jobs"] == 0 and kills.cut["recording"] == 1, kills.cut
