"""The ledger's reads for operators (REST API, page, CLI): RSE documents, per-file and per-directory pages,
a file's history, jobs. view.py shapes them for the service face."""
from __future__ import annotations

from typing import Any, Callable, Mapping, Optional

from pymongo import ASCENDING, DESCENDING

from MSUnmerged.ledger import buckets as bk
from MSUnmerged.ledger import fences, records
from MSUnmerged.ledger.base import LedgerBase
from MSUnmerged.ledger.filequery import FileQuery
from MSUnmerged.ledger.retry import with_retry
from MSUnmerged.ledger.states import LIVE_JOB_STATES, SUBMITTED, FileState
from MSUnmerged.worker.ids import file_id

RSE_BATCH = 10_000  # RSE documents per reply (a reply stays under 16 MiB whatever this says)
CURRENT = {"generation": 1, "generations.gen": 1, "generations.packing": 1}  # what current_generation reads


class Reads:
    """Pages of the ledger's records in `_id` order, each one index range (see query_files)."""

    def __init__(self, base: LedgerBase) -> None:
        self.base = base

    def rse_docs(self, rse: Optional[str] = None) -> list[dict[str, Any]]:
        flt = {"_id": rse} if rse else {}
        # One reply for the whole fleet (the default first batch is 101 documents, then a second round trip),
        # sorted here: the embedded server sorts by holding every document first (a /metrics scrape reads them all).
        docs = with_retry(lambda: list(self.base.rses.find(flt).batch_size(RSE_BATCH)), "rse docs")
        return sorted(docs, key=lambda d: d["_id"])

    def current_generation(self, rse: str) -> tuple[Optional[float], float]:
        """The RSE's current generation (None: none recorded, or no such RSE) and its buckets.pack_floor (0 when
        its entry is gone: no directory ruled out)."""
        doc = with_retry(lambda: self.base.rses.find_one({"_id": rse}, CURRENT), f"generation of {rse}") or {}
        gen = doc.get("generation")
        entry = next((g for g in doc.get("generations") or [] if g.get("gen") == gen), None)
        return gen, (0 if entry is None else bk.pack_floor(entry))

    def query_files(self, rse: str, state: Optional[str] = None, job: Optional[str] = None,
                    dir_prefix: Optional[str] = None, generation: Optional[float] = None,
                    after: Optional[str] = None, limit: int = 100,
                    error_class: Optional[str] = None, dirs: bool = False,
                    read_job: Optional[Callable[[str], Mapping[str, Any]]] = None,
                    pack_floor: float = 0) -> dict[str, Any]:
        """Files (dirs=True: directory records) of one RSE generation (default: current), by state, error
        class, job or path prefix (filequery.FileQuery). `read_job`: how the job's document (its span) is read
        (default: LedgerBase.job); `pack_floor`: the generation's buckets.pack_floor when the caller knows it (0: not
        known).

        Paginated by _id: pass the answer's `next` as `after`. State "submitted" means planned
        files whose job is live in the batch system; an error class alone means failed files.
        """
        if generation is None:
            generation, pack_floor = self.current_generation(rse)
            if generation is None:
                return {"items": [], "next": None, "generation": None}
        if error_class is not None and state is None and not dirs:
            state = FileState.FAILED
        live = tuple(j["_id"] for j in self.base.jobs_in(rse, LIVE_JOB_STATES, generation)
                     if not job or j["_id"] == job) if state == SUBMITTED else ()
        job_span = tuple((read_job or self.base.job)(job).get("span") or ()) \
            if job and state != SUBMITTED and not dirs else ()
        query = FileQuery(rse, generation, state, job, dir_prefix or "", after, max(1, min(limit, 10_000)),
                          error_class, dirs, live, job_span)
        fence_ids = self.base.fences.get(rse, generation)
        span = query.span()
        key = query.page_key(span)
        docs = query.pager(self.base.dirs if dirs else self.base.files, self.base.buckets, fence_ids, pack_floor).page(
            span, query.limit, self.base.fences.reached.get(key))
        last = docs[-1]["_id"] if len(docs) == query.limit else None
        self.base.fences.reached_at(key, fences.reach(fence_ids, span.hi, last))
        return {"items": docs, "next": last, "generation": generation}

    def file_history(self, rse: str, lfn: str) -> list[dict[str, Any]]:
        """One file's records across the kept generations, newest first."""
        out = []
        for gen in sorted((g["gen"] for g in self.base.rse(rse).get("generations", [])), reverse=True):
            doc = with_retry(lambda: self.base.files.find_one({"_id": file_id(rse, gen, lfn)}), "history") \
                or records.find_entry(self.base.buckets, rse, gen, lfn)
            if doc:
                out.append(doc)
        return out

    def file_records(self, rse: Optional[str] = None, generation: Optional[float] = None,
                     state: Optional[str] = None, job: Optional[str] = None) -> list[dict[str, Any]]:
        """Every file record matching (rows, and bucket entries without a row), in _id order: the per-file
        documents as they were before buckets, for tests, comparisons and exports."""
        flt: dict[str, Any] = {k: v for k, v in (("rse", rse), ("gen", generation), ("job", job)) if v is not None}
        rows = with_retry(lambda: list(self.base.files.find({**flt, **({"state": state} if state else {})})), "rows")
        found = [bk.record(doc, i, name) for doc in with_retry(lambda: list(self.base.buckets.find(flt)), "buckets")
                 for _, i, name in bk.entries(doc, "".join(c for s, c in bk.CODES.items() if not state or s == state))]
        have_rows = records.with_rows(self.base.files, (r["_id"] for r in found))
        return sorted(rows + [r for r in found if r["_id"] not in have_rows], key=lambda d: d["_id"])

    def query_jobs(self, rse: Optional[str] = None, state: Optional[str] = None,
                   generation: Optional[float] = None, after: Optional[str] = None,
                   limit: int = 100, newest_first: bool = False) -> dict[str, Any]:
        """Jobs by RSE, state and generation in _id order, or descending with `newest_first` (ids are
        "<rse>:<gen>:<round>-<n>": newest first within an RSE). Paginated by _id: pass the answer's `next` as
        `after`."""
        flt: dict[str, Any] = {k: v for k, v in (("rse", rse), ("state", state)) if v}
        if generation is not None:
            flt["gen"] = generation
        if after:
            flt["_id"] = {"$lt" if newest_first else "$gt": after}
        limit = max(1, limit)
        order = DESCENDING if newest_first else ASCENDING
        docs = with_retry(lambda: list(self.base.jobs.find(flt).sort("_id", order).limit(limit)), "query jobs")
        return {"items": docs, "next": docs[-1]["_id"] if len(docs) == limit else None}
