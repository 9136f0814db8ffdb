"""A job's reports recorded: per-file outcomes, directory outcomes, and its close."""
from __future__ import annotations

import re
import time
from typing import Any, Iterable, Mapping, Optional

from pymongo import UpdateMany, UpdateOne

from MSUnmerged.ledger import buckets as bk
from MSUnmerged.ledger.base import BATCH, LedgerBase, write_ignoring_duplicates
from MSUnmerged.ledger.entries import Changes, Entries, Entry
from MSUnmerged.ledger.history import History, day_of
from MSUnmerged.ledger.retry import LedgerError, with_retry
from MSUnmerged.ledger.states import DIR_RANK, OUTCOME_STATES, FileState, JobState
from MSUnmerged.worker.ids import gen_key

# Failures by the storage's message (storage_message): at most this many messages a job, the rest together.
MESSAGES_KEPT, MESSAGE_CHARS, OTHER_MESSAGES = 50, 200, "other messages"
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://\S+")
_PATH = re.compile(r"(?<![\w.])/[^\s'\"]+")


def storage_message(error: str) -> str:
    """A failure's message as the storage gave it, without what names the file (URLs, absolute paths), so that
    failures tally by message (WMCore's gfalErrors): "Permission denied: /pnfs/x/f.root" -> "Permission denied:
    <path>"."""
    text = _URL.sub("<url>", error)
    text = " ".join(_PATH.sub("<path>", text).split())
    return text[:MESSAGE_CHARS] or "no message"


def message_tally(by_message: Mapping[str, int]) -> list[dict[str, Any]]:
    """Counts by message as stored: [{message, n}], most frequent first (a message may hold dots and "$",
    which field names may not)."""
    return [{"message": m, "n": n} for m, n in sorted(by_message.items(), key=lambda kv: (-kv[1], kv[0]))]


def _needs_row(state: str, error_class: str, error: str) -> bool:
    """Whether an outcome is kept as a row rather than a bucket code."""
    return state not in bk.CODES or bool(error_class or error)


