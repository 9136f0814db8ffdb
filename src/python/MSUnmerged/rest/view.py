"""The read side of the ledger the REST layer needs, as a narrow protocol plus its MongoDB implementation.

Only this module knows the ledger's collection and field names; the API, page and metrics see
plain dicts in the shapes documented on `LedgerView`.
"""
from __future__ import annotations

from typing import Any, Iterator, Optional, Protocol

from pymongo.database import Database

from MSUnmerged.jobs.backend import JobState
from MSUnmerged.ledger import FILE_STATES as LEDGER_FILE_STATES
from MSUnmerged.ledger import JOB_PLANNED, LIVE_JOB_STATES, PLANNED, RETRIABLE, Ledger

# "submitted": planned files whose job is live in the batch system (as Ledger.query_files has it).
FILE_STATES = (*LEDGER_FILE_STATES, "submitted")
JOB_STATES = (JOB_PLANNED, *(s.value for s in JobState))


class LedgerView(Protocol):
    """Queries the service face asks of the ledger. All answers are JSON-ready plain data."""

    def ping(self) -> None:
        """Raise if the database cannot be reached."""

    def rses(self) -> list[dict[str, Any]]:
        """One summary per RSE: name, state, reason, detail, dump_version, planned, updated, counters, events."""

    def rse(self, name: str) -> Optional[dict[str, Any]]:
        """The summary of one RSE, or None."""

    def files(self, rse: Optional[str], state: Optional[str], error_class: Optional[str],
              dir_prefix: Optional[str], job: Optional[str], after: Optional[str],
              limit: int) -> Iterator[dict[str, Any]]:
        """File records matching every given filter, ordered by `cursor`, after the cursor `after`."""

    def jobs(self, rse: Optional[str], state: Optional[str], limit: int) -> list[dict[str, Any]]:
        """Most recent jobs first."""

    def jobs_by_state(self) -> list[dict[str, Any]]:
        """[{rse, state, count}] over all jobs."""

    def cycles(self, limit: int) -> list[dict[str, Any]]:
        """Most recent polling cycles first: id, started, finished, duration_s, rses, results."""

    def plan_preview(self, rse: str, limit: int) -> dict[str, Any]:
        """What would be deleted now: counts and the first planned files by directory."""


def _clean(doc: dict[str, Any]) -> dict[str, Any]:
    """Mongo document -> JSON-ready dict (ObjectId and datetimes become strings)."""
    out = {}
    for k, v in doc.items():
        if isinstance(v, dict):
            v = _clean(v)
        elif isinstance(v, list):
            v = [_clean(x) if isinstance(x, dict) else _scalar(x) for x in v]
        else:
            v = _scalar(v)
        out[k] = v
    return out


def _scalar(v: Any) -> Any:
    if v is None or isinstance(v, (str, int, float, bool)):
        return v
    if hasattr(v, "timestamp"):  # datetime
        return v.timestamp()
    return str(v)


def _range(prefix: str) -> dict[str, str]:
    """Every string starting with `prefix`."""
    return {"$gte": prefix, "$lt": prefix + "\U0010ffff"}


