"""Per-file records over buckets and rows: a file's record is its row when it has one, else its bucket
entry; listings come in file `_id` order (docs/ledger.md, "Shape")."""
from __future__ import annotations

import bisect
import heapq
import itertools
from dataclasses import dataclass
from typing import Any, Iterable, Iterator, Mapping, Optional, Sequence

from pymongo import ASCENDING
from pymongo.collection import Collection

from MSUnmerged.ledger import buckets as bk
from MSUnmerged.ledger import fences
from MSUnmerged.ledger.retry import with_retry
from MSUnmerged.worker.ids import file_id
from MSUnmerged.worker.paths import ancestors

BUCKETS_PER_READ = 20
MIN_CHECK = 50  # bucket entries checked for rows per query, at least
# Buckets in a page's first window (fences.Windows): ~250 files each, so one window fills most pages; a page of
# rows alone (failed files by class) starts wider, rows being a few percent of the files.
FIRST_BUCKETS, FIRST_ROW_BUCKETS = 2, 16
TOP = "\U0010ffff"  # sorts after every character: a prefix range is [prefix, prefix + TOP)


def with_rows(rows: Collection, ids: Iterable[str]) -> set[str]:
    """The ids among `ids` that have a row."""
    ids = list(ids)
    found: set[str] = set()
    for start in range(0, len(ids), 10_000):
        chunk = ids[start:start + 10_000]
        found.update(d["_id"] for d in with_retry(
            lambda: list(rows.find({"_id": {"$in": chunk}}, {"_id": 1})), "rows of bucket entries"))
    return found


def _matches(doc: Mapping[str, Any], flt: Mapping[str, Any]) -> bool:
    """The bucket matches a page's bucket filter (equalities, an array field holding the value, `$in`)."""
    for key, want in flt.items():
        have = doc.get(key)
        if isinstance(want, Mapping):
            if set(want) != {"$in"}:
                raise ValueError(f"bucket filter {key}: only $in is matched here, not {sorted(want)}")
            if have not in want["$in"]:
                return False
        elif not (want in have if isinstance(have, list) else have == want):
            return False
    return True


def holders(buckets: Collection, scope: Mapping[str, Any], fid: str, under: str = "",
            floor: float = 0) -> list[dict[str, Any]]:
    """The buckets of the RSE generation `scope` ({rse, gen}) in the directories file _id `fid` lies in that sort
    before it: those may hold it, or files after it. Queried by the index's fields alone (rse, gen, dir):
    SecantusDB scans the whole collection for any other field set. `under`: a directory every file asked for lies
    under, and `floor`: the generation's buckets.pack_floor; a bucket of a directory above `under` holds such files only
    when it packs, so only directories at least `floor` elements deep are asked for above it (none: no read)."""
    path = fid.split("|", 2)[2]
    # A bucket of D sorts at or after <D>/ + SEP: below `fid` only when `fid` goes on past <D>/.
    dirs = [d for d in ancestors(path)
            if len(path) > len(d) + 1 and (len(d) >= len(under) or d.count("/") + 1 >= floor)]
    if not dirs:
        return []
    return [d for d in with_retry(lambda: list(buckets.find({**scope, "dir": {"$in": dirs}})), "ancestor buckets")
            if d["_id"] < fid]


Entry = tuple[str, int, str]  # bk.entries: (file _id, index, base name)


