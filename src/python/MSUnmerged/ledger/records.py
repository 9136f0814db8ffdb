"""Per-file records over buckets and rows: a file's record is its row when it has one, else its bucket
entry; listings come in file `_id` order (docs/ledger.md, "Shape")."""
from __future__ import annotations

import bisect
import heapq
import itertools
from typing import Any, Iterable, Iterator, Mapping, Optional

from pymongo import ASCENDING
from pymongo.collection import Collection

from MSUnmerged.ledger import buckets as bk
from MSUnmerged.ledger.retry import with_retry

BUCKETS_PER_READ = 20
CHECK = 1000  # bucket entries checked for rows per query


def with_rows(rows: Collection, ids: Iterable[str]) -> set[str]:
    """The ids among `ids` that have a row."""
    ids = list(ids)
    found: set[str] = set()
    for start in range(0, len(ids), 10_000):
        chunk = ids[start:start + 10_000]
        found.update(d["_id"] for d in with_retry(
            lambda: list(rows.find({"_id": {"$in": chunk}}, {"_id": 1})), "rows of bucket entries"))
    return found


def _ancestors(lo: str) -> list[str]:
    """The directories the path of `lo` ("<rse>|<gen>|<path>") lies in."""
    path = lo.split("|", 2)[2]
    return [path[:i] for i, c in enumerate(path) if c == "/" and i > 0]


def _entries_in_order(coll: Collection, flt: Mapping[str, Any], codes: str, lo: str, lo_inclusive: bool,
                      hi: str) -> Iterator[dict[str, Any]]:
    """Records of bucket entries with codes in `codes` and lo < _id < hi (lo <= _id if inclusive), in _id order.

    A bucket's _id sorts before all its files, so a file can be given once it sorts before the next
    bucket's _id; the buckets of lo's own ancestor directories sort before lo but may hold later files."""
    heap: list[tuple[str, int, Mapping[str, Any], int, str]] = []
    tie = itertools.count()

    def push(doc: Mapping[str, Any]) -> None:
        for fid, i, name in bk.entries(doc, codes):
            if (fid >= lo if lo_inclusive else fid > lo) and fid < hi:
                heapq.heappush(heap, (fid, next(tie), doc, i, name))

    dirs = _ancestors(lo)
    if dirs:
        for doc in with_retry(lambda: list(coll.find({**flt, "dir": {"$in": dirs}})), "ancestor buckets"):
            if doc["_id"] < lo:
                push(doc)
    rng: dict[str, str] = {"$gte" if lo_inclusive else "$gt": lo, "$lt": hi}
    while True:
        q = {**flt, "_id": rng}
        docs = with_retry(lambda: list(coll.find(q).sort("_id", ASCENDING).limit(BUCKETS_PER_READ)), "read buckets")
        for doc in docs:
            while heap and heap[0][0] < doc["_id"]:
                _, _, d, i, name = heapq.heappop(heap)
                yield bk.record(d, i, name)
            push(doc)
        if len(docs) < BUCKETS_PER_READ:
            break
        rng = {"$gt": docs[-1]["_id"], "$lt": hi}
    while heap:
        _, _, d, i, name = heapq.heappop(heap)
        yield bk.record(d, i, name)


def bucket_records(buckets: Collection, rows: Collection, flt: Mapping[str, Any], codes: str, lo: str,
                   lo_inclusive: bool, hi: str) -> Iterator[dict[str, Any]]:
    """_entries_in_order without the entries that have a row (the row is their record)."""
    it = _entries_in_order(buckets, flt, codes, lo, lo_inclusive, hi)
    while True:
        chunk = list(itertools.islice(it, CHECK))
        if not chunk:
            return
        shadowed = with_rows(rows, (r["_id"] for r in chunk))
        yield from (r for r in chunk if r["_id"] not in shadowed)
        if len(chunk) < CHECK:
            return


def page(rows: Collection, row_flt: Optional[Mapping[str, Any]], buckets: Collection,
         bucket_flt: Optional[Mapping[str, Any]], codes: str, lo: str, lo_inclusive: bool, hi: str,
         limit: int) -> list[dict[str, Any]]:
    """The first `limit` records in _id order in the range: rows matching row_flt merged with bucket entries
    (buckets matching bucket_flt, codes in `codes`); a None filter leaves that side out."""
    rng = {"$gte" if lo_inclusive else "$gt": lo, "$lt": hi}
    row_docs: list[dict[str, Any]] = []
    if row_flt is not None:
        q = {**row_flt, "_id": rng}
        row_docs = with_retry(lambda: list(rows.find(q).sort("_id", ASCENDING).limit(limit)), "query records")
    if bucket_flt is None or not codes:
        return row_docs
    entries = bucket_records(buckets, rows, bucket_flt, codes, lo, lo_inclusive, hi)
    return list(itertools.islice(heapq.merge(row_docs, entries, key=lambda d: d["_id"]), limit))


def find_entry(buckets: Collection, rse: str, generation: float, lfn: str) -> Optional[dict[str, Any]]:
    """The bucket record of one LFN of a generation (None: in no bucket; a row may still hold it)."""
    d, name = bk.split(lfn)
    for doc in with_retry(lambda: list(buckets.find({"rse": rse, "gen": generation, "dir": d})), "file's bucket"):
        names = bk.names(doc)
        i = bisect.bisect_left(names, name)
        if i < len(names) and names[i] == name and doc["codes"][i] != bk.ROW:
            return bk.record(doc, i, name)
    return None
