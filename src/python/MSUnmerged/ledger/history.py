"""Daily aggregates kept beyond the kept generations: per RSE (files deleted, bytes freed, failures by
class) and per day of polling cycles (how many, how many good, failures by source and reason).

One document per (RSE, day) and per cycle day in the `daily` collection. Each job or cycle writes its own
entry under its key ($set, never $inc), so recording the same job or cycle again changes nothing; the day's
`totals` are then summed again from the entries, and readers fetch only those.
"""
from __future__ import annotations

import re
import time
from typing import Any, Iterable, Mapping, Optional

from MSUnmerged.ledger.base import LedgerBase
from MSUnmerged.ledger.retry import with_retry

COLLECTION = "daily"
# Who failed, as cycles' failures and the metrics name it.
FAILURE_SOURCES = ("rucio", "conmon", "wmstats", "ledger", "backend", "disk", "internal")
CYCLES = "_cycles"  # the `rse` of the cycle days (RSE names never start with "_")
DAYS_SHOWN = 30


def day_of(ts: float) -> str:
    """The UTC day of a time stamp, as the aggregates are keyed."""
    return time.strftime("%Y-%m-%d", time.gmtime(ts))


def _key(name: str) -> str:
    # Field names may hold neither dots nor a leading "$"; ids keep their other characters.
    return re.sub(r"[.$]", "_", name)


def _add(into: dict[str, int], more: Mapping[str, Any]) -> None:
    for k, v in more.items():
        if isinstance(v, int) and not isinstance(v, bool):
            into[k] = into.get(k, 0) + v


def _cycle_day(doc: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"day": doc["day"], "cycles": 0, "ok": 0, "failures": {}}
    for entry in (doc.get("cycles") or {}).values():
        out["cycles"] += 1
        out["ok"] += int(bool(entry.get("ok")))
        _add(out["failures"], entry.get("failures") or {})
    return out


def _rse_day(doc: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"rse": doc["rse"], "day": doc["day"], "deleted": 0, "would_delete": 0, "missing": 0,
                           "bytes_freed": 0, "failed_by_class": {}}
    for entry in (doc.get("jobs") or {}).values():
        outcomes = entry.get("outcomes") or {}
        for k in ("deleted", "would_delete", "missing", "bytes_freed"):
            out[k] += int(outcomes.get(k) or 0)
        _add(out["failed_by_class"], outcomes.get("failed") or {})
        _add(out["failed_by_class"], entry.get("unreported") or {})
    out["failed"] = sum(out["failed_by_class"].values())
    return out


def totals_by_day(rows: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """rse_days rows summed over RSEs, one per day, oldest first."""
    out: dict[str, dict[str, Any]] = {}
    for r in rows:
        d = out.setdefault(r["day"], {"day": r["day"], "deleted": 0, "would_delete": 0, "missing": 0,
                                      "bytes_freed": 0, "failed": 0, "failed_by_class": {}})
        for k in ("deleted", "would_delete", "missing", "bytes_freed", "failed"):
            d[k] += r[k]
        _add(d["failed_by_class"], r["failed_by_class"])
    return [out[k] for k in sorted(out)]


class History:
    """The daily aggregates (see above): written as jobs report and cycles end, read by the operators' view."""

    def __init__(self, base: LedgerBase) -> None:
        self.base = base
        self.coll = base.db[COLLECTION]

    def _put(self, rse: str, day: str, path: str, value: Any) -> None:
        """One entry of the day's document, then the day's totals from all its entries."""
        coll, key = self.coll, f"{rse}|{day}"
        entry = {"$set": {path: value}, "$setOnInsert": {"rse": rse, "day": day}}
        with_retry(lambda: coll.update_one({"_id": key}, entry, upsert=True), "daily aggregate")
        doc = with_retry(lambda: coll.find_one({"_id": key}), "daily aggregate") or {}
        totals = _cycle_day(doc) if rse == CYCLES else _rse_day(doc)
        with_retry(lambda: coll.update_one({"_id": key}, {"$set": {"totals": totals}}), "daily totals")

    def record_job(self, rse: str, job_id: str, day: str, summary: Mapping[str, Any]) -> None:
        """A job's outcome summary (record_outcomes') counted on `day`."""
        states = summary.get("states") or {}
        self._put(rse, day, f"jobs.{_key(job_id)}.outcomes", {
            "deleted": states.get("deleted", 0), "would_delete": states.get("would_delete", 0),
            "missing": states.get("missing", 0), "bytes_freed": summary.get("bytes_freed", 0),
            "failed": dict(summary.get("failed_by_class") or {})})

    def record_unreported(self, rse: str, job_id: str, day: str, error_class: str, n: int) -> None:
        """Files a job ended without reporting on (they became unknown), a failure of `error_class`."""
        if n > 0:
            self._put(rse, day, f"jobs.{_key(job_id)}.unreported", {error_class or "unclassified": n})

    def record_cycle(self, cycle_id: str, started: float, ok: bool, failures: Iterable[Mapping[str, Any]]) -> None:
        """A finished (or failed) polling cycle and its failures ({source, reason, ...} each)."""
        by_reason: dict[str, int] = {}
        for f in failures:
            name = f"{f.get('source') or 'internal'}/{f.get('reason') or 'unknown'}"
            by_reason[name] = by_reason.get(name, 0) + 1
        self._put(CYCLES, day_of(started), f"cycles.{_key(cycle_id)}", {"ok": ok, "failures": by_reason})

    def rse_days(self, rse: Optional[str] = None, days: int = DAYS_SHOWN,
                 now: Optional[float] = None) -> list[dict[str, Any]]:
        """Per (RSE, day) totals of the last `days` days (all RSEs when `rse` is None), oldest first:
        {rse, day, deleted, would_delete, missing, bytes_freed, failed, failed_by_class}."""
        first = day_of((now or time.time()) - (days - 1) * 86400)
        flt: dict[str, Any] = {"rse": rse if rse else {"$ne": CYCLES}, "day": {"$gte": first}}
        docs = with_retry(lambda: list(self.coll.find(flt, {"totals": 1})), "read daily aggregates")
        return sorted((d["totals"] for d in docs if d.get("totals")), key=lambda d: (d["day"], d["rse"]))

    def cycle_failure_totals(self) -> dict[tuple[str, str], int]:
        """Every recorded cycle failure ever, by (source, reason): the counter behind the metrics."""
        totals: dict[tuple[str, str], int] = {}
        for doc in with_retry(lambda: list(self.coll.find({"rse": CYCLES}, {"totals": 1})), "read cycle days"):
            for name, n in ((doc.get("totals") or {}).get("failures") or {}).items():
                source, _, reason = name.partition("/")
                totals[(source, reason)] = totals.get((source, reason), 0) + int(n)
        return totals
