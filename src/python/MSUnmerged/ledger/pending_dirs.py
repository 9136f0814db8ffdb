"""Directories a plan gave as removable that its jobs did not remove: remembered per RSE across generations and
retried by later cycles (directory jobs: a cleanup job with `retry_dirs` and no file) until removed or no
longer removable.

Collection `pending_dirs`, _id "<rse>|<dir>": `rse, dir, since` (the generation that first planned it),
`tries` (directory jobs that tried it), `state` and `error` (the last outcome), `t`. A generation's directories
are remembered once its work is over (finished, or replaced by a newer dump): those whose record says they were
not removed (not attempted, not empty, a storage error; a job that ended without reporting one records it not
attempted). Entries leave when a job removes the directory or finds it gone, when the worker refuses it, or when
the service finds it no longer removable (protected, excluded) before building a directory job.
"""
from __future__ import annotations

import time
from typing import Any, Callable, Iterable, Mapping

from pymongo import DeleteOne, UpdateOne

from MSUnmerged.ledger.base import LedgerBase
from MSUnmerged.ledger.retry import with_retry
from MSUnmerged.ledger.states import LIVE_JOB_STATES, DirState, JobState
from MSUnmerged.worker.ids import gen_key, job_id

COLLECTION = "pending_dirs"
# Directory outcomes that leave a removable directory in place: worth another try later.
NOT_REMOVED = (DirState.NOT_ATTEMPTED, DirState.NOT_EMPTY, DirState.TIMEOUT, DirState.STORAGE_ERROR,
               DirState.PERMISSION_DENIED, DirState.AUTH_FAILED)
# Outcomes that settle an entry: the directory is gone, or the worker will not remove it.
SETTLED = (DirState.REMOVED, DirState.MISSING, DirState.REFUSED)
REMEMBERED = "dirs_remembered"  # on the generation entry, once its directories were remembered


class PendingDirs:
    """The RSEs' directories not removed, remembered and retried (see above)."""

    def __init__(self, base: LedgerBase) -> None:
        self.base = base
        self.coll = base.db[COLLECTION]

    def remember(self, rse: str, generation: float) -> int:
        """Remember the generation's directories its jobs did not remove (once per generation); returns how many."""
        if self.base.generation_entry(rse, generation).get(REMEMBERED):
            return 0
        not_removed = {"rse": rse, "gen": generation, "state": {"$in": [s.value for s in NOT_REMOVED]}}
        docs = with_retry(lambda: list(self.base.dirs.find(not_removed, {"dir": 1, "state": 1, "error": 1})),
                          "directories not removed")
        now = time.time()
        ops = [UpdateOne({"_id": f"{rse}|{d['dir']}"},
                         {"$set": {"rse": rse, "dir": d["dir"], "state": d["state"], "error": d.get("error", ""),
                                   "t": now},
                          "$min": {"since": generation}, "$setOnInsert": {"tries": 0}}, upsert=True) for d in docs]
        if ops:
            with_retry(lambda: self.coll.bulk_write(ops, ordered=False), "remember directories")
        with_retry(lambda: self.base.rses.update_one({"_id": rse, "generations.gen": generation},
                                                     {"$set": {f"generations.$.{REMEMBERED}": True}}), "remembered")
        return len(ops)

    def due(self, rse: str, max_tries: int) -> list[dict[str, Any]]:
        """The RSE's entries with tries left, by directory."""
        return with_retry(lambda: list(self.coll.find({"rse": rse, "tries": {"$lt": max_tries}})
                                       .sort("_id", 1)), f"pending directories of {rse}")

    def given_up(self, rse: str, max_tries: int, limit: int = 200) -> list[dict[str, Any]]:
        """The RSE's entries out of tries (the service no longer retries them), by directory: `dir`, `since`,
        `tries`, and the last outcome (`state`, `error`) that says why."""
        return with_retry(lambda: list(self.coll.find({"rse": rse, "tries": {"$gte": max_tries}})
                                       .sort("_id", 1).limit(limit)), f"directories given up on {rse}")

    def plan_jobs(self, rse: str, generation: float, max_tries: int, per_job: int,
                  removable: Callable[[str], bool]) -> list[str]:
        """Directory jobs (planned, in the current generation) for the RSE's entries with tries left, unless one is
        in flight already; entries `removable` says are no longer removable are forgotten. Returns the jobs made."""
        entries = self.due(rse, max_tries)  # first: most RSEs have none, and their planned jobs are not read
        if not entries:
            return []
        busy = [j for j in self.base.jobs_in(rse, [JobState.PLANNED, *LIVE_JOB_STATES], generation)
                if j.get("retry_dirs")]
        if busy:
            return []
        gone = [e["_id"] for e in entries if not removable(e["dir"])]
        if gone:
            with_retry(lambda: self.coll.delete_many({"_id": {"$in": gone}}), "forget directories")
        dirs = [e["dir"] for e in entries if e["_id"] not in set(gone)]
        if not dirs:
            return []
        round_ = self.base.next_round(rse, generation)
        now = time.time()
        docs = [{"_id": job_id(rse, generation, round_, n), "rse": rse, "gen": generation, "round": round_, "n": n,
                 "state": JobState.PLANNED, "files": 0, "retry_dirs": dirs[start:start + per_job], "created": now,
                 "span": []}
                for n, start in enumerate(range(0, len(dirs), per_job), 1)]
        with_retry(lambda: self.base.jobs.insert_many(docs), "directory jobs")
        return [d["_id"] for d in docs]

    def settle(self, job: Mapping[str, Any], holding: Iterable[str] = ()) -> None:
        """After a directory job was collected: entries it removed, found gone or was refused leave; the others
        count one more try. `holding`: the directories holding its retried ones, which it was given too where the plan
        lists them removable: their entries (another job's retried directories) leave when their record says so, with
        no try counted (that job may have tried one before this one emptied it)."""
        dirs: list[str] = list(job.get("retry_dirs") or [])
        others = set(holding) - set(dirs)
        prefix = f"{job['rse']}|{gen_key(job['gen'])}|"
        records = {r["dir"]: r["state"] for r in with_retry(lambda: list(self.base.dirs.find(
            {"_id": {"$in": [prefix + d for d in [*dirs, *others]]}}, {"dir": 1, "state": 1})), "directory outcomes")}
        now = time.time()
        ops: list[Any] = []
        for d in dirs:
            state = records.get(d, DirState.NOT_ATTEMPTED.value)
            key = {"_id": f"{job['rse']}|{d}"}
            ops.append(DeleteOne(key) if state in SETTLED else
                       UpdateOne(key, {"$inc": {"tries": 1}, "$set": {"state": state, "t": now}}))
        ops += [DeleteOne({"_id": f"{job['rse']}|{d}"}) for d in sorted(others) if records.get(d) in SETTLED]
        if ops:
            with_retry(lambda: self.coll.bulk_write(ops, ordered=False), "settle directories")
