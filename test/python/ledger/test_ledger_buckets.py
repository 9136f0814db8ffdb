"""buckets.build, pure: a job's buckets hold exactly its files, each directory in one bucket, their ids distinct
(insert_ignoring_duplicates would silently drop a second bucket of the same id) and each sorting just below its
first file; packs stay within PACK_NAMES files and one dataset."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from MSUnmerged.ledger import buckets as bk
from MSUnmerged.worker.ids import gen_prefix, job_id

RSE, GEN = "T2_CH_Build", 1_700_000_000.0
PREFIX = gen_prefix(RSE, GEN)
BASE = "/store/unmerged/Era/Prim/RAW"  # 6 elements
PARTS = ("0", "00", "0-1", "0.1", "0a", "1", "a", "a-", "a.b", "a!", "a|b", "ab", "~", "é", "\U0001f600")
lfn_st = st.builds(lambda mid, name: "/".join((BASE, *mid, name)), st.lists(st.sampled_from(PARTS), max_size=4),
                   st.sampled_from(PARTS))


@settings(max_examples=500, deadline=None)
@given(lfns=st.lists(lfn_st, min_size=1, max_size=80), floor=st.integers(5, 10), pack=st.integers(1, 12),
       n=st.sampled_from([1, 7, 999_999, 1_000_000]))
def test_a_job_s_buckets_hold_each_file_once_under_distinct_ids(lfns: list[str], floor: int, pack: int, n: int) -> None:
    docs = bk.build(RSE, GEN, PREFIX, job_id(RSE, GEN, 1, n), n, lfns, 0.0, floor, pack)
    assert len({d["_id"] for d in docs}) == len(docs)
    files = [x for d in docs for x in bk.lfns(d, "p")]
    assert sorted(files) == sorted(set(lfns))  # each plan line once, nothing else (duplicate lines once)
    homes: dict[str, str] = {}
    for d in docs:
        mine = bk.lfns(d, "p")
        assert bk.names(d) == sorted(bk.names(d)) and len(mine) == d["n"] == len(d["codes"])
        real = {x.rpartition("/")[0] for x in mine}
        assert all(homes.setdefault(r, d["_id"]) == d["_id"] for r in real)  # a directory is in one bucket
        first = min(mine)
        assert d["_id"] == bk.bucket_id(PREFIX, first.rpartition("/")[0], n)
        assert all(d["_id"] < PREFIX + x and x.startswith(d["dir"] + "/") for x in mine)
        assert bk.file_prefix(d) == PREFIX + d["dir"] + "/"
        if len(real) > 1:  # a pack: within the size and one dataset (its directory at least `floor` deep)
            assert d["n"] <= pack and d["dir"].count("/") + 1 >= floor
            assert all(r == d["dir"] or r.startswith(d["dir"] + "/") for r in real)
