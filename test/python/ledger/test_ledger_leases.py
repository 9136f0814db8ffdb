"""Leases on a real SecantusDB: one owner at a time, takeover after expiry, once per slot, fencing."""
from __future__ import annotations

import time

import pytest
from pymongo.database import Database

from MSUnmerged.ledger import LeaseLost, Leases

pytestmark = pytest.mark.integration


def test_one_owner_then_takeover_after_expiry(mongo_db: Database) -> None:
    a, b = Leases(mongo_db, "a", ttl_s=1.0), Leases(mongo_db, "b", ttl_s=1.0)
    assert a.acquire("T2_A") and not b.acquire("T2_A")
    assert a.acquire("T2_A")  # re-entrant for its owner
    time.sleep(1.2)
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


def test_heartbeat_keeps_the_lease(mongo_db: Database) -> None:
    a, b = Leases(mongo_db, "a", ttl_s=0.6), Leases(mongo_db, "b", ttl_s=0.6)
    assert a.acquire("T2_C")
    a.start_heartbeat()
    try:
        time.sleep(1.5)
        assert not b.acquire("T2_C")
    finally:
        a.stop_heartbeat()
