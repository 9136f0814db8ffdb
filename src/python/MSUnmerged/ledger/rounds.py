"""A job's way through the batch system as the ledger keeps it: its files, intent, submission, requeue and
state; retry rounds."""
from __future__ import annotations

import time
from typing import Any, Mapping, Optional, Protocol, Sequence

from pymongo import UpdateOne

from MSUnmerged.ledger import buckets as bk
from MSUnmerged.ledger.base import LedgerBase, insert_ignoring_duplicates, span
from MSUnmerged.ledger.entries import Entries, Entry
from MSUnmerged.ledger.retry import with_retry
from MSUnmerged.ledger.states import BACKEND_JOB_STATES, RETRIABLE, FileState, JobState
from MSUnmerged.worker.ids import job_id


# What a job's files are read from of its buckets (and what _live_entries rewrites when it finds a row).
BUCKET_FIELDS = {"dir": 1, "job": 1, "names": 1, "codes": 1, "sizes": 1}
# Jobs whose files are read together (submission): a few queries a batch, not a whole batch's buckets at once.
READ_JOBS = 25


class StepFiles(Protocol):
    lfns: Sequence[str]
    dry_run: bool
    protected_until: Optional[float]


class JobIntent(Protocol):
    """What record_job_intent reads of a job about to be submitted (jobs.spec.CleanupJob)."""

    job_id: str
    site: str
    step: StepFiles