class MongoLedgerView:
    """LedgerView over the ledger's collections, reusing `Ledger` where it has the query."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self.ledger = Ledger(db)

    def ping(self) -> None:
        self.db.client.admin.command("ping")

    # -- RSEs --------------------------------------------------------------------------------

    @staticmethod
    def _rse_summary(doc: dict[str, Any]) -> dict[str, Any]:
        gen = doc.get("generation")
        entry = next((g for g in doc.get("generations") or [] if g.get("gen") == gen), {})
        counters = dict(doc.get("counters") or {})
        if "files_total" in entry:
            counters.setdefault("files_total", entry["files_total"])
        if isinstance(counters.get("invalid"), dict):  # per reason; the summary wants one number
            counters["invalid_by_reason"] = counters.pop("invalid")
            counters["invalid"] = sum(counters["invalid_by_reason"].values())
        return _clean({
            "name": doc["_id"],
            "state": doc.get("state", "unknown"),
            "reason": doc.get("reason") or "",
            "detail": doc.get("detail") or "",
            "dump_version": gen,
            "planned": entry.get("planned"),
            "updated": doc.get("updated"),
            "counted_at": doc.get("counted_at"),
            "protected_count": doc.get("protected_count"),
            "counters": counters,
            "events": (doc.get("events") or [])[-10:],
        })

    def rses(self) -> list[dict[str, Any]]:
        return [self._rse_summary(d) for d in self.ledger.rse_docs()]

    def rse(self, name: str) -> Optional[dict[str, Any]]:
        doc = self.ledger.rse(name)
        return self._rse_summary(doc) if doc else None

    # -- files -------------------------------------------------------------------------------

    def files(self, rse: Optional[str], state: Optional[str], error_class: Optional[str],
              dir_prefix: Optional[str], job: Optional[str], after: Optional[str],
              limit: int) -> Iterator[dict[str, Any]]:
        """Ledger.query_files' filter (current generation, _id order) plus error_class and job-only queries."""
        query: dict[str, Any] = {}
        if rse:
            gen = self.ledger.rse(rse).get("generation")
            if gen is None:
                return
            # Filter on the indexed (rse, gen, state) fields; a range on _id is slow on SecantusDB.
            query.update(rse=rse, gen=gen)
        if dir_prefix:
            query["lfn"] = _range(dir_prefix)
        if after:
            query.setdefault("_id", {})["$gt"] = after
        if state == "submitted":
            live = [j["_id"] for j in self.db.jobs.find({"rse": rse, "gen": query.get("gen"),
                                                         "state": {"$in": list(LIVE_JOB_STATES)}}, {"_id": 1})]
            query["state"] = PLANNED
            query["job"] = {"$in": [j for j in live if not job or j == job]}
        else:
            if state:
                query["state"] = state
            if job:
                query["job"] = job
        if error_class:
            query["error_class"] = error_class
        cursor = self.db.files.find(query).sort("_id", 1).batch_size(1000)
        if limit:
            cursor = cursor.limit(limit)
        for doc in cursor:
            out = _clean(doc)
            out["cursor"] = out.pop("_id")
            yield out

    # -- jobs and cycles ---------------------------------------------------------------------

    def jobs(self, rse: Optional[str], state: Optional[str], limit: int) -> list[dict[str, Any]]:
        query: dict[str, Any] = {}
        if rse:
            query["rse"] = rse
        if state:
            query["state"] = state
        # Job ids are "<rse>:<gen>:<round>-<n>": descending id order is newest first within an RSE.
        docs = self.db.jobs.find(query).sort("_id", -1).limit(limit)
        return [_clean({"id": d.pop("_id"), **d}) for d in docs]

    def jobs_by_state(self) -> list[dict[str, Any]]:
        pipeline = [{"$group": {"_id": {"rse": "$rse", "state": "$state"}, "count": {"$sum": 1}}}]
        return [{"rse": g["_id"]["rse"], "state": g["_id"]["state"], "count": g["count"]}
                for g in self.db.jobs.aggregate(pipeline)]

    def cycles(self, limit: int) -> list[dict[str, Any]]:
        out = []
        for d in self.ledger.query_cycles(limit):
            d = _clean({"id": d.pop("_id"), **d})
            start, end = d.get("started"), d.get("finished")
            d["duration_s"] = round(end - start, 3) if isinstance(start, (int, float)) and \
                isinstance(end, (int, float)) else None
            out.append(d)
        return out

    def plan_preview(self, rse: str, limit: int) -> dict[str, Any]:
        """The current generation's plan and the files still to delete (planned or to retry)."""
        doc = self.ledger.rse(rse)
        gen = doc.get("generation")
        entry = next((g for g in doc.get("generations") or [] if g.get("gen") == gen), {})
        if gen is None:
            return {"rse": rse, "dump_version": None, "files_to_delete": 0, "shown": 0, "directories": [],
                    "plan": {}, "state": doc.get("state"), "reason": doc.get("reason")}
        query = {"rse": rse, "gen": gen, "state": {"$in": [PLANNED, *RETRIABLE]}}
        dirs: dict[str, list[str]] = {}
        shown = 0
        if limit:
            for f in self.db.files.find(query, {"lfn": 1, "dir": 1}).sort("_id", 1).limit(limit):
                dirs.setdefault(f.get("dir", ""), []).append(f["lfn"])
                shown += 1
        return {"rse": rse, "dump_version": gen, "state": doc.get("state"), "reason": doc.get("reason"),
                "files_to_delete": self.db.files.count_documents(query), "shown": shown,
                "plan": _clean(entry), "directories": [{"dir": k, "files": v} for k, v in sorted(dirs.items())]}
