"""Fences: the windows they cut, and their documents on a real SecantusDB (written with the plan, read once per
process only when complete, pruned with their generation, never changing a page's answer)."""
from __future__ import annotations

from pathlib import Path

import pytest
from pymongo import MongoClient, monitoring
from pymongo.database import Database

from MSUnmerged.ledger import Ledger, fences, records
from MSUnmerged.ledger import buckets as bk
from MSUnmerged.seal import PlanReader
from test_ledger_store import GEN, RSE, make_plan

IDS = [f"b{i:03d}" for i in range(100)]


def walk(windows: fences.Windows, hi: str, found: int = 0) -> list[str]:
    out = []
    while True:
        out.append(windows.end())
        if out[-1] == hi:
            return out
        windows.resize(found, 10)


def test_windows_start_past_lo_grow_and_end_at_hi() -> None:
    assert walk(fences.Windows(IDS, "b010", "c", 2), "c") == ["b013", "b021", "b053", "c"]
    # lo between fences, hi inside the list: the last window stops at hi, not at a fence past it.
    assert walk(fences.Windows(IDS, "b0105", "b030", 1), "b030") == ["b012", "b016", "b030"]
    assert walk(fences.Windows([], "a", "z", 4), "z") == ["z"]
    assert walk(fences.Windows(IDS, "c", "d", 1), "d") == ["d"]


def test_windows_are_sized_from_what_the_last_one_gave() -> None:
    w = fences.Windows(IDS, "", "z", 4)
    assert w.end() == "b004"
    w.resize(found=2, wanted=10)  # 2 records from 4 buckets: 10 more need ~20, with a quarter to spare
    assert w.end() == "b029"
    w.resize(found=50, wanted=1)
    assert w.end() == "b030"


def test_documents_hold_every_id_in_order_in_chunks() -> None:
    ids = [f"x{i:05d}" for i in range(fences.CHUNK * 2 + 3)][::-1]
    docs = fences.documents(RSE, GEN, ids)
    assert [d["k"] for d in docs] == [0, 1, 2] and {d["of"] for d in docs} == {3}
    assert [i for d in docs for i in d["ids"]] == sorted(ids)
    assert len({d["_id"] for d in docs}) == 3


@pytest.mark.integration
def test_recorded_plan_has_complete_fences_read_once_and_pruned(tmp_path: Path, mongo_db: Database) -> None:
    plan = make_plan(tmp_path)
    ledger = Ledger(mongo_db, generations_kept=1)
    ledger.ensure_indexes()
    ledger.plans.record_plan(PlanReader(tmp_path / "plan"), plan, GEN)
    bucket_ids = sorted(d["_id"] for d in mongo_db.buckets.find({}, {"_id": 1}))
    reader = fences.FenceCache(mongo_db.fences)
    assert reader.get(RSE, GEN) == bucket_ids
    mongo_db.fences.delete_many({})
    assert reader.get(RSE, GEN) == bucket_ids  # a generation's buckets never change: kept
    assert fences.FenceCache(mongo_db.fences).get(RSE, GEN) == []
    # Each job's span holds all its records.
    for job in mongo_db.jobs.find():
        first, last = job["span"]
        ids = [d["_id"] for d in ledger.reads.file_records() if d["job"] == job["_id"]]
        ids += [d["_id"] for d in mongo_db.buckets.find({"job": job["_id"]}, {"_id": 1})]
        assert ids and first == min(ids) and last == max(ids)
    ledger.plans.record_plan(PlanReader(tmp_path / "plan"), plan, GEN)  # repeated after a crash: written again
    ledger.plans.record_plan(PlanReader(tmp_path / "2" / "plan"), make_plan(tmp_path / "2"), GEN + 1)
    assert {d["gen"] for d in mongo_db.fences.find()} == {GEN + 1}


