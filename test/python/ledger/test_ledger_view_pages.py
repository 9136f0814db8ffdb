"""The per-file pages' reads on a real SecantusDB: a job's page tells the entries that have a row from the rows of
its span (no look-up by id), a directory's pages read the ancestors' buckets by an index's fields, and serve's view
keeps an RSE's current generation for its time to live."""
from __future__ import annotations

import heapq
import itertools
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pymongo import MongoClient, monitoring
from pymongo.database import Database

from MSUnmerged.ledger import Ledger, job_id
from MSUnmerged.ledger import buckets as bk
from MSUnmerged.ledger import records
from MSUnmerged.seal import PlanReader
from test_ledger_store import GEN, RSE, make_plan

pytestmark = pytest.mark.integration


class Finds(monitoring.CommandListener):
    """The (collection, filter) of every `find`."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, dict[str, Any]]] = []

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        if event.command_name == "find":
            self.seen.append((event.command["find"], dict(event.command.get("filter") or {})))

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass


def paged(ledger: Ledger, limit: int, **query: Any) -> list[dict[str, Any]]:
    out, after = [], None
    while True:
        page = ledger.reads.query_files(RSE, after=after, limit=limit, **query)
        out += page["items"]
        if not (after := page["next"]):
            return out


def a_row_beside_its_entry(db: Database, job: str, code: str, other_job: str) -> str:
    """A crash's leftover: a row (of another job) written for one of `job`'s entries with `code`, whose code
    was not set to ROW yet. Returns the file's _id."""
    doc = next(d for d in db.buckets.find({"job": job}) if code in d["codes"])
    i = doc["codes"].index(code)
    row = {**bk.record(doc, i, bk.names(doc)[i]), "job": other_job, "state": "planned", "attempts": 2}
    db.files.insert_one(row)
    return row["_id"]


def a_recorded_job(tmp_path: Path, db: Database) -> tuple[Ledger, str, list[str]]:
    """A ledger with a plan recorded, one of its jobs and that job's files."""
    ledger = Ledger(db)
    ledger.ensure_indexes()
    ledger.plans.record_plan(PlanReader(tmp_path / "plan"), make_plan(tmp_path), GEN)
    job = job_id(RSE, GEN, 1, 2)
    return ledger, job, ledger.rounds.job_lfns(job)


def test_a_job_page_reads_its_span_rows_and_looks_no_entry_up(tmp_path: Path, mongo_url: str,
                                                              mongo_db: Database) -> None:
    ledger, job, lfns = a_recorded_job(tmp_path, mongo_db)
    ledger.outcomes.record_outcomes(job, [{"lfn": x, "state": ("failed", "deleted", "would_delete", "missing")[i % 4],
                                           **({"error_class": "e", "error": "x"} if i % 4 == 0 else {})}
                                          for i, x in enumerate(lfns)])
    retry = job_id(RSE, GEN, 2, 1)
    shadowed = {a_row_beside_its_entry(mongo_db, job, code, retry) for code in ("d", "w")}
    want = [d for d in ledger.reads.file_records() if d["job"] == job]
    assert len(want) == len(lfns) - len(shadowed) and not shadowed & {d["_id"] for d in want}
    finds = Finds()
    with MongoClient(mongo_url, event_listeners=[finds]) as client:
        reader = Ledger(client[mongo_db.name])
        for limit in (1, 7, 1000):
            assert paged(reader, limit, job=job) == want
        for state in ("failed", "deleted", "would_delete", "missing"):
            assert paged(reader, 9, job=job, state=state) == [d for d in want if d["state"] == state]
        assert paged(reader, 9, job=job, error_class="e") == [d for d in want if d.get("error_class") == "e"]
    assert not [f for c, f in finds.seen if c == "files" and isinstance(f.get("_id"), dict) and "$in" in f["_id"]]


