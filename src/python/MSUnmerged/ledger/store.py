"""The ledger: every planned file's fate, every job, every RSE's state and every cycle, in MongoDB.

`Ledger` is the one object the service, the REST API and the CLI hold; each part of its work is a class of
its own module, all on one database handle (base.py):
  recording.py  a plan's generation, buckets, fences and jobs; protection dropped later; pruning
  rounds.py     a job's intent, submission, requeue and polled state; retry rounds
  outcomes.py   a job's per-file and directory outcomes, and its close
  counters.py   files and jobs per state, the RSE's counters
  cycles.py     polling cycles and their `meta` document
  reads.py      the operators' pages (view.py shapes them for the service face)
Its view, leases, trigger request ids, dataset ages and ping are its own (`view`, `leases`, `request_ids`,
`dataset_ages`, `ping`): nothing outside ledger/ touches the database.

Collections (see docs/ledger.md):
  rses          one document per RSE: state, reason, kept generations, counters, last events
  buckets       one per (RSE, generation, directory, round-1 job): its files' names and outcome codes
  fences        a generation's bucket ids in order, a few documents per generation: they bound the pages' reads
  files         a row per file that needs one (failures, unknown, protected since planning, retries);
                _id "<rse>|<generation>|<lfn>". A file's record is its row, else its bucket entry (records.py)
  dirs          one per (RSE, generation, directory) a job reported on; _id "<rse>|<generation>|<dir>"
  jobs          one per cleanup job; _id "<rse>:<generation>:<round>-<n>"
  cycles        one per polling cycle of an instance
  meta          "ledger" (this ledger's instance id) and "cycles" (the latest cycles, the last good one)
  daily         daily aggregates per RSE and of the cycles (history.py)
  dataset_ages  when each dataset directory of a throttled RSE was first planned (ages.py)
  pending_dirs  directories not removed, retried across generations (pending_dirs.py)
  leases        per-RSE leases between instances (leases.py)
  request_ids   trigger request ids accepted within the replay window (requestids.py)

A file's `state` changes when its job's outcome is known; whether the job is submitted is on the
job document.
"""
from __future__ import annotations

import time
import uuid

from pymongo import ASCENDING, DESCENDING, ReturnDocument

from MSUnmerged.ledger import ages, history, pending_dirs
from MSUnmerged.ledger.counters import Counters
from MSUnmerged.ledger.cycles import Cycles
from MSUnmerged.ledger.leases import Leases
from MSUnmerged.ledger.outcomes import Outcomes
from MSUnmerged.ledger.reads import Reads
from MSUnmerged.ledger.recording import Recording
from MSUnmerged.ledger.requestids import RequestIds
from MSUnmerged.ledger.retry import with_retry
from MSUnmerged.ledger.rounds import Rounds
from MSUnmerged.ledger.states import OLD_FINAL_STATES
from MSUnmerged.ledger.view import MongoLedgerView


class Ledger(Recording, Rounds, Outcomes, Counters, Cycles, Reads):
    """All reads and writes of the ledger; writes are idempotent and retried on transient errors."""

    def instance_id(self) -> str:
        """This ledger's id, made once and kept in the database: batch jobs carry it, so that services with
        different ledgers sharing a batch system never take each other's jobs (job ids repeat across ledgers)."""
        doc = with_retry(lambda: self.meta.find_one_and_update(
            {"_id": "ledger"}, {"$setOnInsert": {"instance_id": uuid.uuid4().hex, "created": time.time()}},
            upsert=True, return_document=ReturnDocument.AFTER), "ledger id")
        return str(doc["instance_id"])

    def ping(self) -> None:
        """Raise if the database cannot be reached."""
        self.db.client.admin.command("ping")

    def leases(self, owner: str, ttl_s: float) -> Leases:
        """The RSE leases `owner` takes on this ledger (leases.py)."""
        return Leases(self.db, owner, ttl_s)

    def request_ids(self, window_s: float) -> RequestIds:
        """The trigger request ids accepted on this ledger within `window_s` (requestids.py)."""
        return RequestIds(self.db, window_s)

    def view(self, generation_ttl_s: float = 0.0) -> MongoLedgerView:
        """The operators' read side of this ledger (view.py)."""
        return MongoLedgerView(self, generation_ttl_s)

    def dataset_ages(self, rse: str) -> dict[bytes, float]:
        """When the ledger first saw each dataset directory of the RSE's throttled plans (ages.first_seen)."""
        return ages.first_seen(self.db, rse)

    def ensure_indexes(self) -> None:
        """Indexes for the operators' questions; each costs ingest time, so only these. Run at start-up, it also
        cuts the events of RSE documents written by older code (trim_events).

        Every per-file page is one of these indexes' leading fields plus a range on its trailing
        `_id`, so a page is an index range scan in `_id` order (see query_files). (rse, gen, _id)
        serves directory prefixes: SecantusDB does not use the `_id` index for ranges.
        """
        def bucket_indexes() -> None:
            b = self.buckets
            b.create_index([("rse", ASCENDING), ("gen", ASCENDING), ("states", ASCENDING), ("_id", ASCENDING)])
            b.create_index([("rse", ASCENDING), ("gen", ASCENDING), ("_id", ASCENDING)])
            b.create_index([("job", ASCENDING), ("_id", ASCENDING)])
            b.create_index([("rse", ASCENDING), ("gen", ASCENDING), ("dir", ASCENDING)])
            self.fences.coll.create_index([("rse", ASCENDING), ("gen", ASCENDING)])

        def make() -> None:
            for old in ("rse_1_gen_1_state_1", "job_1"):  # prefixes of the indexes below
                if old in self.files.index_information():
                    self.files.drop_index(old)
            for coll in (self.files, self.dirs):  # both are paged by query_files
                coll.create_index([("rse", ASCENDING), ("gen", ASCENDING), ("state", ASCENDING), ("_id", ASCENDING)])
                coll.create_index([("rse", ASCENDING), ("gen", ASCENDING), ("state", ASCENDING),
                                   ("error_class", ASCENDING), ("_id", ASCENDING)])
                coll.create_index([("rse", ASCENDING), ("gen", ASCENDING), ("_id", ASCENDING)])
                coll.create_index([("job", ASCENDING), ("_id", ASCENDING)])
            self.jobs.create_index([("rse", ASCENDING), ("gen", ASCENDING), ("state", ASCENDING)])
            self.jobs.create_index([("state", ASCENDING)])
            self.cycles.create_index([("started", DESCENDING)])
            self.db[ages.COLLECTION].create_index([("rse", ASCENDING)])
            self.db[pending_dirs.COLLECTION].create_index([("rse", ASCENDING), ("tries", ASCENDING)])
            # The cycle days for the failure counter (each scrape) and one RSE's days, without the others' jobs.
            self.db[history.COLLECTION].create_index([("rse", ASCENDING), ("day", ASCENDING)])
            bucket_indexes()
        with_retry(make, "create indexes")
        self.trim_events()  # start-up: a ledger written by older code gets this code's RSE documents
        for old, new in OLD_FINAL_STATES.items():  # and its jobs this code's one final state
            with_retry(lambda: self.jobs.update_many({"state": old}, {"$set": {"state": new}}), "old job states")
