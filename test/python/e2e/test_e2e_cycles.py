"""The service over several cycles and RSEs on real servers, checked file by file against storage, ledger, REST.

Scenarios, all in one running service (serve mode: the polling loop + REST):
  T2_XE_ALPHA        fresh dump; later a new dump after the clean (new files + an already deleted one)
  T2_XE_ALPHA_REVAL  files that become protected after planning, while their jobs wait (held) at the site
  T2_XE_BETA         storage denies deletion (files and directories owned by root, the job runs as a user);
                     then the site fixes it and a new scan lists what is left: the partial clean is finished
  T2_XE_BETA_STALE   the scan is 30 days old: nothing is done, the reason is recorded
"""
from __future__ import annotations

import json
import os
import time

import pytest

from e2e.e2e_checks_kit import Tally, check_rse, deletions_per_lfn
from e2e.e2e_layout_kit import ABSENT, DELETE, DENY, PROTECT, STALE, make_layout
from e2e.e2e_service_kit import ServiceProcess, rest_get, wait_until
from e2e.e2e_world_kit import World, configure
from servers.condor import JOB_UID

pytestmark = [pytest.mark.integration, pytest.mark.slow]

FIGURES = {}


def state_of(world: World, rse: str) -> str:
    return world.rse_doc(rse).get("state", "")


def test_service_cycles_end_to_end(e2e_world: World) -> None:
    w = e2e_world
    fresh = make_layout("T2_XE_ALPHA", "T2_XE_Alpha", "A")
    reval = make_layout("T2_XE_ALPHA_REVAL", "T2_XE_Alpha", "R")
    denied = make_layout("T2_XE_BETA", "T2_XE_Beta", "B")
    stale = make_layout("T2_XE_BETA_STALE", "T2_XE_Beta", "S")
    for lay in (fresh, reval, denied, stale):
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

    svc = ServiceProcess(w, "cycles", "serve", env={"E2E_HOLD_RSE": reval.rse, "E2E_CONDOR_ROOT": str(w.pool.root)})
    try:
        svc.wait_mark("serving", 60)
        # --- files become protected between plan and job start -------------------------------------
        svc.wait_mark(f"held-{reval.rse}", 180)
        newly = "/store/unmerged/Run2024R/Prim2/AOD/PromptReco-v3"
        reval.protected.append(newly)
        for lfn in reval.fates:
            if lfn.startswith(newly + "/"):
                reval.fates[lfn] = PROTECT
        w.refresh_protected()
        changed_at = time.time()
        # The service sees the new list at its next cycles; then the site frees a slot for the held jobs.
        wait_until("two cycles after the list changed", lambda: any(
            c.get("started", 0) > changed_at + 4 for c in w.db().cycles.find()), 60, proc=svc)
        w.condor("condor_release", "-constraint", f'regexp("^{reval.rse}:", MSUnmergedJobId)', check=False)

        wait_until("stale RSE skipped", lambda: w.rse_doc(stale.rse).get("reason") == "scan_stale", 120, proc=svc)
        wait_until("first dumps done", lambda: all(state_of(w, r) in ("clean", "done_with_errors")
                                                   for r in (fresh.rse, reval.rse, denied.rse)), 420, proc=svc)
        tally = Tally()
        for lay in (fresh, reval, denied, stale):
            check_rse(w, lay, tally)
        assert state_of(w, fresh.rse) == "clean"
        assert state_of(w, denied.rse) == "done_with_errors"
        assert not tally.unexplained, tally.unexplained
        denied_records = w.files(denied.rse)
        classes = {r.get("error_class") for r in denied_records.values() if r["state"] in ("failed", "unknown")}
        assert any("permission_denied" in str(c) for c in classes), classes
        assert state_of(w, stale.rse) == "skipped" and w.rse_doc(stale.rse).get("generation") is None
        status, info = rest_get(w, f"data/info?rse={stale.rse}")
        assert status == 200 and info["result"][0]["rseData"][0]["reason"] == "scan_stale", info

        # --- a new dump after a partial clean ------------------------------------------------------
        for dirpath, _, names in os.walk(w.storage(denied.rse)):
            os.chown(dirpath, JOB_UID, JOB_UID)
            for n in names:
                os.chown(os.path.join(dirpath, n), JOB_UID, JOB_UID)
        for lay, tag in ((denied, "B"), (fresh, "A")):
            already_gone = [l for l, f in lay.fates.items() if f == DELETE][:2]
            lay.fates = {l: (DELETE if f == DENY else f) for l, f in lay.fates.items()
                         if w.storage(lay.rse, l).exists()}
            for k in range(6):
                lay.fates[f"/store/unmerged/Run2024{tag}/Prim7/AOD/PromptReco-v8/000/381/000/new{k}.root"] = DELETE
            w.create_files(lay)
            for lfn in already_gone:  # the scan still lists two files deleted since: recorded as missing
                lay.fates[lfn] = ABSENT
            w.publish(lay, dump=sorted(lay.fates))
        wait_until("second dumps done", lambda: all(
            state_of(w, r.rse) == "clean" and w.rse_doc(r.rse).get("generation") == r.end_time
            for r in (fresh, denied)), 300, proc=svc)
        for lay in (fresh, denied):
            check_rse(w, lay, tally)
        check_rse(w, reval, tally)
        check_rse(w, stale, tally)
        assert not tally.lost, tally.lost
        assert not tally.unexplained, tally.unexplained
        dup = {k: n for k, n in deletions_per_lfn(w).items() if n > 1}
        assert not dup, dup
        ran = {}
        for ad in w.our_condor_jobs():
            ran.setdefault(ad["job"], set()).add(ad["batch"])
        assert all(len(b) == 1 for b in ran.values()), {j: b for j, b in ran.items() if len(b) > 1}
        status, body = rest_get(w, "data/status")
        assert status == 200
        FIGURES.update(files_checked=tally.checked, by_fate=tally.by_fate, condor_jobs=len(ran))
        (w.dir / "out" / "figures-cycles.json").write_text(json.dumps(FIGURES))
    finally:
        svc.stop()
