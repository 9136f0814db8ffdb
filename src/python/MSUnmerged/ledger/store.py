"""The ledger: every planned file's fate, every job, every RSE's state and every cycle, in MongoDB.

`Ledger` is the one object the service, the REST API and the CLI hold. It is composed of named parts, each a
class of its own module; the rule: **a part is an attribute of the ledger, made once with it and named for what
it keeps**; callers write `ledger.<part>.<method>(...)`. The parts:
  base          (base.py) the database handle, the collections and the look-ups every part shares: an RSE's
                document and state, a generation's entry, a job and the jobs in some states
  plans         (recording.py) a plan's generation, buckets, fences and jobs; protection dropped; pruning
  rounds        (rounds.py) a job's files, intent, submission, requeue and polled state; retry rounds
  outcomes      (outcomes.py) a job's per-file and directory outcomes, and its close
  counters      (counters.py) files and jobs per state, the RSE's counters
  cycles        (cycles.py) polling cycles and their `meta` document
  reads         (reads.py) the operators' pages (view.py shapes them for the service face)
  pending_dirs  (pending_dirs.py) directories not removed, retried across generations
  slices        (slices.py) a throttled generation's slices released
  site_backoff  (sitebackoff.py) an RSE's site backed off while its configuration is unusable
  ages          (ages.py) when each dataset directory of a throttled RSE was first planned
  history       (history.py) daily aggregates per RSE and of the cycles, kept beyond the generations
Every part holds `base` (composition, no part inherits another); a part that needs another is given it when it is
made (plans: entries.py's bucket entry writes and ages; rounds: the entry writes; outcomes: the entry writes and
history; counters: slices; cycles: history), never the ledger. What a caller sets up for itself is not a part but an
object the ledger makes for it, by a method taking those settings: `leases(owner, ttl_s)`, `request_ids(window_s)`,
`view(generation_ttl_s)`. The ledger's own methods are only those that concern it whole: `ensure_indexes`,
`instance_id`, `ping`. Nothing outside ledger/ touches the database.

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
from pymongo.database import Database

from MSUnmerged.ledger import ages, history, pending_dirs
from MSUnmerged.ledger.ages import Ages
from MSUnmerged.ledger.base import LedgerBase
from MSUnmerged.ledger.counters import Counters
from MSUnmerged.ledger.cycles import Cycles
from MSUnmerged.ledger.entries import Entries
from MSUnmerged.ledger.history import History
from MSUnmerged.ledger.leases import Leases
from MSUnmerged.ledger.outcomes import Outcomes
from MSUnmerged.ledger.pending_dirs import PendingDirs
from MSUnmerged.ledger.reads import Reads
from MSUnmerged.ledger.recording import Plans
from MSUnmerged.ledger.requestids import RequestIds
from MSUnmerged.ledger.retry import with_retry
from MSUnmerged.ledger.rounds import Rounds
from MSUnmerged.ledger.sitebackoff import SiteBackoff
from MSUnmerged.ledger.slices import Slices
from MSUnmerged.ledger.states import OLD_FINAL_STATES
from MSUnmerged.ledger.view import MongoLedgerView


class Ledger:
    """All reads and writes of the ledger, by its parts (see above); writes are idempotent and retried on transient
    errors."""

    def __init__(self, db: Database, generations_kept: int = 3, cycles_kept_days: float = 30.0) -> None:
        self.base = LedgerBase(db, generations_kept, cycles_kept_days)
        entries = Entries(self.base)
        self.ages = Ages(self.base)
        self.slices = Slices(self.base)
        self.history = History(self.base)
        self.plans = Plans(self.base, entries, self.ages)
        self.rounds = Rounds(self.base, entries)
        self.outcomes = Outcomes(self.base, entries, self.history)
        self.counters = Counters(self.base, self.slices)
        self.cycles = Cycles(self.base, self.history)
        self.reads = Reads(self.base)
        self.pending_dirs = PendingDirs(self.base)
        self.site_backoff = SiteBackoff(self.base)

    def instance_id(self) -> str:
        """This ledger's id, made once and kept in the database: batch jobs carry it, so that services with
        different ledgers sharing a batch system never take each other's jobs (job ids repeat across ledgers)."""
        doc = with_retry(lambda: self.base.meta.find_one_and_update(
            {"_id": "ledger"}, {"$setOnInsert": {"instance_id": uuid.uuid4().hex, "created": time.time()}},
            upsert=True, return_document=ReturnDocument.AFTER), "ledger id")
        return str(doc["instance_id"])

    def ping(self) -> None:
        """Raise if the database cannot be reached."""
        self.base.db.client.admin.command("ping")

    def leases(self, owner: str, ttl_s: float) -> Leases:
        """The RSE leases `owner` takes on this ledger (leases.py)."""
        return Leases(self.base.db, owner, ttl_s)

    def request_ids(self, window_s: float) -> RequestIds:
        """The trigger request ids accepted on this ledger within `window_s` (requestids.py)."""
        return RequestIds(self.base.db, window_s)

    def view(self, generation_ttl_s: float = 0.0) -> MongoLedgerView:
        """The operators' read side of this ledger (view.py)."""
        return MongoLedgerView(self, generation_ttl_s)

    def ensure_indexes(self) -> None:
        """Indexes for the operators' questions; each costs ingest time, so only these. Run at start-up, it also
        cuts the events of RSE documents written by older code (trim_events).

        Every per-file page is one of these indexes' leading fields plus a range on its trailing
        `_id`, so a page is an index range scan in `_id` order (see query_files). (rse, gen, _id)
        serves directory prefixes: SecantusDB does not use the `_id` index for ranges.
        """
        def bucket_indexes() -> None:
            b = self.base.buckets
            b.create_index([("rse", ASCENDING), ("gen", ASCENDING), ("states", ASCENDING), ("_id", ASCENDING)])
            b.create_index([("rse", ASCENDING), ("gen", ASCENDING), ("_id", ASCENDING)])
            b.create_index([("job", ASCENDING), ("_id", ASCENDING)])
            b.create_index([("rse", ASCENDING), ("gen", ASCENDING), ("dir", ASCENDING)])
            self.base.fences.coll.create_index([("rse", ASCENDING), ("gen", ASCENDING)])

        def make() -> None:
            for old in ("rse_1_gen_1_state_1", "job_1"):  # prefixes of the indexes below
                if old in self.base.files.index_information():
                    self.base.files.drop_index(old)
            for coll in (self.base.files, self.base.dirs):  # both are paged by query_files
                coll.create_index([("rse", ASCENDING), ("gen", ASCENDING), ("state", ASCENDING), ("_id", ASCENDING)])
                coll.create_index([("rse", ASCENDING), ("gen", ASCENDING), ("state", ASCENDING),
                                   ("error_class", ASCENDING), ("_id", ASCENDING)])
                coll.create_index([("rse", ASCENDING), ("gen", ASCENDING), ("_id", ASCENDING)])
                coll.create_index([("job", ASCENDING), ("_id", ASCENDING)])
            self.base.jobs.create_index([("rse", ASCENDING), ("gen", ASCENDING), ("state", ASCENDING)])
            self.base.jobs.create_index([("state", ASCENDING)])
            self.base.cycles.create_index([("started", DESCENDING)])
            self.base.db[ages.COLLECTION].create_index([("rse", ASCENDING)])
            self.base.db[pending_dirs.COLLECTION].create_index([("rse", ASCENDING), ("tries", ASCENDING)])
            # The cycle days for the failure counter (each scrape) and one RSE's days, without the others' jobs.
            self.base.db[history.COLLECTION].create_index([("rse", ASCENDING), ("day", ASCENDING)])
            bucket_indexes()
        with_retry(make, "create indexes")
        self.base.trim_events()  # start-up: a ledger written by older code gets this code's RSE documents
        for old, new in OLD_FINAL_STATES.items():  # and its jobs this code's one final state
            with_retry(lambda: self.base.jobs.update_many({"state": old}, {"$set": {"state": new}}), "old job states")
