"""The ledger's read side for operators (REST API, page, metrics, CLI): a narrow protocol plus its MongoDB
implementation over `Ledger`'s queries. Answers are plain dicts in the shapes documented on `LedgerView`.
"""
from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Iterator, Optional, Protocol

from bson.int64 import Int64

from MSUnmerged.ledger.base import EVENTS_KEPT
from MSUnmerged.ledger.history import FAILURE_SOURCES
from MSUnmerged.ledger.states import RETRIABLE, SUBMITTED, DirState, FileState, JobState
from MSUnmerged.redact import redact, redact_all
from MSUnmerged.ttlcache import TtlCache

if TYPE_CHECKING:  # the ledger builds its view (Ledger.view)
    from MSUnmerged.ledger.store import Ledger

# The states an operator may ask for: "submitted" = planned files whose job is live (Reads.query_files).
FILE_STATES = (*(s.value for s in FileState), SUBMITTED)
DIR_STATES = tuple(s.value for s in DirState)
JOB_STATES = tuple(s.value for s in JobState)
PAGE = 10_000  # records per ledger query when streaming
# A cycle without the bulk of its document (each RSE's result, the RSEs it worked): what `brief` reads.
CYCLE_BRIEF = {"results": 0, "rses": 0}


class LedgerView(Protocol):
    """Queries the service face asks of the ledger. Answers are JSON-ready and keep the ledger's field names."""

    def ping(self) -> None:
        """Raise if the database cannot be reached."""

    def rses(self) -> list[dict[str, Any]]:
        """One per RSE: the `rses` document as written (`name` for its _id), `plan` = its current generation
        entry instead of all `generations`, the last base.EVENTS_KEPT (10) `events`."""

    def rse(self, name: str) -> Optional[dict[str, Any]]:
        """The summary of one RSE, or None."""

    def files(self, rse: Optional[str], state: Optional[str], error_class: Optional[str],
              dir_prefix: Optional[str], job: Optional[str], after: Optional[str],
              limit: int) -> Iterator[dict[str, Any]]:
        """`files` records (with `cursor` for their _id) of the RSE's current generation, or of the job's
        generation when only `job` is given, in `cursor` order after `after`; limit 0: all."""

    def dirs(self, rse: Optional[str], state: Optional[str], error_class: Optional[str],
             dir_prefix: Optional[str], job: Optional[str], after: Optional[str],
             limit: int) -> Iterator[dict[str, Any]]:
        """`dirs` records (directory outcomes; `error_class` is the refusal reason), selected like `files`."""

    def jobs(self, rse: Optional[str], state: Optional[str], limit: int) -> list[dict[str, Any]]:
        """`jobs` records (`id` for their _id), most recent first."""

    def cycles(self, limit: int, brief: bool = False) -> list[dict[str, Any]]:
        """`cycles` records (`id` for their _id) plus `duration_s`, most recent first; brief: without `results`
        and `rses`."""

    def plan_preview(self, rse: str, limit: int) -> dict[str, Any]:
        """The recorded plan of the current generation: counts and the first files still to delete by directory."""

    def health(self, stale_after_s: float, brief: bool = False) -> dict[str, Any]:
        """How the polling goes: `last_cycle` (its `failures`, `ok`, `dry_run`; brief: without `results` and `rses`),
        `last_good_cycle_at` (None: never), `last_good_age_s` (since the last good cycle; before any, since the
        first cycle started; None before any cycle), `age_from` (the time stamp that age runs from, unrounded: an
        alert's start must not move between pushes), `never_good`, `sources` ({source: 1 answered / 0 failed in the
        last finished cycle; a source it did not call is left out: unknown}), `alert` (a sentence when no cycle
        succeeded for `stale_after_s`, counted from the first cycle on a new ledger, else "")."""

    def history(self, rse: Optional[str], days: int) -> list[dict[str, Any]]:
        """Daily aggregates of the last `days` days, oldest first (ledger.history.rse_days)."""

    def failure_totals(self) -> dict[tuple[str, str], int]:
        """Every recorded cycle failure by (source, reason)."""

    def given_up_dirs(self, rse: str, max_tries: int) -> list[dict[str, Any]]:
        """Directories the service stopped retrying on this RSE (PendingDirs.given_up), with their last outcome."""


def sources_of(cycle: dict[str, Any]) -> dict[str, int]:
    """{source: 0 failed / 1 answered} in a finished cycle; a source it did not call is left out (a cycle recorded
    without `answered`, by an older version, counts every source not failed as answered)."""
    failed = {f.get("source") for f in cycle.get("failures") or []}
    answered = cycle.get("answered")
    return {s: int(s not in failed) for s in FAILURE_SOURCES
            if s in failed or answered is None or s in answered}


