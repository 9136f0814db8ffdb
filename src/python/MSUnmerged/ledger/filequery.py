"""An operator's query of one RSE generation's per-file (or per-directory) records, as the index range and the
filters that answer it (Reads.query_files, records.Pager)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Hashable, Optional, Sequence

from pymongo.collection import Collection

from MSUnmerged.ledger import buckets as bk
from MSUnmerged.ledger import records
from MSUnmerged.ledger.states import SUBMITTED, FileState
from MSUnmerged.worker.ids import gen_prefix

Filter = dict[str, Any]


@dataclass(frozen=True)
class FileQuery:
    """Files (dirs: directory records) of one RSE generation by state, error class, job or path prefix; a page of
    `limit` records after `after`. State "submitted" means planned files whose job is live in the batch system
    (`live`: those jobs); a job's files are read within its `job_span` (its document's span; empty: unknown)."""

    rse: str
    generation: float
    state: Optional[str] = None
    job: Optional[str] = None
    dir_prefix: str = ""
    after: Optional[str] = None
    limit: int = 100
    error_class: Optional[str] = None
    dirs: bool = False
    live: Sequence[str] = ()
    job_span: Sequence[str] = ()

    @property
    def scope(self) -> Filter:
        return {"rse": self.rse, "gen": self.generation}

    @property
    def stored(self) -> Optional[str]:
        """The state the records hold (planned, for submitted files)."""
        return FileState.PLANNED if self.state == SUBMITTED else self.state

    def span(self) -> records.Span:
        """The page's _id range: the directory prefix within the generation, narrowed to the job's span, from
        `after` on."""
        lo = gen_prefix(self.rse, self.generation) + self.dir_prefix
        hi = lo + records.TOP
        if self.job_span:
            lo, hi = max(lo, self.job_span[0]), min(hi, self.job_span[1] + "\0")
        if self.after and self.after >= lo:
            return records.Span(self.after, hi, inclusive=False)
        return records.Span(lo, hi)

    def page_key(self, span: records.Span) -> Hashable:
        """What the page holds (span: the RSE, generation, directory prefix, job span and start): FenceCache.reached."""
        return self.dirs, self.state, self.error_class, self.job, span.lo, span.inclusive, span.hi, self.limit

    def pager(self, rows: Collection, buckets: Collection, fence_ids: Sequence[str],
              pack_floor: float = 0) -> records.Pager:
        """Where the page's records come from. Each filter is an index's leading fields (store.ensure_indexes) plus
        a range on its trailing _id, with the indexed field first: SecantusDB picks indexes by the filter's exact
        field set, else by its first indexable clause."""
        row_flt, bucket_flt, pick = self._filters()
        return records.Pager(rows, row_flt, buckets, bucket_flt, self._codes(), self.scope, fence_ids,
                             all_rows=row_flt.keys() == {"rse", "gen"},
                             bucket_floor=self.job_span[0] if self.job_span else "", pick=pick,
                             under=self.dir_prefix.rpartition("/")[0], floor=pack_floor)

    def _filters(self) -> tuple[Filter, Filter, Optional[Filter]]:
        """The row filter, the bucket filter and the pick (records.Pager) of this query."""
        wanted: Filter = {} if self.state in (None, "", SUBMITTED) else {"state": self.stored}
        if self.error_class is not None:
            wanted["error_class"] = self.error_class
        if self.state == SUBMITTED:
            live = {"$in": list(self.live)}
            return ({"job": live, **self.scope, "state": FileState.PLANNED, **wanted},
                    {"job": live, "states": FileState.PLANNED.value}, None)
        if self.job and self.job_span:
            # A span holds few records: each window's rows are read whole, and say which entries have a row.
            return self.scope, {"job": self.job}, {"job": self.job, **wanted}
        if self.job:
            return {"job": self.job, **wanted}, {"job": self.job}, None
        states = {"states": str(self.stored)} if self.stored and not self.dirs else {}
        return {**self.scope, **wanted}, {**self.scope, **states}, None

    def _codes(self) -> str:
        """The bucket entries' codes the page takes: planned entries, or outcomes without error class (error_class
        "")."""
        if self.dirs:
            return ""
        return "".join(c for s, c in bk.CODES.items() if (self.stored is None or s == self.stored) and (
            self.error_class is None or self.error_class == "" and s != FileState.PLANNED))