def test_directory_pages_read_their_ancestors_buckets_by_the_index_fields_alone(tmp_path: Path, mongo_url: str,
                                                                             mongo_db: Database) -> None:
    """A directory inside a pack (its files in a bucket of an ancestor directory) is listed whole from its first
    page on; the ancestors' buckets are asked for by (rse, gen, dir) alone: SecantusDB scans the whole collection
    for a filter with any other field (a state, a job)."""
    ledger = Ledger(mongo_db)
    ledger.ensure_indexes()
    ledger.plans.record_plan(PlanReader(tmp_path / "plan"), make_plan(tmp_path), GEN)
    everything = ledger.reads.file_records()
    prefix = "/store/unmerged/Era/P1/RAW/Proc-v1/000/001/"
    assert mongo_db.buckets.count_documents({"dir": prefix.rsplit("/", 2)[0]})  # packed: held by the parent's buckets
    assert not mongo_db.buckets.count_documents({"dir": prefix[:-1]})
    finds = Finds()
    with MongoClient(mongo_url, event_listeners=[finds]) as client:
        reader = Ledger(client[mongo_db.name])
        inside = [d for d in everything if d["lfn"].startswith(prefix)]
        assert reader.reads.query_files(RSE, dir_prefix=prefix, limit=5)["items"] == inside[:5]
        assert paged(reader, 5, dir_prefix=prefix) == inside
        assert paged(reader, 5, dir_prefix=prefix + "f1") == [d for d in everything if d["lfn"].startswith(prefix + "f1")]
        assert paged(reader, 7, state="planned") == [d for d in everything if d["state"] == "planned"]
        job = job_id(RSE, GEN, 1, 2)
        assert paged(reader, 7, job=job) == [d for d in everything if d["job"] == job]
    asked = [f for c, f in finds.seen if c == "buckets" and "dir" in f]
    assert asked and all(set(f) == {"rse", "gen", "dir"} for f in asked)


def test_serve_view_keeps_the_current_generation_for_its_ttl(tmp_path: Path, mongo_db: Database) -> None:
    ledger = Ledger(mongo_db, generations_kept=2)
    ledger.ensure_indexes()
    ledger.plans.record_plan(PlanReader(tmp_path / "1" / "plan"), make_plan(tmp_path / "1"), GEN)
    kept, fresh = Ledger(mongo_db).view(3600.0), Ledger(mongo_db).view()
    for view in (kept, fresh):
        assert {r["gen"] for r in view.files(RSE, None, None, None, None, None, 10)} == {GEN}
    ledger.plans.record_plan(PlanReader(tmp_path / "2" / "plan"), make_plan(tmp_path / "2"), GEN + 1)
    assert {r["gen"] for r in fresh.files(RSE, None, None, None, None, None, 10)} == {GEN + 1}
    assert {r["gen"] for r in kept.files(RSE, None, None, None, None, None, 10)} == {GEN}  # within its ttl
    assert list(kept.files("T2_XX_None", None, None, None, None, None, 10)) == []


def test_serve_view_keeps_a_job_document_for_its_ttl_and_never_past_it(tmp_path: Path, mongo_url: str,
                                                                       mongo_db: Database) -> None:
    ledger, job, lfns = a_recorded_job(tmp_path, mongo_db)
    ledger.outcomes.record_outcomes(job, [{"lfn": x, "state": "failed", "error_class": "e", "error": "x"}
                                         for x in lfns[::5]])
    fresh, now = Ledger(mongo_db).view(), [0.0]
    finds = Finds()
    with MongoClient(mongo_url, event_listeners=[finds]) as client:
        kept = Ledger(client[mongo_db.name]).view(2.0)
        kept._read.clock = lambda: now[0]
        for rse in (RSE, None):
            for state, limit in ((None, 1), (None, 7), (None, 1000), ("failed", 3), ("planned", 50)):
                want = list(fresh.files(rse, state, None, None, job, None, limit))
                assert want and list(kept.files(rse, state, None, None, job, None, limit)) == want
        assert [c for c, _ in finds.seen].count("jobs") == 1  # one read of the job for all those pages
        first = list(fresh.files(None, None, None, None, job, None, 5))
        mongo_db.jobs.delete_one({"_id": job})  # the job's document goes (its generation pruned, say)
        now[0] = 1.999
        assert list(kept.files(None, None, None, None, job, None, 5)) == first  # within its ttl
        now[0] = 2.0
        assert list(kept.files(None, None, None, None, job, None, 5)) == [] == \
            list(fresh.files(None, None, None, None, job, None, 5))
    assert [c for c, _ in finds.seen].count("jobs") == 2


