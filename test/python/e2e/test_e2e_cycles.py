"""The service over several cycles and RSEs on real servers, checked file by file against storage, ledger, REST.

Scenarios, all in one running service (serve mode: the polling loop + REST):
  T2_XE_ALPHA        fresh dump; later a new dump after the clean (new files + an already deleted one)
  T2_XE_ALPHA_REVAL  files that become protected after planning, while their jobs wait (held) at the site
  T2_XE_BETA         storage denies deletion (files and directories owned by root, the job runs as a user);
                     then the site fixes it and a new scan lists what is left: the partial clean is finished
  T2_XE_BETA_STALE   the scan is 30 days old: nothing is done, the reason is recorded
The scenario runs once (`cycles`, what it saw after each round of dumps); each test asserts one behaviour of it.
"""
from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from typing import Any, Iterator

import pytest

from e2e.e2e_checks_kit import RseSeen, batches_per_job, checked, deleted_twice, fate_counts, observe_rse
from e2e.e2e_layout_kit import ABSENT, DELETE, DENY, PROTECT, STALE, Layout, make_layout
from e2e.e2e_service_kit import ServiceProcess, rest_get, wait_until
from e2e.e2e_world_kit import World, configure
from servers.condor import JOB_UID

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@dataclass
class CyclesSeen:
    """What the scenario observed: every RSE after the first dumps (`first`) and after the second ones (`second`),
    by layout name (fresh, reval, denied, stale), their states then, and what REST and the pool said."""

    first: dict[str, RseSeen]
    states: dict[str, str]
    stale_generation: Any
    stale_info: tuple[int, Any]
    second: dict[str, RseSeen]
    deleted_twice: dict[str, int]
    batches: dict[str, set[str]]
    status_at_end: int


def state_of(world: World, rse: str) -> str:
    return world.rse_doc(rse).get("state", "")


def scenario_layouts(w: World) -> dict[str, Layout]:
    """The four RSEs, their files on storage and their scans published."""
    lays = {"fresh": make_layout("T2_XE_ALPHA", "T2_XE_Alpha", "A"),
            "reval": make_layout("T2_XE_ALPHA_REVAL", "T2_XE_Alpha", "R"),
            "denied": make_layout("T2_XE_BETA", "T2_XE_Beta", "B"),
            "stale": make_layout("T2_XE_BETA_STALE", "T2_XE_Beta", "S")}
    fresh, reval, denied, stale = lays.values()
    for lay in lays.values():
        w.add_rse(lay)
    denied.fates = {k: DENY if v == DELETE else v for k, v in denied.fates.items()}
    stale.fates = {k: STALE if v in (DELETE, PROTECT) else v for k, v in stale.fates.items()}
    for lay in (fresh, reval, stale):
        w.create_files(lay)
    w.create_files(denied, owner=0)  # the job user (uid 2000) may not unlink anything there
    for lay in (fresh, reval, denied):
        w.publish(lay)
    w.publish(stale, end_time=time.time() - 30 * 86400)
    configure(w)
    return lays


def protect_while_held(w: World, svc: ServiceProcess, reval: Layout) -> None:
    """Files become protected between plan and job start: the service sees the new list at its next cycles, then
    the site frees a slot for the held jobs."""
    svc.wait_mark(f"held-{reval.rse}", 180)
    newly = "/store/unmerged/Run2024R/Prim2/AOD/PromptReco-v3"
    reval.protected.append(newly)
    for lfn in reval.fates:
        if lfn.startswith(newly + "/"):
            reval.fates[lfn] = PROTECT
    w.refresh_protected()
    changed_at = time.time()
    wait_until("two cycles after the list changed", lambda: any(
        c.get("started", 0) > changed_at + 4 for c in w.db().cycles.find()), 60, proc=svc)
    w.condor("condor_release", "-constraint", f'regexp("^{reval.rse}:", MSUnmergedJobId)', check=False)


