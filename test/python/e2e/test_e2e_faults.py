"""Outside services and servers failing under the running service (serve mode: loop + REST).

ConMon (stats, dump), WMStats and Rucio answering 503, hanging or sending garbage; MongoDB stopped for a while
and restarted; the schedd stopped; a worker killed in the middle of its job. For each: the affected RSE gets
a recorded reason (where the service records one), REST keeps answering, and the service recovers by itself.
The scenario runs once (`faults`, what it saw at each fault); each test asserts one behaviour of it.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any, Iterator, Optional

import pytest

from e2e.e2e_checks_kit import RseSeen, checked, deleted_twice, observe_rse
from e2e.e2e_layout_kit import DELETE, Layout, make_layout
from e2e.e2e_service_kit import ServiceProcess, rest_get, wait_until
from e2e.e2e_world_kit import World, configure

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SOURCE_FAULTS = [
    ("stats", {"status": 503}, "conmon_"),
    ("stats", {"delay_s": 8}, "conmon_"),
    ("stats", {"body": b"\x1f\x8b garbage {"}, "conmon_"),
    ("protectedlfns", {"status": 503}, "wmstats_"),
    ("protectedlfns", {"delay_s": 8}, "wmstats_"),
    ("protectedlfns", {"body": b'{"result": "not a list"'}, "wmstats_"),
    ("files", {"status": 503}, "conmon_"),
    ("files", {"delay_s": 8}, "conmon_"),
    ("files", {"corrupt_tail": True}, ""),  # a corrupt gzip trailer: guard dump_unreadable or conmon_*
]
RUCIO_MODES = ("503", "hang", "garbage")


def fault_key(endpoint: str, fault: dict[str, Any]) -> str:
    return f"{endpoint}:{sorted(fault)[0]}"


@dataclass
class FaultsSeen:
    """What the scenario observed: per fault the reason recorded and REST's status meanwhile, the phases the service
    recovered from, and the RSE at the end."""

    reasons: dict[str, str] = field(default_factory=dict)
    rest_status: dict[str, int] = field(default_factory=dict)
    alive: dict[str, bool] = field(default_factory=dict)
    health_body: Any = None
    recovered: list[str] = field(default_factory=list)
    end: Optional[RseSeen] = None
    deleted_twice: dict[str, int] = field(default_factory=dict)


def reason_of(w: World, rse: str) -> str:
    return str(w.rse_doc(rse).get("reason") or "")


def wait_recovered(w: World, lay: Layout, svc: ServiceProcess, seen: FaultsSeen, phase: str, timeout: float,
                   every: float) -> None:
    """Until the RSE is clean at its latest scan again; the phase is then recorded as recovered from."""
    wait_until(f"recovered after {phase}", lambda: w.rse_doc(lay.rse).get("generation") == lay.end_time
               and w.rse_doc(lay.rse).get("state") == "clean", timeout, every, proc=svc)
    seen.recovered.append(phase)


def source_faults(w: World, lay: Layout, svc: ServiceProcess, seen: FaultsSeen) -> None:
    """ConMon and WMStats misbehaving, one fault at a time."""
    for endpoint, fault, _ in SOURCE_FAULTS:
        key = fault_key(endpoint, fault)
        w.publish(lay)  # a new scan: the service needs stats, the protected list and the dump
        w.web.fault(endpoint, **fault)
        try:
            seen.reasons[key] = wait_until(f"{endpoint} {fault} recorded", lambda: (
                reason_of(w, lay.rse) if w.rse_doc(lay.rse).get("state") in ("failed", "guarded")
                and w.rse_doc(lay.rse).get("updated", 0) > lay.end_time + 5 else ""), 60, 0.5, proc=svc)
            seen.rest_status[key], _ = rest_get(w, "data/status")
        finally:
            w.web.clear_faults()
        wait_recovered(w, lay, svc, seen, key, 120, 0.5)


def mongo_away(w: World, lay: Layout, svc: ServiceProcess, seen: FaultsSeen) -> None:
    """MongoDB stopped for a while (two cycles) and started again."""
    w.mongo.stop()
    try:
        w.publish(lay)
        time.sleep(8)
        seen.rest_status["mongo:health"], seen.health_body = rest_get(w, "data/health")
        seen.alive["mongo"] = svc.alive()
    finally:
        w.mongo.start()  # the other tests of the session share this server
    wait_recovered(w, lay, svc, seen, "mongo:restart", 180, 1)


def schedd_off(w: World, lay: Layout, svc: ServiceProcess, seen: FaultsSeen) -> None:
    """The schedd stopped while the service has new files to delete."""
    extra = [f"/store/unmerged/Run2024F/Prim8/AOD/PromptReco-v9/000/382/000/s{k}.root" for k in range(5)]
    for lfn in extra:
        lay.fates[lfn] = DELETE
    w.create_files(lay)
    w.condor("condor_off", "-schedd")
    try:
        w.publish(lay, dump=sorted(lay.fates))
        seen.reasons["schedd:off"] = wait_until("schedd failure recorded", lambda: reason_of(w, lay.rse) if reason_of(
            w, lay.rse).startswith("backend_") else "", 120, 0.5, proc=svc)
    finally:
        w.condor("condor_on", "-schedd")
    wait_recovered(w, lay, svc, seen, "schedd:off", 240, 1)


def rucio_faults(w: World, lay: Layout, svc: ServiceProcess, seen: FaultsSeen) -> None:
    """Rucio misbehaving (last: garbage from Rucio ends the loop thread, see the issue note)."""
    for mode in RUCIO_MODES:
        key = f"rucio:{mode}"
        w.proxy.mode = mode
        w.publish(lay)
        time.sleep(10)  # two cycles
        seen.rest_status[key], _ = rest_get(w, "data/status")
        seen.alive[key] = svc.alive()
        seen.reasons[key] = reason_of(w, lay.rse) or "(no RSE-level reason: the cycle has no RSE list)"
        w.proxy.mode = "pass"
        w.proxy.release()
        wait_recovered(w, lay, svc, seen, key, 120, 0.5)


@pytest.fixture(scope="module")
def faults(e2e_world: World) -> Iterator[FaultsSeen]:
    """The scenario, run once: a clean RSE, then each fault in turn, each followed by the service's recovery."""
    w = e2e_world
    lay = make_layout("T2_XE_FAULT", "T2_XE_Alpha", "F", datasets=4, files=12)
    w.add_rse(lay)
    w.create_files(lay)
    w.publish(lay)
    configure(w)
    svc = ServiceProcess(w, "faults", "serve")
    seen = FaultsSeen()
    try:
        wait_until("baseline clean", lambda: w.rse_doc(lay.rse).get("state") == "clean", 240, proc=svc)
        for phase in (source_faults, mongo_away, schedd_off, rucio_faults):
            phase(w, lay, svc, seen)
        seen.end = observe_rse(w, lay)
        seen.deleted_twice = deleted_twice(w, "T2_XE_FAULT")
    finally:
        svc.stop()
    (w.dir / "out" / "figures-faults.json").write_text(json.dumps(
        {"faults": len(seen.recovered), "reasons": seen.reasons, "files_checked": len(seen.end.fates)},
        default=str))
    yield seen


