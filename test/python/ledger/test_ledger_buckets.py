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


@settings(max_examples=200, deadline=None)
@given(lfns=st.lists(lfn_st, min_size=1, max_size=40), pack=st.integers(1, 12),
       codes=st.lists(st.sampled_from("pdwmr"), min_size=40, max_size=40))
def test_an_entry_s_record_is_its_file_s_whole_record_whether_its_id_is_given_or_not(
        lfns: list[str], pack: int, codes: list[str]) -> None:
    """record(doc, i, name, fid) (what a page builds from entries) is record(doc, i, name), and holds the file's
    LFN, its own directory (below the bucket's when packed) and its _id."""
    for doc in bk.build(RSE, GEN, PREFIX, job_id(RSE, GEN, 1, 1), 1, lfns, 0.0, 6, pack):
        doc = {**doc, "codes": "".join(codes[:doc["n"]]), "sizes": list(range(doc["n"]))}
        for fid, i, name in bk.entries(doc):
            rec = bk.record(doc, i, name, fid)
            assert rec == bk.record(doc, i, name) and list(rec) == list(bk.record(doc, i, name))
            assert rec["_id"] == PREFIX + rec["lfn"] and rec["lfn"] == f"{doc['dir']}/{name}"
            assert rec["dir"] == rec["lfn"].rpartition("/")[0]