def health_of(cycles: list[dict[str, Any]], last_good: dict[str, Any], first_started: Optional[float],
              stale_after_s: float, now: float) -> dict[str, Any]:
    """LedgerView.health from the recent cycles (newest first), the last good one and the first cycle's start."""
    finished = [c for c in cycles if c.get("finished") is not None]
    last = finished[0] if finished else None
    good_at = last_good.get("finished")
    good_at = good_at if isinstance(good_at, (int, float)) else None
    # Before any good cycle the delay runs from the first cycle (a new ledger does not alert at its first failure).
    since = good_at if good_at is not None else first_started
    age = round(now - since, 1) if isinstance(since, (int, float)) else None
    alert = ""
    if last is not None and age is not None and age > stale_after_s:
        what = f"for {age / 60:.0f} min" if good_at is not None else f"since the first cycle {age / 60:.0f} min ago"
        reasons = ", ".join(sorted(str(f.get("reason")) for f in last.get("failures") or [])) or "none"
        alert = (f"no polling cycle succeeded {what} (alert after {stale_after_s / 60:.0f} min); "
                 f"last cycle's failures: {reasons}")
    return {"last_cycle": last, "last_good_cycle_at": good_at, "last_good_age_s": age, "age_from": since,
            "never_good": good_at is None,
            "sources": sources_of(last) if last else {},
            "alert": alert}


_PLAIN = frozenset({str, int, Int64, float, bool, type(None)})  # Int64: BSON's 64-bit int, an int


def _clean(doc: dict[str, Any]) -> dict[str, Any]:
    """Mongo document -> JSON-ready dict (ObjectId and datetimes become strings)."""
    if _PLAIN.issuperset(map(type, doc.values())):  # most records: a copy does
        return dict(doc)
    out = {}
    for k, v in doc.items():
        kind = type(v)
        if kind in _PLAIN:  # most values: records are built from these (pages of thousands of records)
            out[k] = v
        elif isinstance(v, dict):
            out[k] = _clean(v)
        elif isinstance(v, list):
            out[k] = [_clean(x) if isinstance(x, dict) else _scalar(x) for x in v]
        else:
            out[k] = _scalar(v)
    return out


def _scalar(v: Any) -> Any:
    if v is None or isinstance(v, (str, int, float, bool)):
        return v
    if hasattr(v, "timestamp"):  # datetime
        return v.timestamp()
    return str(v)


_LEAVES = _PLAIN - {str}


def _shown(doc: dict[str, Any]) -> dict[str, Any]:
    """redact_all(_clean(doc)) in one pass: a document shown whole (an RSE, a job, a cycle), whose texts may
    quote a URL with its credential."""
    if _LEAVES.issuperset(map(type, doc.values())):  # numbers only (an RSE's counts by state, class): a copy does
        return dict(doc)
    out = {}
    for k, v in doc.items():
        kind = type(v)
        if kind in _LEAVES:
            out[k] = v
        elif kind is str:
            out[k] = redact(v)
        elif isinstance(v, dict):
            out[k] = _shown(v)
        elif isinstance(v, list):
            out[k] = [_shown(x) if isinstance(x, dict) else redact_all(_scalar(x)) for x in v]
        else:
            out[k] = redact_all(_scalar(v))
    return out