@pytest.mark.integration
def test_an_incomplete_fence_list_is_not_used_nor_kept(tmp_path: Path, mongo_db: Database) -> None:
    docs = fences.documents(RSE, GEN, [f"{RSE}|x|{i:06d}" for i in range(fences.CHUNK + 1)])
    mongo_db.fences.insert_one(docs[1])  # a recording cut short: the first chunk is missing
    reader = fences.FenceCache(mongo_db.fences)
    assert reader.get(RSE, GEN) == []
    mongo_db.fences.insert_one(docs[0])
    assert len(reader.get(RSE, GEN)) == fences.CHUNK + 1


class BucketReads(monitoring.CommandListener):
    """Buckets each `find` on the buckets collection returned."""

    def __init__(self) -> None:
        self.asked: dict[int, bool] = {}
        self.returned: list[int] = []

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        self.asked[event.request_id] = event.command_name == "find" and event.command.get("find") == "buckets"

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        if self.asked.pop(event.request_id, False):
            self.returned.append(len(event.reply["cursor"]["firstBatch"]))

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        self.asked.pop(event.request_id, None)


@pytest.mark.integration
@pytest.mark.parametrize("pack", [1, bk.PACK_NAMES])
def test_a_page_reads_one_window_not_the_rest_of_the_generation(tmp_path: Path, mongo_url: str, mongo_db: Database,
                                                                 monkeypatch: pytest.MonkeyPatch, pack: int) -> None:
    """What the fences are for: the first page of 10 files reads a few buckets, not the whole generation; with
    one directory a bucket (a generation recorded before packing) and with packed directories."""
    monkeypatch.setattr(bk, "PACK_NAMES", pack)
    Ledger(mongo_db).ensure_indexes()
    Ledger(mongo_db).plans.record_plan(PlanReader(tmp_path / "plan"), make_plan(tmp_path, files=3000), GEN)
    reads = BucketReads()
    with MongoClient(mongo_url, event_listeners=[reads]) as client:
        ledger = Ledger(client[mongo_db.name])
        page = ledger.reads.query_files(RSE, limit=10)
        fenced, reads.returned = reads.returned, []
        ledger.base.fences._lists[(RSE, GEN)] = []  # as for a generation recorded before fences
        assert ledger.reads.query_files(RSE, limit=10) == page
    assert len(page["items"]) == 10
    assert sum(fenced) <= records.FIRST_BUCKETS < mongo_db.buckets.count_documents({}) / 4
    # One read up to the end of the generation, limited.
    assert reads.returned == [min(records.BUCKETS_PER_READ, mongo_db.buckets.count_documents({}))]


@pytest.mark.integration
def test_directory_pages_read_in_windows_give_every_record_once(tmp_path: Path, mongo_db: Database) -> None:
    ledger = Ledger(mongo_db)
    ledger.ensure_indexes()
    ledger.plans.record_plan(PlanReader(tmp_path / "plan"), make_plan(tmp_path, files=3000), GEN)
    for n, job in enumerate(mongo_db.jobs.find()):
        lfns = ledger.rounds.job_lfns(job["_id"], states=None)
        dirs = sorted({lfn.rsplit("/", 1)[0] for lfn in lfns} | {lfn.rsplit("/", 2)[0] for lfn in lfns})
        ledger.outcomes.record_dirs(job["_id"], [{"dir": d, "state": ("removed", "not_empty")[(n + i) % 2]}
                                                 for i, d in enumerate(dirs)])
    everything = list(mongo_db.dirs.find().sort("_id", 1))
    assert len(everything) > 10

    def paged(**query: str) -> list[str]:
        out, after = [], None
        while True:
            page = ledger.reads.query_files(RSE, dirs=True, after=after, limit=4, **query)
            out += [d["_id"] for d in page["items"]]
            if not (after := page["next"]):
                return out
    for fence_ids in (ledger.base.fences.get(RSE, GEN), []):
        ledger.base.fences._lists[(RSE, GEN)] = fence_ids
        assert paged() == [d["_id"] for d in everything]
        assert paged(state="not_empty") == [d["_id"] for d in everything if d["state"] == "not_empty"]
        prefix = everything[5]["dir"].rsplit("/", 1)[0] + "/"
        assert paged(dir_prefix=prefix) == [d["_id"] for d in everything if d["dir"].startswith(prefix)]