@settings(max_examples=300, deadline=None)
@given(ids=st.lists(st.text("ab|/-.", min_size=1, max_size=6), unique=True, max_size=30), data=st.data())
def test_rows_and_entries_merge_as_heapq_merge_does(ids: list[str], data: st.DataObject) -> None:
    """records._merged (a page's rows and its entries' records) gives heapq.merge's order, lazily taken."""
    rows_of = data.draw(st.lists(st.booleans(), min_size=len(ids), max_size=len(ids)))
    rows = sorted(({"_id": i, "row": True} for i, r in zip(ids, rows_of) if r), key=lambda d: d["_id"])
    entries = sorted(({"_id": i} for i, r in zip(ids, rows_of) if not r), key=lambda d: d["_id"])
    want = list(heapq.merge(rows, entries, key=lambda d: d["_id"]))
    assert list(records._merged(rows, iter(entries))) == want
    take = data.draw(st.integers(0, len(ids)))
    assert list(itertools.islice(records._merged(rows, iter(entries)), take)) == want[:take]


def test_a_directory_page_reads_no_ancestor_bucket_above_the_generation_s_pack_floor(tmp_path: Path, mongo_url: str,
                                                                                    mongo_db: Database) -> None:
    """Above the directory asked for, only a bucket that packs can hold its files, and packs are at least the
    generation's floor deep: a dataset's page reads no ancestor bucket; a page inside a pack still reads the pack;
    with the floor not known (a generation given by the caller) every ancestor is read; the records are the same."""
    ledger = Ledger(mongo_db)
    ledger.ensure_indexes()
    ledger.plans.record_plan(PlanReader(tmp_path / "plan"), make_plan(tmp_path), GEN)
    everything = ledger.reads.file_records()
    dataset, packed = "/store/unmerged/Era/P1/RAW/Proc-v1/", "/store/unmerged/Era/P1/RAW/Proc-v1/000/001/"
    # planner.dir_floor_depth's default, as the entry records it
    assert ledger.reads.current_generation(RSE) == (GEN, 7)
    assert mongo_db.buckets.count_documents({"dir": packed.rsplit("/", 2)[0]})
    for prefix, reads_ancestors in ((dataset, False), (packed, True), (dataset + "000/0", True)):
        inside = [d for d in everything if d["lfn"].startswith(prefix)]
        for generation in (None, GEN):
            finds = Finds()
            with MongoClient(mongo_url, event_listeners=[finds]) as client:
                page = Ledger(client[mongo_db.name]).reads.query_files(RSE, dir_prefix=prefix, generation=generation,
                                                                       limit=5)
            assert inside and page["items"] == inside[:5]
            ancestors_read = [f for c, f in finds.seen if c == "buckets" and "dir" in f]
            assert bool(ancestors_read) == (reads_ancestors or generation is not None), (prefix, generation)
        view = Ledger(mongo_db).view()
        assert [r["cursor"] for r in view.files(RSE, None, None, prefix, None, None, 0)] == [d["_id"] for d in inside]


def test_pack_floor_of_a_generation_entry() -> None:
    assert bk.pack_floor({"gen": GEN, "packing": {"floor_depth": 7, "names": 250}}) == 7
    assert bk.pack_floor({"gen": GEN}) == bk.pack_floor({"packing": {"floor_depth": 7, "names": 1}}) == float("inf")
