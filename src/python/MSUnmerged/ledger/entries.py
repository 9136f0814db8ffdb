"""Writing bucket entries: which are live (no row stands for them), their codes, and their moves to rows."""
from __future__ import annotations

import time
from typing import Any, Mapping, Optional, Sequence

from pymongo import UpdateOne

from MSUnmerged.ledger import buckets as bk
from MSUnmerged.ledger import records
from MSUnmerged.ledger.base import BATCH, BUCKET_BATCH, LedgerBase, write_ignoring_duplicates
from MSUnmerged.ledger.retry import with_retry
from MSUnmerged.ledger.states import FileState

Entry = tuple[dict[str, Any], int, str]  # (bucket, index, name)
Changes = dict[str, tuple[dict[str, Any], dict[int, tuple[str, Optional[int]]]]]


class Entries:
    """The writes of bucket entries shared by plans, rounds and outcomes (given to each)."""

    def __init__(self, base: LedgerBase) -> None:
        self.base = base

    def live(self, flt: Mapping[str, Any], codes: str, job_rows: Optional[set[str]] = None,
                      buckets: Optional[Sequence[dict[str, Any]]] = None) -> list[Entry]:
        """(bucket, index, name) of the entries of matching buckets whose code is in `codes` and that have no
        row. An entry found with a row (a step cut short after writing the row) gets its code set to ROW.

        Only a row of its bucket's own job can stand for a planned, deleted or missing entry (rows are written
        with the bucket's job, and a row moves to a retry job only after its job was closed, which sets the
        codes of its rows): these are checked against the rows of their buckets' jobs (`job_rows`: the ids of
        those rows when the caller read them already), a look-up by job instead of one per file. A would-delete
        entry may have a retry job's row (new_round) and is checked by its id. `buckets`: the buckets `flt` matches,
        when the caller read them already."""
        docs = with_retry(lambda: list(self.base.buckets.find(flt)), "read buckets") if buckets is None else buckets
        found = [(doc, i, name, fid) for doc in docs for fid, i, name in bk.entries(doc, codes)]
        by_id = bk.CODES[FileState.WOULD_DELETE]
        have_rows = records.with_rows(self.base.files, (fid for d, i, _, fid in found if d["codes"][i] == by_id))
        if any(d["codes"][i] != by_id for d, i, _, _ in found):
            if job_rows is None:
                job_rows = {r["_id"] for job in {d["job"] for d, *_ in found} for r in with_retry(
                    lambda: list(self.base.files.find({"job": job}, {"_id": 1})), f"rows of {job}")}
            have_rows |= {fid for d, i, _, fid in found if d["codes"][i] != by_id and fid in job_rows}
        if have_rows:
            self.set_row_codes([(d, i, n) for d, i, n, fid in found if fid in have_rows])
        return [(d, i, n) for d, i, n, fid in found if fid not in have_rows]

    def rewrite(self, changes: Changes) -> None:
        """Bucket _id -> (the bucket as read, {index: (code, size or None)}): one $set of each bucket. The
        bucket dicts are updated too, so that a later rewrite of the same bucket in this step starts from it."""
        now = time.time()
        ops = []
        for bid, (doc, ch) in changes.items():
            new = bk.rewrite(doc, ch, now)
            doc.update(new)
            ops.append(UpdateOne({"_id": bid}, {"$set": new}))
        for start in range(0, len(ops), BUCKET_BATCH):
            chunk = ops[start:start + BUCKET_BATCH]
            with_retry(lambda: self.base.buckets.bulk_write(chunk, ordered=False), "rewrite buckets")

    def set_row_codes(self, entries: Sequence[Entry], changes: Optional[Changes] = None) -> None:
        """The entries' codes become ROW, written with `changes` (other entries of the same step) in one rewrite."""
        changes = {} if changes is None else changes
        for doc, i, _ in entries:
            changes.setdefault(doc["_id"], (doc, {}))[1][i] = (bk.ROW, None)
        self.rewrite(changes)

    def move_to_rows(self, moves: Sequence[tuple[Entry, Mapping[str, Any]]], flt: Mapping[str, Any],
                      changes: Optional[Changes] = None) -> int:
        """Bucket entries become rows: (entry, fields) -> an upsert of the entry's record filtered by {_id, **flt}
        and setting `fields` (a row already there that `flt` does not match makes the insert collide: skipped),
        all in one bulk write per BATCH entries, then their codes become ROW (with `changes`, see
        _set_row_codes). Row first: a crash between the two leaves a row, which wins. Returns rows written."""
        now = time.time()
        ops = []
        for (doc, i, name), fields in moves:
            rec = bk.record(doc, i, name)
            on_insert = {k: v for k, v in rec.items() if k not in fields and k not in flt and k not in ("_id", "t")}
            ops.append(UpdateOne({"_id": rec["_id"], **flt}, {"$set": {**fields, "t": now}, "$setOnInsert": on_insert},
                                 upsert=True))
        n = sum(write_ignoring_duplicates(self.base.files, ops[s:s + BATCH]) for s in range(0, len(ops), BATCH))
        self.set_row_codes([entry for entry, _ in moves], changes)
        return n