class Rounds:
    """Jobs from planned to live (intent, submitted, requeued, polled states) and new rounds of retries."""

    def __init__(self, base: LedgerBase, entries: Entries) -> None:
        self.base = base
        self.entries = entries

    def job_lfns(self, job_id_: str, states: Optional[Sequence[str]] = (FileState.PLANNED,)) -> list[str]:
        """The files of a job in these states (default: still to work on; None: all), sorted."""
        return self.jobs_lfns([job_id_], states)[job_id_]

    def jobs_lfns(self, job_ids: Sequence[str],
                  states: Optional[Sequence[str]] = (FileState.PLANNED,)) -> dict[str, list[str]]:
        """`job_lfns` of each of these jobs: their rows and buckets read READ_JOBS jobs at a time (two queries per
        READ_JOBS jobs, not two a job), then each job's entries sorted out against its own rows, one job at a time."""
        codes = "".join(c for s, c in bk.CODES.items() if states is None or s in states)
        found: dict[str, list[str]] = {}
        for start in range(0, len(job_ids), READ_JOBS):
            chunk = list(job_ids[start:start + READ_JOBS])
            rows, buckets = self._jobs_records(chunk, bool(codes))
            for jid in chunk:
                found[jid] = sorted(self._job_lfns(jid, rows[jid], buckets[jid], codes, states))
        return found

    def _jobs_records(self, chunk: list[str], with_buckets: bool) -> tuple[dict[str, list[dict[str, Any]]],
                                                                           dict[str, list[dict[str, Any]]]]:
        """The rows and (`with_buckets`) the buckets of these jobs, by job: one query each."""
        flt = {"job": chunk[0] if len(chunk) == 1 else {"$in": chunk}}
        what = f"files of {chunk[0]}" + (f" and {len(chunk) - 1} more jobs" if len(chunk) > 1 else "")
        rows: dict[str, list[dict[str, Any]]] = {jid: [] for jid in chunk}
        for row in with_retry(lambda: list(self.base.files.find(flt, {"lfn": 1, "state": 1, "job": 1})), what):
            rows[row["job"]].append(row)
        buckets: dict[str, list[dict[str, Any]]] = {jid: [] for jid in chunk}
        if with_buckets:
            for doc in with_retry(lambda: list(self.base.buckets.find(flt, BUCKET_FIELDS)), f"buckets of {what}"):
                buckets[doc["job"]].append(doc)
        return rows, buckets

    def _job_lfns(self, jid: str, rows: list[dict[str, Any]], buckets: list[dict[str, Any]], codes: str,
                  states: Optional[Sequence[str]]) -> list[str]:
        """One job's files in these states (codes: theirs in buckets) from its rows and buckets, unsorted."""
        lfns = [d["lfn"] for d in rows if states is None or d["state"] in states]
        if not codes:
            return lfns
        if rows or bk.CODES[FileState.WOULD_DELETE] in codes:  # such an entry may have a row of another job
            return lfns + [f"{doc['dir']}/{name}" for doc, _, name in self.entries.live(
                {"job": jid}, codes, {d["_id"] for d in rows}, buckets)]
        # The job has no row that could stand for an entry of its buckets (_live_entries): all are live.
        return lfns + [lfn for doc in buckets for lfn in bk.lfns(doc, codes)]

    def record_job_intent(self, jobs: Sequence[JobIntent], backend: str = "", again: bool = False) -> None:
        """Before submitting: the jobs go from planned to submitting (with site, backend, and until when their
        manifests' protected list may be used); `again`: jobs left submitting by a crash, sent again (their new
        manifests' list)."""
        now = time.time()
        ops = [UpdateOne({"_id": j.job_id, "state": JobState.SUBMITTING if again else JobState.PLANNED},
                         {"$set": {"state": JobState.SUBMITTING, "site": j.site, "backend": backend,
                                   "files": len(j.step.lfns), "dry_run": j.step.dry_run, "intent_at": now,
                                   "protected_until": j.step.protected_until}})
               for j in jobs]
        if ops:
            with_retry(lambda: self.base.jobs.bulk_write(ops, ordered=False), "record intent")

    def mark_submitted(self, job_id_: str, batch_id: str) -> None:
        """The batch system accepted the job (or reconciliation found it there)."""
        self.mark_all_submitted({job_id_: batch_id})

    def mark_all_submitted(self, batch_ids: Mapping[str, str]) -> None:
        """mark_submitted of each job (job id -> its batch id), in one bulk write: a batch's marks cost one command,
        not one a job. Each job is marked only from `submitting`, as one by one."""
        now = time.time()
        ops = [UpdateOne({"_id": jid, "state": JobState.SUBMITTING},
                         {"$set": {"state": JobState.QUEUED, "batch_id": batch_id, "submitted_at": now}})
               for jid, batch_id in batch_ids.items()]
        if ops:
            with_retry(lambda: self.base.jobs.bulk_write(ops, ordered=False), "mark submitted")

    def requeue_job(self, job_id_: str, reason: str) -> None:
        """A job the batch system gave up on before it ever started, one revalidation removed before it started, or
        one whose worker left its files because its protected list was too old: back to planned, its files still
        assigned to it with their tries unchanged (a submission that deleted nothing is not a try); `requeued`
        counts these."""
        with_retry(lambda: self.base.jobs.update_one(
            {"_id": job_id_, "state": {"$in": list(BACKEND_JOB_STATES)}},
            {"$set": {"state": JobState.PLANNED, "reason": reason, "polled_at": time.time()},
             "$unset": {"batch_id": ""}, "$inc": {"requeued": 1}}), "requeue job")

    def set_job_state(self, job_id_: str, state: str, reason: str = "") -> None:
        """A live job's state as the backend reports it (queued, running, held)."""
        with_retry(lambda: self.base.jobs.update_one({"_id": job_id_, "state": {"$in": list(BACKEND_JOB_STATES)}},
                                                {"$set": {"state": state, "reason": reason,
                                                          "polled_at": time.time()}}), "set job state")

    def new_round(self, rse: str, generation: float, max_attempts: int, files_per_job: int,
                  redo_dry_run: bool = False, limit: Optional[int] = None) -> list[str]:
        """Put retriable files (failed, unknown, fewer than `max_attempts` tries), and with `redo_dry_run` the
        files a dry run left (would_delete), into new planned jobs. A throttled generation's round takes at most
        `limit` of them (in path order; the rest wait for the next rounds), and each file's attempts then count
        its own tries (one more than before; a would_delete entry's first real try is its second look)."""
        # A crash between creating a job and assigning its files leaves an empty planned job: drop it.
        for job in self.base.jobs_in(rse, [JobState.PLANNED], generation):
            if not self._has_files(job["_id"]):
                with_retry(lambda: self.base.jobs.delete_one({"_id": job["_id"], "state": JobState.PLANNED}),
                           "drop job")
        round_ = self.base.next_round(rse, generation)
        queries = [{"rse": rse, "gen": generation, "state": {"$in": list(RETRIABLE)},
                    "attempts": {"$lt": max_attempts}}]
        entries: dict[str, Entry] = {}
        if redo_dry_run:
            queries.append({"rse": rse, "gen": generation, "state": FileState.WOULD_DELETE})
            wd = FileState.WOULD_DELETE
            entries = {bk.file_prefix(doc) + name: (doc, i, name) for doc, i, name in self.entries.live(
                {"rse": rse, "gen": generation, "states": wd.value}, bk.CODES[wd])}
        ids = sorted([d["_id"] for q in queries
                      for d in with_retry(lambda: list(self.base.files.find(q, {"_id": 1})), "files for a new round")]
                     + list(entries))[:limit]
        states = [*RETRIABLE, FileState.WOULD_DELETE] if redo_dry_run else list(RETRIABLE)
        created = []
        for n, start in enumerate(range(0, len(ids), files_per_job), 1):
            chunk = ids[start:start + files_per_job]
            jid = job_id(rse, generation, round_, n)
            insert_ignoring_duplicates(self.base.jobs, [{
                "_id": jid, "rse": rse, "gen": generation, "round": round_, "n": n, "state": JobState.PLANNED,
                "files": len(chunk), "created": time.time(), "span": span(chunk[0], chunk[-1])}])
            assign = {"state": FileState.PLANNED, "job": jid, "attempts": round_}
            rows = {"$set": {**assign, "t": time.time()}}
            if limit is not None:  # rounds no longer take every file: attempts count each file's own tries
                del rows["$set"]["attempts"]
                rows["$inc"], assign = {"attempts": 1}, {**assign, "attempts": 2}
            with_retry(lambda: self.base.files.update_many(
                {"_id": {"$in": [i for i in chunk if i not in entries]}, "state": {"$in": states}}, rows),
                "assign retry")
            self.entries.move_to_rows([(entries[i], assign) for i in chunk if i in entries], {"state": {"$in": states}})
            created.append(jid)
        return created

    def _has_files(self, job_id_: str) -> bool:
        return bool(with_retry(lambda: self.base.files.count_documents({"job": job_id_}, limit=1)
                               or self.base.buckets.count_documents({"job": job_id_}, limit=1), "count"))