@pytest.mark.parametrize("endpoint,fault,prefix", SOURCE_FAULTS, ids=[fault_key(e, f) for e, f, _ in SOURCE_FAULTS])
def test_a_source_fault_is_recorded_as_its_source(faults: FaultsSeen, endpoint: str, fault: dict[str, Any],
                                                  prefix: str) -> None:
    why = faults.reasons[fault_key(endpoint, fault)]
    assert why.startswith(prefix) or (endpoint == "files" and why in ("dump_unreadable",)), why


def test_rest_answers_while_a_source_fails(faults: FaultsSeen) -> None:
    during = {fault_key(e, f): faults.rest_status.get(fault_key(e, f)) for e, f, _ in SOURCE_FAULTS}
    assert set(during.values()) == {200}, during


def test_health_is_503_while_mongodb_is_away(faults: FaultsSeen) -> None:
    assert faults.rest_status["mongo:health"] == 503, faults.health_body
    assert faults.alive["mongo"]


def test_a_stopped_schedd_is_recorded_as_a_backend_failure(faults: FaultsSeen) -> None:
    assert faults.reasons["schedd:off"].startswith("backend_"), faults.reasons["schedd:off"]


def test_rest_answers_and_the_service_lives_while_rucio_misbehaves(faults: FaultsSeen) -> None:
    during = {m: (faults.rest_status[f"rucio:{m}"], faults.alive[f"rucio:{m}"]) for m in RUCIO_MODES}
    assert set(during.values()) == {(200, True)}, during


def test_the_service_recovers_from_every_fault(faults: FaultsSeen) -> None:
    expected = [fault_key(e, f) for e, f, _ in SOURCE_FAULTS] + ["mongo:restart", "schedd:off"] + \
        [f"rucio:{m}" for m in RUCIO_MODES]
    assert faults.recovered == expected


def test_no_file_is_lost_or_left_without_a_reason(faults: FaultsSeen) -> None:
    assert faults.end is not None
    tally = checked(faults.end)
    assert not tally.lost and not tally.unexplained


def test_no_file_is_deleted_twice(faults: FaultsSeen) -> None:
    assert not faults.deleted_twice, faults.deleted_twice