def second_dumps(w: World, svc: ServiceProcess, fresh: Layout, denied: Layout) -> None:
    """The site lets the job delete the denied files; a new dump after the partial clean (new files, and two files
    deleted since that the scan still lists)."""
    for dirpath, _, names in os.walk(w.storage(denied.rse)):
        os.chown(dirpath, JOB_UID, JOB_UID)
        for n in names:
            os.chown(os.path.join(dirpath, n), JOB_UID, JOB_UID)
    for lay, tag in ((denied, "B"), (fresh, "A")):
        already_gone = [lfn for lfn, f in lay.fates.items() if f == DELETE][:2]
        lay.fates = {lfn: (DELETE if f == DENY else f) for lfn, f in lay.fates.items()
                     if w.storage(lay.rse, lfn).exists()}
        for k in range(6):
            lay.fates[f"/store/unmerged/Run2024{tag}/Prim7/AOD/PromptReco-v8/000/381/000/new{k}.root"] = DELETE
        w.create_files(lay)
        for lfn in already_gone:  # the scan still lists two files deleted since: recorded as missing
            lay.fates[lfn] = ABSENT
        w.publish(lay, dump=sorted(lay.fates))
    wait_until("second dumps done", lambda: all(
        state_of(w, r.rse) == "clean" and w.rse_doc(r.rse).get("generation") == r.end_time
        for r in (fresh, denied)), 300, proc=svc)


@pytest.fixture(scope="module")
def cycles(e2e_world: World) -> Iterator[CyclesSeen]:
    """The scenario, run once in one service: the first dumps (one RSE's files protected while its jobs are held),
    then second dumps of two RSEs."""
    w = e2e_world
    lays = scenario_layouts(w)
    fresh, reval, denied, stale = lays.values()
    svc = ServiceProcess(w, "cycles", "serve", env={"E2E_HOLD_RSE": reval.rse, "E2E_CONDOR_ROOT": str(w.pool.root)})
    try:
        svc.wait_mark("serving", 60)
        protect_while_held(w, svc, reval)
        wait_until("stale RSE skipped", lambda: w.rse_doc(stale.rse).get("reason") == "scan_stale", 120, proc=svc)
        wait_until("first dumps done", lambda: all(state_of(w, r) in ("clean", "done_with_errors")
                                                   for r in (fresh.rse, reval.rse, denied.rse)), 420, proc=svc)
        first = {name: observe_rse(w, lay) for name, lay in lays.items()}
        states = {name: state_of(w, lay.rse) for name, lay in lays.items()}
        stale_generation = w.rse_doc(stale.rse).get("generation")
        stale_info = rest_get(w, f"data/info?rse={stale.rse}")
        second_dumps(w, svc, fresh, denied)
        second = {name: observe_rse(w, lay) for name, lay in lays.items()}
        seen = CyclesSeen(first, states, stale_generation, stale_info, second,
                          deleted_twice(w), batches_per_job(w),
                          rest_get(w, "data/status")[0])
    finally:
        svc.stop()
    by_fate = fate_counts(*first.values(), *second.values())
    (w.dir / "out" / "figures-cycles.json").write_text(json.dumps(
        {"files_checked": sum(by_fate.values()), "by_fate": by_fate, "condor_jobs": len(seen.batches)}))
    yield seen


def test_first_dumps_leave_no_file_without_a_reason(cycles: CyclesSeen) -> None:
    tally = checked(*cycles.first.values())
    assert not tally.unexplained, tally.unexplained


def test_a_fresh_dump_ends_clean(cycles: CyclesSeen) -> None:
    assert cycles.states["fresh"] == "clean"


def test_denied_deletions_end_done_with_errors_as_permission_denied(cycles: CyclesSeen) -> None:
    assert cycles.states["denied"] == "done_with_errors"
    denied_records = cycles.first["denied"].ledger
    classes = {r.get("error_class") for r in denied_records.values() if r["state"] in ("failed", "unknown")}
    assert any("permission_denied" in str(c) for c in classes), classes


def test_a_stale_scan_is_skipped_with_its_reason(cycles: CyclesSeen) -> None:
    assert cycles.states["stale"] == "skipped" and cycles.stale_generation is None
    status, info = cycles.stale_info
    assert status == 200 and info["result"][0]["rseData"][0]["reason"] == "scan_stale", info


def test_second_dumps_finish_the_partial_clean_losing_nothing(cycles: CyclesSeen) -> None:
    tally = checked(*cycles.first.values(), *cycles.second.values())
    assert not tally.lost, tally.lost
    assert not tally.unexplained, tally.unexplained


def test_no_file_is_deleted_twice(cycles: CyclesSeen) -> None:
    assert not cycles.deleted_twice, cycles.deleted_twice


def test_no_job_runs_twice(cycles: CyclesSeen) -> None:
    assert all(len(b) == 1 for b in cycles.batches.values()), {j: b for j, b in cycles.batches.items() if len(b) > 1}


def test_rest_answers_at_the_end(cycles: CyclesSeen) -> None:
    assert cycles.status_at_end == 200
