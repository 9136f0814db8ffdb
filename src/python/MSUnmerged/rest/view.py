"""The read side of the ledger the REST layer needs, as a narrow protocol plus its MongoDB implementation.

Only this module knows the ledger's collection and field names; the API, page and metrics see
plain dicts in the shapes documented on `LedgerView`.
"""
from __future__ import annotations

import re
from typing import Any, Iterator, Optional, Protocol

from pymongo.database import Database

FILE_STATES = ("planned", "submitted", "deleted", "missing", "failed", "skipped_protected", "skipped")
JOB_STATES = ("created", "submitted", "idle", "running", "held", "done", "failed", "removed", "lost")


class LedgerView(Protocol):
    """Queries the service face asks of the ledger. All answers are JSON-ready plain data."""

    def ping(self) -> None:
        """Raise if the database cannot be reached."""

    def rses(self) -> list[dict[str, Any]]:
        """One summary per RSE: name, state, reason, dump_version, last_start, last_end, counters."""

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
        """Most recent polling cycles first: start, end, duration, rses, files_deleted, errors."""

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


class MongoLedgerView:
    """LedgerView over the ledger's MongoDB collections (rses, files, jobs, cycles)."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def ping(self) -> None:
        self.db.client.admin.command("ping")

    # -- RSEs --------------------------------------------------------------------------------

    def _rse_summary(self, doc: dict[str, Any]) -> dict[str, Any]:
        doc = _clean(doc)
        counters = doc.get("counters") or {}
        return {
            "name": doc.get("rse") or doc.get("_id"),
            "state": doc.get("state", "unknown"),
            "reason": doc.get("reason") or "",
            "dump_version": doc.get("dump_version"),
            "last_start": doc.get("started"),
            "last_end": doc.get("finished"),
            "updated": doc.get("updated"),
            "lease_owner": (doc.get("lease") or {}).get("owner"),
            "protected_count": doc.get("protected_count"),
            "counters": counters,
        }

    def rses(self) -> list[dict[str, Any]]:
        return [self._rse_summary(d) for d in self.db.rses.find({}).sort("_id", 1)]

    def rse(self, name: str) -> Optional[dict[str, Any]]:
        doc = self.db.rses.find_one({"_id": name})
        return self._rse_summary(doc) if doc else None

    # -- files -------------------------------------------------------------------------------

    def files(self, rse: Optional[str], state: Optional[str], error_class: Optional[str],
              dir_prefix: Optional[str], job: Optional[str], after: Optional[str],
              limit: int) -> Iterator[dict[str, Any]]:
        query: dict[str, Any] = {}
        if rse:
            query["rse"] = rse
        if state:
            query["state"] = state
        if error_class:
            query["error_class"] = error_class
        if job:
            query["job"] = job
        if dir_prefix:
            # An anchored, escaped prefix uses the index on dir like a range scan.
            query["dir"] = {"$regex": "^" + re.escape(dir_prefix)}
        if after:
            query["lfn"] = {"$gt": after}
        cursor = self.db.files.find(query, {"_id": 0}).sort("lfn", 1).batch_size(1000)
        if limit:
            cursor = cursor.limit(limit)
        for doc in cursor:
            out = _clean(doc)
            out["cursor"] = out.get("lfn")
            yield out

    # -- jobs and cycles ---------------------------------------------------------------------

    def jobs(self, rse: Optional[str], state: Optional[str], limit: int) -> list[dict[str, Any]]:
        query: dict[str, Any] = {}
        if rse:
            query["rse"] = rse
        if state:
            query["state"] = state
        docs = self.db.jobs.find(query).sort("submitted", -1).limit(limit)
        return [_clean({"id": d.pop("_id"), **d}) for d in docs]

    def jobs_by_state(self) -> list[dict[str, Any]]:
        pipeline = [{"$group": {"_id": {"rse": "$rse", "state": "$state"}, "count": {"$sum": 1}}}]
        return [{"rse": g["_id"]["rse"], "state": g["_id"]["state"], "count": g["count"]}
                for g in self.db.jobs.aggregate(pipeline)]

    def cycles(self, limit: int) -> list[dict[str, Any]]:
        out = []
        for d in self.db.cycles.find({}).sort("started", -1).limit(limit):
            d = _clean({"id": d.pop("_id"), **d})
            start, end = d.get("started"), d.get("finished")
            d["duration_s"] = round(end - start, 3) if isinstance(start, (int, float)) and \
                isinstance(end, (int, float)) else None
            out.append(d)
        return out

    def plan_preview(self, rse: str, limit: int) -> dict[str, Any]:
        summary = self.rse(rse)
        dirs: dict[str, list[str]] = {}
        shown = 0
        for doc in self.db.files.find({"rse": rse, "state": "planned"}, {"lfn": 1, "dir": 1}).limit(limit):
            dirs.setdefault(doc.get("dir", ""), []).append(doc["lfn"])
            shown += 1
        planned = self.db.files.count_documents({"rse": rse, "state": "planned"})
        return {"rse": rse, "dump_version": summary["dump_version"] if summary else None,
                "files_to_delete": planned, "shown": shown,
                "directories": [{"dir": k, "files": v} for k, v in sorted(dirs.items())]}