class MongoLedgerView:
    """LedgerView over the ledger's collections, through `Ledger`'s queries where it has them."""

    def __init__(self, ledger: Ledger, generation_ttl_s: float = 0.0) -> None:
        """generation_ttl_s: what every per-file page starts from, an RSE's current generation and a job's document
        (its generation and span), is read at most this often (0: on every page); a page then follows a newly
        recorded generation within that time."""
        self.ledger = ledger
        self._read: TtlCache[Any] = TtlCache(generation_ttl_s)
        self._finished: dict[str, dict[str, Any]] = {}  # brief documents of recent finished cycles, by _id

    def ping(self) -> None:
        self.ledger.ping()

    # -- RSEs --------------------------------------------------------------------------------

    @staticmethod
    def _rse_summary(doc: dict[str, Any]) -> dict[str, Any]:
        gen = doc.get("generation")
        entry = next((g for g in doc.get("generations") or [] if g.get("gen") == gen), {})
        fields = {k: v for k, v in doc.items() if k not in ("_id", "generations", "events")}
        events = (doc.get("events") or [])[-EVENTS_KEPT:]  # a document written by older code keeps more
        return _shown({"name": doc["_id"], **fields, "plan": entry, "events": events})

    def rses(self) -> list[dict[str, Any]]:
        return [self._rse_summary(d) for d in self.ledger.reads.rse_docs()]

    def rse(self, name: str) -> Optional[dict[str, Any]]:
        doc = self.ledger.base.rse(name)
        return self._rse_summary(doc) if doc else None

    # -- files -------------------------------------------------------------------------------

    def _generation(self, rse: str) -> tuple[Optional[float], float]:
        """The RSE's current generation and its pack floor (Reads.current_generation), read again once
        generation_ttl_s passed."""
        return self._read.get(("generation", rse), lambda: self.ledger.reads.current_generation(rse))

    def _job(self, job: str) -> dict[str, Any]:
        """The job's document ({}: none), read again once generation_ttl_s passed."""
        return self._read.get(("job", job), lambda: self.ledger.base.job(job))

    def files(self, rse: Optional[str], state: Optional[str], error_class: Optional[str],
              dir_prefix: Optional[str], job: Optional[str], after: Optional[str],
              limit: int, dirs: bool = False) -> Iterator[dict[str, Any]]:
        """Pages of Reads.query_files (one index range each) until `limit` records or the end."""
        pack_floor: float = 0  # not known for a job's generation: every ancestor directory's buckets are read
        if job and not rse:
            doc = self._job(job)
            if not doc:
                return
            rse, generation = doc["rse"], doc["gen"]
        elif not rse:
            return
        else:
            generation, pack_floor = self._generation(rse)
        if generation is None:
            return
        left = limit or None
        while True:
            page = self.ledger.reads.query_files(rse, state=state, job=job, dir_prefix=dir_prefix,
                                                 generation=generation, after=after, limit=min(left or PAGE, PAGE),
                                                 error_class=error_class, dirs=dirs, read_job=self._job,
                                                 pack_floor=pack_floor)
            for doc in page["items"]:
                # The page's documents are this call's own: a plain one (most) is changed in place, not copied.
                out = doc if _PLAIN.issuperset(map(type, doc.values())) else _clean(doc)
                out["cursor"] = out.pop("_id")
                if out.get("error"):  # a worker's message may quote a URL with its credential
                    out["error"] = redact(out["error"])
                yield out
            if left is not None:
                left -= len(page["items"])
            after, generation = page["next"], page["generation"]
            if not after or left == 0:
                return

    def dirs(self, rse: Optional[str], state: Optional[str], error_class: Optional[str],
             dir_prefix: Optional[str], job: Optional[str], after: Optional[str],
             limit: int) -> Iterator[dict[str, Any]]:
        return self.files(rse, state, error_class, dir_prefix, job, after, limit, dirs=True)

    # -- jobs and cycles ---------------------------------------------------------------------

    def jobs(self, rse: Optional[str], state: Optional[str], limit: int) -> list[dict[str, Any]]:
        docs = self.ledger.reads.query_jobs(rse, state, limit=limit, newest_first=True)["items"]
        return [_shown({"id": d.pop("_id"), **d}) for d in docs]  # batch reasons may quote URLs

    def cycles(self, limit: int, brief: bool = False, meta: Optional[dict[str, Any]] = None) -> list[dict[str, Any]]:
        """`meta`: the cycles' meta document if read; brief reads keep finished cycles (they no longer change)."""
        out = []
        cycles = self.ledger.cycles.query_cycles(limit, CYCLE_BRIEF, meta, self._finished) if brief else \
            self.ledger.cycles.query_cycles(limit, meta=meta)
        for d in cycles:
            d = _shown({"id": d.pop("_id"), **d})  # failure details may quote a URL with its credential
            start, end = d.get("started"), d.get("finished")
            d["duration_s"] = round(end - start, 3) if isinstance(start, (int, float)) and \
                isinstance(end, (int, float)) else None
            out.append(d)
        return out

    def health(self, stale_after_s: float, brief: bool = False) -> dict[str, Any]:
        meta = self.ledger.cycles.cycles_meta()  # read once for the three reads below
        good = self.ledger.cycles.last_good_cycle({"finished": 1}, meta)  # all health_of reads of it: meta keeps it
        return health_of(self.cycles(5, brief, meta), good, self.ledger.cycles.first_cycle_started(meta), stale_after_s,
                         time.time())

    def history(self, rse: Optional[str], days: int) -> list[dict[str, Any]]:
        return self.ledger.history.rse_days(rse, days)

    def failure_totals(self) -> dict[tuple[str, str], int]:
        return self.ledger.history.cycle_failure_totals()

    def given_up_dirs(self, rse: str, max_tries: int) -> list[dict[str, Any]]:
        given_up = self.ledger.pending_dirs.given_up(rse, max_tries)
        return [_shown({k: v for k, v in d.items() if k != "_id"}) for d in given_up]

    def plan_preview(self, rse: str, limit: int) -> dict[str, Any]:
        """The current generation's plan entry and the files still to delete (planned or to retry)."""
        doc = self.ledger.base.rse(rse)
        gen = doc.get("generation")
        entry = next((g for g in doc.get("generations") or [] if g.get("gen") == gen), {})
        out: dict[str, Any] = {"rse": rse, "generation": gen, "state": doc.get("state"), "reason": doc.get("reason"),
                               "plan": _clean(entry), "files_to_delete": 0, "shown": 0, "directories": []}
        if gen is None:
            return out
        states = (FileState.PLANNED, *RETRIABLE)
        out["files_to_delete"] = self.ledger.counters.count_files(rse, gen, states)
        dirs: dict[str, list[str]] = {}
        for state in states:  # one (rse, gen, state, _id) range each
            left = limit - out["shown"]
            if left <= 0:
                break
            for f in self.ledger.reads.query_files(rse, state=state, generation=gen, limit=left)["items"]:
                dirs.setdefault(f["dir"], []).append(f["lfn"])
                out["shown"] += 1
        out["directories"] = [{"dir": k, "files": sorted(v)} for k, v in sorted(dirs.items())]
        return out