class Outcomes:
    """What a job's report and its end change: its files' and directories' records, its summary."""

    def __init__(self, base: LedgerBase, entries: Entries, history: History) -> None:
        self.base = base
        self.entries = entries
        self.history = history

    def record_outcomes(self, job_id_: str, outcomes: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
        """Sink for the collector: per-file outcomes of one job, as
        {"lfn", "state" (one of OUTCOME_STATES), "error_class"?, "error"?, "size"?}.

        Only files still assigned to this job change (a late report never overwrites a retry);
        repeating the call gives the same records. Returns the job's outcome summary.
        """
        job = self.base.job(job_id_)
        if not job:
            raise LedgerError("unknown_job", f"no job {job_id_} in the ledger")
        prefix = f"{job['rse']}|{gen_key(job['gen'])}|"
        now = time.time()
        by_message: dict[str, int] = {}
        summary: dict[str, Any] = {"states": {}, "failed_by_class": {}, "bytes_freed": 0}
        given: dict[str, tuple[str, str, str, Optional[int]]] = {}  # file _id -> (state, class, error, size)
        for o in outcomes:
            state = o.get("state")
            if state not in OUTCOME_STATES:
                raise LedgerError("bad_outcome", f"job {job_id_}: unknown file state {state!r} for {o.get('lfn')}")
            state = FileState(state).value
            cls, err = str(o.get("error_class") or ""), str(o.get("error") or "")[:1000]
            summary["states"][state] = summary["states"].get(state, 0) + 1
            if state == FileState.FAILED:
                summary["failed_by_class"][cls] = summary["failed_by_class"].get(cls, 0) + 1
                key = storage_message(err)
                if key in by_message or len(by_message) < MESSAGES_KEPT:
                    by_message[key] = by_message.get(key, 0) + 1
                else:
                    by_message[OTHER_MESSAGES] = by_message.get(OTHER_MESSAGES, 0) + 1
            size = o.get("size")
            if not (isinstance(size, int) and not isinstance(size, bool) and size >= 0):
                size = None
            elif state == FileState.DELETED:
                summary["bytes_freed"] += size
            given[prefix + o["lfn"]] = (state, cls, err, size)
        summary["failed_by_message"] = message_tally(by_message)
        self._record_file_outcomes(job_id_, given, now)
        day = job.get("day") or day_of(now)  # a repeated call counts on the first call's day
        with_retry(lambda: self.base.jobs.update_one({"_id": job_id_}, {"$set": {"summary": summary, "day": day}}),
                   "job summary")
        self.history.record_job(job["rse"], job_id_, day, summary)
        return summary

    def _record_file_outcomes(self, job_id_: str, given: Mapping[str, tuple[str, str, str, Optional[int]]],
                              now: float) -> None:
        """Rows of this job are updated; bucket entries of this job take a code, or become rows when the
        outcome needs one; files with a row of another job, or in none of this job's buckets, are left.
        The job's rows are read by job, not looked up file by file (_live_entries says why that suffices; it also
        sets ROW on entries a crash left beside their row, so that the counts follow the rows)."""
        rows = {d["_id"] for d in with_retry(lambda: list(self.base.files.find({"job": job_id_}, {"_id": 1})),
                                             f"rows of {job_id_}")}
        entries = {bk.file_prefix(e[0]) + e[2]: e
                   for e in self.entries.live({"job": job_id_}, "".join(bk.CODES.values()), rows)}
        row_ops: list[Any] = []
        to_rows: list[tuple[Entry, dict[str, Any]]] = []  # (entry, its row's fields)
        coded: Changes = {}
        grouped: dict[tuple[str, str, str], list[str]] = {}
        for fid, (state, cls, err, size) in given.items():
            if fid in rows:
                if size is None:
                    grouped.setdefault((state, cls, err), []).append(fid)
                else:
                    row_ops.append(UpdateOne({"_id": fid, "job": job_id_}, {"$set": {
                        "state": state, "error_class": cls, "error": err, "size": size, "t": now}}))
            elif fid in entries:
                doc, i, _ = entries[fid]
                if _needs_row(state, cls, err):
                    to_rows.append((entries[fid], {"state": state, "error_class": cls, "error": err,
                                                   **({} if size is None else {"size": size})}))
                else:
                    coded.setdefault(doc["_id"], (doc, {}))[1][i] = (bk.CODES[FileState(state)], size)
        for (state, cls, err), ids in grouped.items():
            for start in range(0, len(ids), BATCH):
                row_ops.append(UpdateMany({"_id": {"$in": ids[start:start + BATCH]}, "job": job_id_},
                                          {"$set": {"state": state, "error_class": cls, "error": err, "t": now}}))
        if row_ops:
            with_retry(lambda: self.base.files.bulk_write(row_ops, ordered=False), f"outcomes of {job_id_}")
        self.entries.move_to_rows(to_rows, {"job": job_id_}, coded)

    def record_dirs(self, job_id_: str, outcomes: Iterable[Mapping[str, Any]]) -> int:
        """Sink for the collector: directory outcomes of one job, as {"dir", "state" (a DIR_RANK key),
        "error_class"?, "error"?, "pfn"?}. A directory keeps the outcome of highest rank any job reported
        (equal rank: the latest); repeating the call gives the same records. Returns how many were given."""
        job = self.base.job(job_id_)
        if not job:
            raise LedgerError("unknown_job", f"no job {job_id_} in the ledger")
        prefix = f"{job['rse']}|{gen_key(job['gen'])}|"
        now = time.time()
        ops = []
        for o in outcomes:
            state = o.get("state")
            if state not in DIR_RANK:
                raise LedgerError("bad_outcome", f"job {job_id_}: unknown directory state {state!r} for {o.get('dir')}")
            doc = {"rse": job["rse"], "gen": job["gen"], "dir": o["dir"], "state": state, "rank": DIR_RANK[state],
                   "error_class": str(o.get("error_class") or ""), "error": str(o.get("error") or "")[:1000],
                   "pfn": o.get("pfn"), "job": job_id_, "t": now}
            # A higher-ranked record makes the upsert's insert collide: a duplicate key, ignored below.
            ops.append(UpdateOne({"_id": prefix + o["dir"], "rank": {"$lte": doc["rank"]}}, {"$set": doc}, upsert=True))
        if ops:
            write_ignoring_duplicates(self.base.dirs, ops)
        return len(ops)

    def close_job(self, job_id_: str, state: str, reason: str = "", error_class: str = "no_report",
                  **facts: Any) -> int:
        """The job is over: files it did not report on become unknown (retried) with `error_class`;
        returns how many. `facts`: the batch system's own words (exit_code, batch_reason) kept on the job."""
        now = time.time()
        unknown = {"state": FileState.UNKNOWN, "error_class": error_class, "error": reason[:1000]}
        res = with_retry(lambda: self.base.files.update_many(
            {"job": job_id_, "state": FileState.PLANNED}, {"$set": {**unknown, "t": now}}), f"close {job_id_}")
        n = res.modified_count + self.entries.move_to_rows(
            [(e, unknown) for e in self.entries.live({"job": job_id_, "states": FileState.PLANNED.value},
                                                      bk.CODES[FileState.PLANNED])],
            {"job": job_id_, "state": FileState.PLANNED})
        job = with_retry(lambda: self.base.jobs.find_one_and_update({"_id": job_id_}, {"$set": {
            "state": state, "reason": reason, "finished_at": now, **facts}}), f"close {job_id_}") or {}
        if job and n and state != JobState.REMOVED:  # our own removal (revalidation) is no failure
            self.history.record_unreported(job["rse"], job_id_, job.get("day") or day_of(now), error_class, n)
        return n