class _Pending:
    """Bucket entries read but not yet given, in _id order: the buckets' entries (in order within each bucket)
    merged as they are asked for. A bucket's _id sorts before all its files, so once every bucket below a
    window's end is read, the entries below that end are final."""

    def __init__(self, codes: str, lo: str, lo_inclusive: bool, hi: str) -> None:
        self.codes, self.lo, self.lo_inclusive, self.hi = codes, lo, lo_inclusive, hi
        # Per bucket with entries left: (its next entry's _id, tie, that entry, the rest, the bucket).
        self.heap: list[tuple[str, int, Entry, Iterator[Entry], Mapping[str, Any]]] = []
        self.tie = itertools.count()

    def _inside(self, doc: Mapping[str, Any]) -> Iterator[Entry]:
        for entry in bk.entries(doc, self.codes):
            if entry[0] >= self.hi:
                return
            if entry[0] > self.lo or self.lo_inclusive and entry[0] == self.lo:
                yield entry

    def push(self, doc: Mapping[str, Any]) -> None:
        rest = self._inside(doc)
        first = next(rest, None)
        if first is not None:
            heapq.heappush(self.heap, (first[0], next(self.tie), first, rest, doc))

    def below(self, end: str) -> Iterator[tuple[str, Mapping[str, Any], int, str]]:
        """The entries below `end`, in order, taken as asked for."""
        heap = self.heap
        while heap and heap[0][0] < end:
            _, tie, (fid, i, name), rest, doc = heap[0]
            following = next(rest, None)
            if following is None:
                heapq.heappop(heap)
            else:
                heapq.heapreplace(heap, (following[0], tie, following, rest, doc))
            yield fid, doc, i, name


def _window_entries(coll: Collection, flt: Mapping[str, Any], rng: Mapping[str, str],
                    pending: _Pending) -> Iterator[tuple[str, Mapping[str, Any], int, str]]:
    """The entries below the window's end in _id order, reading its buckets BUCKETS_PER_READ at a time as the
    entries are asked for (on MongoDB a query stops at its limit)."""
    while True:
        q = {**flt, "_id": rng}
        docs = with_retry(lambda: list(coll.find(q).sort("_id", ASCENDING).limit(BUCKETS_PER_READ)), "read buckets")
        for doc in docs:
            yield from pending.below(doc["_id"])
            pending.push(doc)
        if len(docs) < BUCKETS_PER_READ:
            break
        rng = {"$gt": docs[-1]["_id"], "$lt": rng["$lt"]}
    yield from pending.below(rng["$lt"])


def _unshadowed(rows: Collection, entries: Iterator[tuple[str, Mapping[str, Any], int, str]],
                chunk: int) -> Iterator[dict[str, Any]]:
    """The records of these entries (in order) that have no row (the row is their record), checked `chunk` at
    a time as they are asked for."""
    while part := list(itertools.islice(entries, chunk)):
        shadowed = with_rows(rows, (fid for fid, *_ in part))
        yield from (bk.record(doc, i, name, fid) for fid, doc, i, name in part if fid not in shadowed)


def _record_id(doc: Mapping[str, Any]) -> str:
    return str(doc["_id"])


