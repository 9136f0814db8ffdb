"""Leases on a real SecantusDB: one owner at a time, takeover after expiry, once per slot, fencing."""
from __future__ import annotations

import time
from types import SimpleNamespace

import pytest
from pymongo.database import Database

from MSUnmerged.ledger import LeaseLost, Leases, leases

pytestmark = pytest.mark.integration


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The leases' clock, moved by the test: a lease expires when the test says, however slow the machine (with
    real time, a pause longer than the ttl between two steps let another owner take it)."""
    now = [1_800_000_000.0]
    monkeypatch.setattr(leases, "time", SimpleNamespace(time=lambda: now[0]))
    return now


def test_one_owner_then_takeover_after_expiry(mongo_db: Database, clock: list[float]) -> None:
    a, b = Leases(mongo_db, "a", ttl_s=1.0), Leases(mongo_db, "b", ttl_s=1.0)
    assert a.acquire("T2_A") and not b.acquire("T2_A")
    assert a.acquire("T2_A")  # re-entrant for its owner
    clock[0] += 1.2
    assert b.acquire("T2_A")  # expired: taken over
    assert not a.renew("T2_A")  # the old owner learns it lost the lease
    with pytest.raises(LeaseLost):
        a.check("T2_A")
    b.release("T2_A")
    assert a.acquire("T2_A")


def test_done_slot_means_once_per_cycle(mongo_db: Database) -> None:
    a, b = Leases(mongo_db, "a", 30), Leases(mongo_db, "b", 30)
    assert a.acquire("T2_B", slot=7)
    a.release("T2_B", done_slot=7)
    assert not b.acquire("T2_B", slot=7) and b.describe("T2_B")["done_slot"] == 7
    assert b.acquire("T2_B", slot=8)


def test_heartbeat_keeps_the_lease(mongo_db: Database, clock: list[float]) -> None:
    a, b = Leases(mongo_db, "a", ttl_s=0.6), Leases(mongo_db, "b", ttl_s=0.6)
    assert a.acquire("T2_C")
    first_expiry = a.describe("T2_C")["expires"]
    a.start_heartbeat()  # a beat every 0.2 s of real time, renewing at the clock's time
    try:
        clock[0] += 0.5
        deadline = time.monotonic() + 60  # bounds a hang: the heartbeat renews at the clock's new time
        while a.describe("T2_C")["renewed"] != clock[0]:
            assert time.monotonic() < deadline, "the heartbeat never renewed the lease"
            time.sleep(0.05)
        clock[0] += 0.5  # past the lease's first expiry
        assert clock[0] > first_expiry and not b.acquire("T2_C")
    finally:
        a.stop_heartbeat()