def test_a_remembered_reach_sizes_the_first_window_only() -> None:
    assert walk(fences.Windows(IDS, "b010", "c", 2, reach="b040"), "c") == ["b040", "c"]
    assert walk(fences.Windows(IDS, "b010", "c", 2, reach="b011"), "c") == ["b011", "b012", "b016", "b032", "b096", "c"]
    assert walk(fences.Windows(IDS, "b010", "b030", 2, reach="b050"), "b030") == ["b030"]
    assert walk(fences.Windows(IDS, "b010", "c", 2, reach="b005"), "c") == walk(fences.Windows(IDS, "b010", "c", 2), "c")
    assert walk(fences.Windows([], "a", "z", 4, reach="m"), "z") == ["z"]


def test_reach_is_the_first_fence_above_the_last_record() -> None:
    assert fences.reach(IDS, "c", "b0405") == "b041"
    assert fences.reach(IDS, "c", "b041") == "b042"
    assert fences.reach(IDS, "b030", "b0405") == "b030"
    assert fences.reach(IDS, "c", "b0995") == "c"
    assert fences.reach(IDS, "c", None) == "c"  # the page ended before it was full: its whole range


class FileReads(monitoring.CommandListener):
    """How many `find`s on the rows (`files`)."""

    def __init__(self) -> None:
        self.n = 0

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        self.n += event.command_name == "find" and event.command.get("find") == "files"

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass


@pytest.mark.integration
def test_a_page_asked_again_reads_the_window_that_held_it(tmp_path: Path, mongo_url: str, mongo_db: Database,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Failed rows only late in the generation: the first read grows its windows over empty ones, the same page
    asked again reads one; once the rows move, answers are still a reader's without that memory."""
    ledger = Ledger(mongo_db)
    ledger.ensure_indexes()
    monkeypatch.setattr(bk, "PACK_NAMES", 1)  # one directory a bucket: many buckets, as recorded before packing
    ledger.plans.record_plan(PlanReader(tmp_path / "plan"), make_plan(tmp_path, files=6000, dirs=40), GEN)
    assert mongo_db.buckets.count_documents({}) > 4 * records.FIRST_ROW_BUCKETS
    jobs = sorted(mongo_db.jobs.find(), key=lambda j: j["span"][0])

    def fail(job: str, every: int) -> None:
        ledger.outcomes.record_outcomes(job, [{"lfn": x, "state": "failed", "error_class": "e", "error": "x"}
                                              for x in ledger.rounds.job_lfns(job)[::every]])
    fail(jobs[-1]["_id"], 3)
    reads = FileReads()
    with MongoClient(mongo_url, event_listeners=[reads]) as client:
        reader = Ledger(client[mongo_db.name])
        first = reader.reads.query_files(RSE, error_class="e", limit=10)
        grown, reads.n = reads.n, 0
        assert reader.reads.query_files(RSE, error_class="e", limit=10) == first
        assert grown > 1 and reads.n == 1
        fail(jobs[0]["_id"], 2)  # rows below where the page filled, and some of its own gone
        mongo_db.files.delete_many({"_id": {"$in": [d["_id"] for d in first["items"][:4]]}})
        for limit in (1, 10, 1000):
            want = Ledger(mongo_db).reads.query_files(RSE, error_class="e", limit=limit)
            assert reader.reads.query_files(RSE, error_class="e", limit=limit) == want
            assert reader.reads.query_files(RSE, error_class="e", limit=limit) == want
        assert len(first["items"]) == 10