def _merged(rows: list[dict[str, Any]], entries: Iterator[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """Rows (in _id order) and entries' records (in _id order, none with a row's _id) in one _id order: what
    heapq.merge gives, without its per-record key calls and heap (a page takes ~100 records)."""
    i, n = 0, len(rows)
    for rec in entries:
        fid = str(rec["_id"])
        while i < n and _record_id(rows[i]) < fid:
            yield rows[i]
            i += 1
        yield rec
    yield from rows[i:]


def _picked(doc: Mapping[str, Any], pick: Mapping[str, Any]) -> bool:
    """The row has every field of `pick` (equalities only) with that value."""
    return all(doc.get(k) == v for k, v in pick.items())


@dataclass(frozen=True)
class Span:
    """A page's range of _ids: from `lo` (itself included when `inclusive`) up to `hi` (excluded)."""

    lo: str
    hi: str
    inclusive: bool = True


@dataclass(frozen=True)
class Pager:
    """Where a listing's records come from: rows matching `row_flt` merged with bucket entries (buckets matching
    `bucket_flt`, codes in `codes`); a None filter leaves that side out. `scope`: the RSE generation ({rse, gen})
    the listing lies in, and `fence_ids` its fences. `all_rows`: row_flt selects every row of the range, so the
    rows read are all those that can stand for a bucket entry. `bucket_floor`: no bucket matching bucket_flt sorts
    below it. `pick` (with all_rows, for a range that holds few records, such as a job's span): each window's rows
    are read whole, the page's rows are those with `pick`'s field values, and all of them stand for entries (no
    look-up by id). `under` and `floor`: as holders takes them (a directory every file of the listing lies under,
    the generation's buckets.pack_floor)."""

    rows: Collection
    row_flt: Optional[Mapping[str, Any]]
    buckets: Collection
    bucket_flt: Optional[Mapping[str, Any]]
    codes: str
    scope: Mapping[str, Any]
    fence_ids: Sequence[str] = ()
    all_rows: bool = False
    bucket_floor: str = ""
    pick: Optional[Mapping[str, Any]] = None
    under: str = ""
    floor: float = 0

    def page(self, span: Span, limit: int, reach: Optional[str] = None) -> list[dict[str, Any]]:
        """The first `limit` records of `span` in _id order.

        Read in windows over the span whose ends are fences (fences.Windows; the first up to `reach` when given),
        until the page is full: each query then matches one window, not the rest of the span."""
        pending = self._pending(span)
        out: list[dict[str, Any]] = []
        start, inclusive = span.lo, span.inclusive
        first = FIRST_BUCKETS if pending is not None else FIRST_ROW_BUCKETS
        windows = fences.Windows(self.fence_ids, span.lo, span.hi, first, reach)
        while True:
            end = windows.end()
            need = limit - len(out)
            taken = list(itertools.islice(self._window({"$gte" if inclusive else "$gt": start, "$lt": end}, need,
                                                       pending), need))
            out += taken
            if len(out) >= limit or end == span.hi:
                return out
            windows.resize(len(taken), need - len(taken))
            start, inclusive = end, True

    def _pending(self, span: Span) -> Optional[_Pending]:
        """The bucket entries to merge, none read yet (None: no bucket side)."""
        if self.bucket_flt is None or not self.codes:
            return None
        pending = _Pending(self.codes, span.lo, span.inclusive, span.hi)
        if span.lo > self.bucket_floor:
            # The buckets of lo's own ancestor directories sort before lo but may hold later files.
            for doc in holders(self.buckets, self.scope, span.lo, self.under, self.floor):
                if _matches(doc, self.bucket_flt):
                    pending.push(doc)
        return pending

    def _window_rows(self, rng: Mapping[str, str], need: int) -> tuple[list[dict[str, Any]], set[str]]:
        """The window's first `need` rows for the page, and the ids of every row read."""
        if self.row_flt is None:
            return [], set()
        q = {**self.row_flt, "_id": rng}
        if self.pick is None:
            rows = with_retry(lambda: list(self.rows.find(q).sort("_id", ASCENDING).limit(need)), "query records")
            return rows, {r["_id"] for r in rows}
        # Read whole, so sorted here: SecantusDB sorts in Python, at a cost per document above this one.
        every = sorted(with_retry(lambda: list(self.rows.find(q)), "query records"), key=_record_id)
        pick = self.pick
        return [r for r in every if _picked(r, pick)][:need], {r["_id"] for r in every}

    def _window(self, rng: Mapping[str, str], need: int, pending: Optional[_Pending]) -> Iterator[dict[str, Any]]:
        """The window's records in _id order, read as they are asked for."""
        window_rows, have = self._window_rows(rng, need)
        if pending is None or self.bucket_flt is None:
            return iter(window_rows)
        listed = _window_entries(self.buckets, self.bucket_flt, rng, pending)
        entries: Iterator[dict[str, Any]]
        if self.all_rows:
            # Complete up to the last row read (every row of the window with `pick`), and only entries up to
            # it can make the page then.
            entries = (bk.record(doc, i, name, fid) for fid, doc, i, name in listed if fid not in have)
        else:
            entries = _unshadowed(self.rows, listed, max(need, MIN_CHECK))
        return _merged(window_rows, entries) if window_rows else entries


def find_entry(buckets: Collection, rse: str, generation: float, lfn: str) -> Optional[dict[str, Any]]:
    """The bucket record of one LFN of a generation (None: in no bucket; a row may still hold it)."""
    fid = file_id(rse, generation, lfn)
    for doc in holders(buckets, {"rse": rse, "gen": generation}, fid):
        names, name = bk.names(doc), lfn[len(doc["dir"]) + 1:]
        i = bisect.bisect_left(names, name)
        if i < len(names) and names[i] == name and doc["codes"][i] != bk.ROW:
            return bk.record(doc, i, name)
    return None
