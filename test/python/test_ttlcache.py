"""The short-lived cache (rest.cache_ttl_s) on a clock the test moves: a value is served within its time to live,
never past it, counted from before its read; 0 keeps nothing; keys stay bounded."""
from __future__ import annotations

from MSUnmerged import ttlcache
from MSUnmerged.ttlcache import TtlCache


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_value_is_served_within_its_ttl_and_read_again_at_it() -> None:
    clock, reads = Clock(), []
    cache: TtlCache[int] = TtlCache(2.0, clock)

    def read() -> int:
        reads.append(clock.now)
        return len(reads)
    assert cache.get("k", read) == 1
    clock.now += 1.999
    assert cache.get("k", read) == 1
    clock.now += 0.001  # exactly its ttl: stale
    assert cache.get("k", read) == 2
    assert cache.get("other", read) == 3
    assert reads == [100.0, 102.0, 102.0]


def test_the_ttl_runs_from_before_the_read() -> None:
    """A slow read does not stretch its value's life: what it saw at its start is never served past ttl."""
    clock = Clock()
    cache: TtlCache[str] = TtlCache(2.0, clock)

    def slow() -> str:
        clock.now += 1.5
        return "seen at 100"
    cache.get("k", slow)
    clock.now = 101.999
    assert cache.get("k", lambda: "fresh") == "seen at 100"
    clock.now = 102.0
    assert cache.get("k", lambda: "fresh") == "fresh"


def test_ttl_zero_reads_every_time_and_keys_stay_bounded() -> None:
    clock = Clock()
    assert [TtlCache(0.0, clock).get("k", lambda: n) for n in range(3)] == [0, 1, 2]
    cache: TtlCache[int] = TtlCache(60.0, clock)
    for n in range(ttlcache.MAX_KEYS + 5):
        cache.get(n, lambda: 1)
    assert len(cache._data) <= ttlcache.MAX_KEYS and len(cache._locks) <= ttlcache.MAX_KEYS
