"""The ledger on a real SecantusDB: idempotent recording, outcomes, queries, transient-error retries."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pymongo import MongoClient, monitoring
from pymongo.collection import Collection
from pymongo.database import Database

from MSUnmerged import planner, seal
from MSUnmerged.config import Config
from MSUnmerged.embedded_mongo import EmbeddedMongo
from MSUnmerged.guards import PLAN_MODIFIED, GuardTripped
from MSUnmerged.ledger import Ledger, LedgerError, job_id, recording, with_retry
from MSUnmerged.ledger import buckets as bk
from MSUnmerged.lfn import PrefixSet
from MSUnmerged.seal import PlanReader

pytestmark = pytest.mark.integration
RSE = "T2_FR_Ledger"
GEN = 1_700_000_000.0


def make_plan(tmp_path: Path, files: int = 900, dirs: int = 4) -> planner.Plan:
    lines = [f"/store/unmerged/Era/P{i % 3}/RAW/Proc-v1/000/{i % dirs:03d}/f{i}.root" for i in range(files)]
    config = Config()
    config.planner.files_per_job = 200
    config.guards.max_delete_fraction = 1.0
    return planner.plan(RSE, [("\n".join(lines) + "\n").encode()], ["/store/unmerged/Era/Other/RAW/X-v1"], config,
                        tmp_path / "plan", require_scan=False)


def test_record_plan_twice_gives_the_same_records(tmp_path: Path, mongo_db: Database) -> None:
    plan = make_plan(tmp_path)
    ledger = Ledger(mongo_db)
    ledger.ensure_indexes()
    assert ledger.plans.record_plan(PlanReader(tmp_path / "plan"), plan, GEN) == 900
    first = [{k: v for k, v in d.items() if k != "t"} for d in ledger.reads.file_records()]
    ledger.plans.record_plan(PlanReader(tmp_path / "plan"), plan, GEN)
    assert [{k: v for k, v in d.items() if k != "t"} for d in ledger.reads.file_records()] == first
    assert mongo_db.jobs.count_documents({}) == plan.jobs == 5
    assert len(ledger.base.rse(RSE)["generations"]) == 1 and "recording" not in ledger.base.rse(RSE)


def test_outcomes_are_idempotent_and_scoped_to_their_job(tmp_path: Path, mongo_db: Database) -> None:
    plan = make_plan(tmp_path)
    ledger = Ledger(mongo_db)
    ledger.plans.record_plan(PlanReader(tmp_path / "plan"), plan, GEN)
    jid = job_id(RSE, GEN, 1, 1)
    lfns = ledger.rounds.job_lfns(jid)
    outcomes = [{"lfn": lfns[0], "state": "failed", "error_class": "permission_denied", "error": "EACCES"},
                {"lfn": lfns[1], "state": "missing"}] + [{"lfn": x, "state": "deleted", "size": 5} for x in lfns[2:]]
    for _ in range(2):
        summary = ledger.outcomes.record_outcomes(jid, outcomes)
    assert summary["bytes_freed"] == 5 * (len(lfns) - 2) and summary["failed_by_class"] == {"permission_denied": 1}
    other = ledger.rounds.job_lfns(job_id(RSE, GEN, 1, 2))[0]
    ledger.outcomes.record_outcomes(jid, [{"lfn": other, "state": "deleted"}])  # not this job's file: ignored
    assert next(d for d in ledger.reads.file_records() if d["lfn"] == other)["state"] == "planned"
    assert ledger.outcomes.close_job(jid, "finished") == 0
    c = ledger.counters.refresh_counters(RSE)
    assert (c["deleted"], c["missing"], c["failed"], c["pending"]) == (len(lfns) - 2, 1, 1, 900 - len(lfns))
    assert c["failed_by_class"] == {"permission_denied": 1}
    mongo_db.files.update_many({"state": "failed"}, {"$unset": {"error_class": ""}})  # a row without its class
    assert ledger.counters.refresh_counters(RSE)["failed_by_class"] == {"unclassified": 1}
    with pytest.raises(LedgerError):
        ledger.outcomes.record_outcomes(jid, [{"lfn": lfns[0], "state": "exploded"}])


FIRST, SECOND, RETRY = job_id(RSE, GEN, 1, 1), job_id(RSE, GEN, 1, 2), job_id(RSE, GEN, 2, 1)


def crashed_rows(tmp_path: Path, mongo_db: Database) -> tuple[Ledger, str, list[str]]:
    """A recorded plan in which two steps were cut short after writing a file's row and before setting its
    bucket code: close_job's row of FIRST's file `gone`; SECOND's files would_delete, then new_round's row of
    its first file for RETRY. Returns the ledger, `gone` and SECOND's files."""
    ledger = Ledger(mongo_db)
    ledger.plans.record_plan(PlanReader(tmp_path / "plan"), make_plan(tmp_path), GEN)
    gone = ledger.rounds.job_lfns(FIRST)[0]
    row = next(r for r in ledger.reads.file_records(job=FIRST) if r["lfn"] == gone)
    mongo_db.files.insert_one({**row, "state": "unknown", "error_class": "no_report", "error": ""})  # close_job's row
    names = ledger.rounds.job_lfns(SECOND)
    ledger.outcomes.record_outcomes(SECOND, [{"lfn": x, "state": "would_delete"} for x in names])
    moved = next(r for r in ledger.reads.file_records(job=SECOND) if r["lfn"] == names[0])
    mongo_db.files.insert_one({**moved, "state": "planned", "job": RETRY, "attempts": 2})  # new_round's row
    return ledger, gone, names


def test_a_row_written_before_a_crash_wins_over_its_bucket_entry(tmp_path: Path, mongo_db: Database) -> None:
    """A step cut short after writing a file's row and before setting its bucket code: the job's files
    follow the row (of the bucket's own job for a planned entry, of a retry job for a would-delete one) and
    the code is repaired."""
    ledger, gone, names = crashed_rows(tmp_path, mongo_db)
    assert gone not in ledger.rounds.job_lfns(FIRST) and len(ledger.rounds.job_lfns(FIRST)) == 199
    assert gone in ledger.rounds.job_lfns(FIRST, states=None)
    assert "r" in "".join(b["codes"] for b in mongo_db.buckets.find({"job": FIRST}))
    assert ledger.rounds.job_lfns(SECOND, states=None) == names[1:] and ledger.rounds.job_lfns(RETRY) == [names[0]]


def test_jobs_read_together_give_each_job_its_own_files(tmp_path: Path, mongo_db: Database) -> None:
    """A submission reads its batch's files a few jobs at a time (jobs_lfns): each job gets what it gets read
    alone, rows a crash left beside their bucket entries included, and no file is listed in two jobs."""
    ledger, gone, names = crashed_rows(tmp_path, mongo_db)
    ids = [job_id(RSE, GEN, 1, n) for n in range(1, 6)] + [RETRY]
    together = ledger.rounds.jobs_lfns(ids)
    assert together[FIRST] == ledger.rounds.job_lfns(FIRST) and gone not in together[FIRST] \
        and len(together[FIRST]) == 199
    assert together[SECOND] == [] and together[RETRY] == [names[0]]
    assert together == {jid: ledger.rounds.job_lfns(jid) for jid in ids}
    every = ledger.rounds.jobs_lfns(ids, states=None)
    assert every[SECOND] == names[1:] and gone in every[FIRST]
    assert every == {jid: ledger.rounds.job_lfns(jid, states=None) for jid in ids}
    listed = [lfn for lfns in every.values() for lfn in lfns]
    assert len(listed) == len(set(listed)) == 900


def test_a_job_without_rows_lists_the_entries_in_the_asked_states(tmp_path: Path, mongo_db: Database) -> None:
    """A job none of whose files has a row (its buckets' entries are all there is): each state asked lists exactly
    its entries, whether a bucket holds one state or several."""
    ledger = Ledger(mongo_db)
    ledger.plans.record_plan(PlanReader(tmp_path / "plan"), make_plan(tmp_path), GEN)
    third = job_id(RSE, GEN, 1, 3)
    lfns = ledger.rounds.job_lfns(third)
    assert len(lfns) == 200 and lfns == sorted(lfns)
    deleted = lfns[::3]
    ledger.outcomes.record_outcomes(third, [{"lfn": x, "state": "deleted"} for x in deleted])
    assert mongo_db.files.count_documents({"job": third}) == 0  # no row: the buckets hold every outcome
    assert ledger.rounds.job_lfns(third) == sorted(set(lfns) - set(deleted))
    assert ledger.rounds.job_lfns(third, states=["deleted"]) == deleted
    assert ledger.rounds.job_lfns(third, states=None) == lfns
    assert ledger.rounds.jobs_lfns([third, SECOND], states=["missing"]) == {third: [], SECOND: []}


class Updates(monitoring.CommandListener):
    """Counts the update commands its client sends."""

    def __init__(self) -> None:
        self.n = 0

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        self.n += event.command_name == "update"

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass


def test_marking_a_batch_submitted_marks_only_jobs_being_submitted(tmp_path: Path, mongo_url: str,
                                                                   mongo_db: Database) -> None:
    """mark_all_submitted: one update command for a batch; a job not in `submitting` (here still planned) is left
    alone."""
    updates = Updates()
    client: MongoClient = MongoClient(mongo_url, serverSelectionTimeoutMS=10000, event_listeners=[updates])
    ledger = Ledger(client[mongo_db.name])
    ledger.plans.record_plan(PlanReader(tmp_path / "plan"), make_plan(tmp_path), GEN)
    mongo_db.jobs.update_many({"_id": {"$in": [FIRST, SECOND]}}, {"$set": {"state": "submitting"}})
    third = job_id(RSE, GEN, 1, 3)
    before = updates.n
    ledger.rounds.mark_all_submitted({FIRST: "local:1", SECOND: "local:2", third: "local:3"})
    ledger.rounds.mark_all_submitted({})
    assert updates.n - before == 1
    client.close()
    docs = mongo_db.jobs.find({"_id": {"$in": [FIRST, SECOND, third]}})
    got = {d["_id"]: (d["state"], d.get("batch_id")) for d in docs}
    assert got == {FIRST: ("queued", "local:1"), SECOND: ("queued", "local:2"), third: ("planned", None)}


def test_outcomes_follow_a_row_written_before_a_crash(tmp_path: Path, mongo_db: Database) -> None:
    """record_outcomes reads the job's rows by job: a row a crash left beside its bucket entry stays the file's
    record, updated when it is the reporting job's, left alone when a retry job's; the counts follow."""
    ledger, gone, names = crashed_rows(tmp_path, mongo_db)
    ledger.outcomes.record_outcomes(FIRST, [{"lfn": gone, "state": "deleted", "size": 3}])
    # late for names[0]
    ledger.outcomes.record_outcomes(SECOND, [{"lfn": x, "state": "deleted", "size": 3} for x in names])
    records = ledger.reads.file_records()
    by_lfn = {r["lfn"]: r for r in records}
    assert (by_lfn[gone]["state"], by_lfn[gone]["job"], by_lfn[gone]["size"]) == ("deleted", FIRST, 3)
    assert (by_lfn[names[0]]["state"], by_lfn[names[0]]["job"]) == ("planned", RETRY)
    assert all(by_lfn[x]["state"] == "deleted" for x in names[1:])
    for state in ("planned", "deleted", "would_delete", "unknown"):
        assert ledger.counters.count_files(RSE, GEN, [state]) == sum(r["state"] == state for r in records), state


def test_queries_by_state_job_prefix_with_pagination(tmp_path: Path, mongo_db: Database) -> None:
    plan = make_plan(tmp_path)
    ledger = Ledger(mongo_db)
    ledger.ensure_indexes()
    ledger.plans.record_plan(PlanReader(tmp_path / "plan"), plan, GEN)
    prefix = "/store/unmerged/Era/P1/RAW/Proc-v1/000/002/"
    seen, after = [], None
    while True:
        page = ledger.reads.query_files(RSE, dir_prefix=prefix, after=after, limit=40)
        seen += [d["lfn"] for d in page["items"]]
        after = page["next"]
        if after is None:
            break
    assert sorted(seen) == seen and len(seen) == 75 and all(s.startswith(prefix) for s in seen)
    jid = job_id(RSE, GEN, 1, 3)
    assert len(ledger.reads.query_files(RSE, job=jid, limit=1000)["items"]) == 200
    assert len(ledger.reads.query_files(RSE, state="planned", limit=1000)["items"]) == 900
    assert ledger.reads.query_files(RSE, state="submitted")["items"] == []
    mongo_db.jobs.update_one({"_id": jid}, {"$set": {"state": "queued"}})
    assert len(ledger.reads.query_files(RSE, state="submitted", limit=1000)["items"]) == 200


def test_transient_errors_are_retried_permanent_ones_are_not(mongo_client: MongoClient, mongo_db: Database) -> None:
    coll = mongo_db["retry"]
    coll.insert_one({"_id": 0})
    mongo_client.admin.command({"configureFailPoint": "failCommand", "mode": {"times": 2},
                                "data": {"failCommands": ["insert"], "closeConnection": True}})
    try:
        with_retry(lambda: coll.insert_one({"_id": 1}), "insert", base_s=0.01)
    finally:
        mongo_client.admin.command({"configureFailPoint": "failCommand", "mode": "off"})
    assert coll.count_documents({}) == 2
    with pytest.raises(LedgerError) as err:
        with_retry(lambda: coll.insert_one({"_id": 1}), "insert", base_s=0.01)
    assert err.value.reason == "ledger_error"


def test_embedded_server_starts_and_stops(tmp_path: Path) -> None:
    server = EmbeddedMongo(tmp_path / "state")
    url = server.start()
    pid = server.proc.pid  # type: ignore[union-attr]
    try:
        client: MongoClient = MongoClient(url, serverSelectionTimeoutMS=5000)
        client["x"]["y"].insert_one({"a": 1})
        assert client["x"]["y"].count_documents({}) == 1
        client.close()
    finally:
        server.stop()
    assert not Path(f"/proc/{pid}").exists() or b"Z" in Path(f"/proc/{pid}/stat").read_bytes().split()[2:3]
    assert (tmp_path / "state" / "db").is_dir() and not (tmp_path / "state" / "db.pid").exists()


def test_instance_id_is_made_once_per_database(mongo_client: MongoClient, mongo_db: Database) -> None:
    first = Ledger(mongo_db).instance_id()
    assert Ledger(mongo_db).instance_id() == first  # a restarted service keeps its id
    other = mongo_client[mongo_db.name + "_other"]
    try:
        assert Ledger(other).instance_id() not in ("", first)
    finally:
        mongo_client.drop_database(other.name)


def test_directory_outcomes_keep_the_highest_rank_and_are_pruned_with_their_generation(
        tmp_path: Path, mongo_db: Database) -> None:
    plan = make_plan(tmp_path)
    ledger = Ledger(mongo_db, generations_kept=1)
    ledger.ensure_indexes()
    ledger.plans.record_plan(PlanReader(tmp_path / "plan"), plan, GEN)
    j1, j2 = job_id(RSE, GEN, 1, 1), job_id(RSE, GEN, 1, 2)
    parent, leaf, link = "/store/unmerged/Era/P0/RAW/Proc-v1", "/store/unmerged/Era/P0/RAW/Proc-v1/000/000", \
        "/store/unmerged/Era/P1/RAW/Proc-v1/000/001"
    # j2 removed the shared parent before j1 (collected later) found it not empty: removed stays.
    ledger.outcomes.record_dirs(j2, [{"dir": parent, "state": "removed", "pfn": "/s" + parent}])
    for _ in range(2):  # repeating a report changes nothing
        ledger.outcomes.record_dirs(j1, [{"dir": parent, "state": "not_empty", "error": "ENOTEMPTY"},
                                         {"dir": leaf, "state": "removed"},
                                         {"dir": link, "state": "refused", "error_class": "symlink_in_path",
                                          "error": "a component is a symbolic link"}])
    docs = {d["dir"]: d for d in mongo_db.dirs.find()}
    assert (docs[parent]["state"], docs[parent]["job"]) == ("removed", j2)
    assert (docs[link]["state"], docs[link]["error_class"], docs[link]["job"]) == ("refused", "symlink_in_path", j1)
    ledger.outcomes.record_dirs(j2, [{"dir": link, "state": "not_empty"},  # a refusal outranks not_empty
                                     {"dir": leaf, "state": "missing"}])  # j2 came after j1 had removed it
    assert mongo_db.dirs.find_one({"dir": link})["state"] == "refused"
    assert (mongo_db.dirs.find_one({"dir": leaf})["state"], mongo_db.dirs.find_one({"dir": leaf})["job"]) == \
        ("removed", j1)
    with pytest.raises(LedgerError):
        ledger.outcomes.record_dirs(j1, [{"dir": leaf, "state": "vanished"}])

    c = ledger.counters.refresh_counters(RSE)
    assert (c["dirs_removed"], c["dirs_refused"], c["dirs_failed"]) == (2, 1, 1)
    assert c["dirs_by_state"] == {"removed": 2, "refused": 1}
    assert c["dirs_refused_by_reason"] == {"symlink_in_path": 1}
    refused = ledger.reads.query_files(RSE, state="refused", dirs=True)["items"]
    assert [d["dir"] for d in refused] == [link]
    assert [d["dir"] for d in ledger.reads.query_files(RSE, error_class="symlink_in_path", dirs=True)["items"]] \
        == [link]
    assert [d["dir"] for d in ledger.reads.query_files(RSE, dir_prefix="/store/unmerged/Era/P0/", dirs=True)["items"]] \
        == [parent, leaf]
    assert [d["dir"] for d in ledger.reads.query_files(RSE, job=j1, dirs=True)["items"]] == [leaf, link]

    newer = make_plan(tmp_path)  # the next dump: the old generation's directory records go with it
    ledger.plans.record_plan(PlanReader(tmp_path / "plan"), newer, GEN + 100)
    assert mongo_db.dirs.count_documents({}) == 0


def test_drop_protected_drops_what_the_list_covers_or_holds_below_and_nothing_else(tmp_path: Path,
                                                                                   mongo_db: Database) -> None:
    """A base naming a whole directory, one file, and a path below a file's own: exactly the files the list
    holds below are dropped, in whatever bucket they are; the other directories' files stay planned."""
    ledger = Ledger(mongo_db)
    ledger.plans.record_plan(PlanReader(tmp_path / "plan"), make_plan(tmp_path), GEN)
    era = "/store/unmerged/Era"
    bases = [f"{era}/P1/RAW/Proc-v1/000/001", f"{era}/P0/RAW/Proc-v1/000/002/f6.root",
             f"{era}/P2/RAW/Proc-v1/000/003/f11.root/inside"]
    protection = PrefixSet(bases)
    held = {d["lfn"] for d in ledger.reads.file_records() if protection.holds_below(d["lfn"].encode())}
    assert len(held) == 75 + 1 + 1
    assert ledger.plans.drop_protected(RSE, GEN, protection) == len(held)
    dropped = ledger.reads.file_records(state="skipped_protected")
    assert {d["lfn"] for d in dropped} == held and {d["error_class"] for d in dropped} == {"protected_since_planning"}
    assert len(ledger.reads.file_records(state="planned")) == 900 - len(held)
    assert ledger.plans.drop_protected(RSE, GEN, protection) == 0
    assert ledger.base.rse(RSE)["generations"][0]["dropped_protected"] == len(held)


class _Finds:
    """A collection whose `find` filters are kept (the ledger's reads of it), all else passed through."""

    def __init__(self, coll: Collection, seen: list[dict[str, Any]]) -> None:
        self._coll, self._seen = coll, seen

    def find(self, flt: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        self._seen.append(flt)
        return self._coll.find(flt, *args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._coll, name)


@pytest.mark.parametrize("fences", ["complete", "missing", "short"])
def test_drop_protected_reads_a_generation_by_windows_and_misses_nothing_whatever_its_fences(
        tmp_path: Path, mongo_db: Database, monkeypatch: pytest.MonkeyPatch, fences: str) -> None:
    """SecantusDB holds every document a query matches: drop_protected reads a generation's rows and buckets by
    `_id` windows cut at its fences, and the covered buckets by `_id`. The windows tile the generation whatever
    its fence list says: with the list gone, or a complete-looking one short of buckets, every file the list
    holds below is still dropped, rows (failed files) and bucket entries alike."""
    monkeypatch.setattr(recording, "BUCKET_BATCH", 2)
    monkeypatch.setattr(recording, "ROW_WINDOW", 3)
    monkeypatch.setattr(bk, "PACK_NAMES", 1)  # one directory a bucket: many buckets, as recorded before packing
    ledger = Ledger(mongo_db)
    ledger.plans.record_plan(PlanReader(tmp_path / "plan"), make_plan(tmp_path), GEN)
    ledger.outcomes.record_outcomes(FIRST, [{"lfn": x, "state": "failed", "error_class": "permission_denied",
                                             "error": "EACCES"} for x in ledger.rounds.job_lfns(FIRST)])
    assert mongo_db.files.count_documents({"state": "failed"}) > 0
    if fences == "missing":
        mongo_db.fences.delete_many({})
    elif fences == "short":  # every other bucket id left out of a list that still looks complete
        for doc in mongo_db.fences.find():
            mongo_db.fences.update_one({"_id": doc["_id"]}, {"$set": {"ids": doc["ids"][::2]}})
    era = "/store/unmerged/Era"
    protection = PrefixSet([f"{era}/P1/RAW/Proc-v1/000/001", f"{era}/P0/RAW/Proc-v1/000/002/f6.root",
                            f"{era}/P2/RAW/Proc-v1/000/003/f11.root/inside", f"{era}/P2/RAW/Proc-v1/000/000"])
    records = ledger.reads.file_records()
    held = {d["lfn"] for d in records if protection.holds_below(d["lfn"].encode())}
    assert {d["state"] for d in records if d["lfn"] in held} == {"planned", "failed"}
    seen: list[dict[str, Any]] = []
    ledger = Ledger(mongo_db)  # a process that never read the fences
    ledger.base.buckets = _Finds(ledger.base.buckets, seen)  # type: ignore[assignment]
    ledger.base.files = _Finds(ledger.base.files, seen)  # type: ignore[assignment]
    assert ledger.plans.drop_protected(RSE, GEN, protection) == len(held)
    # Each read: a window, buckets or rows by _id, or one job's rows (whose ids stand for its bucket entries).
    windows = [f for f in seen if set(f) == {"rse", "gen", "_id"} and set(f["_id"]) == {"$gte", "$lt"}]
    assert all(f in windows or set(f) == {"_id"} and set(f["_id"]) == {"$in"} or set(f) == {"job"} for f in seen)
    assert len(windows) >= {"complete": 10, "short": 5, "missing": 2}[fences]  # without fences: one per collection
    dropped = ledger.reads.file_records(state="skipped_protected")
    assert {d["lfn"] for d in dropped} == held
    assert len(ledger.reads.file_records(state="planned")) + len(ledger.reads.file_records(state="failed")) \
        == 900 - len(held)


def test_record_plan_with_bucket_batches_in_flight_records_every_file_and_stops_at_a_refused_file(
        tmp_path: Path, mongo_db: Database, monkeypatch: pytest.MonkeyPatch) -> None:
    """With small batches the database writes one while the next is built: every file is recorded, as with one
    batch; a jobs file refused (edited after the seal) raises plan_modified and none of its buckets is written."""
    plan = make_plan(tmp_path)
    ledger = Ledger(mongo_db)
    ledger.ensure_indexes()
    whole = ledger.plans.record_plan(PlanReader(tmp_path / "plan", seal.read_seal(tmp_path / "plan")), plan, GEN)
    expected = sorted(d["_id"] for d in mongo_db.buckets.find({}, {"_id": 1}))
    mongo_db.buckets.delete_many({})
    mongo_db.jobs.delete_many({})
    mongo_db.rses.delete_many({})
    monkeypatch.setattr(recording, "RECORD_BATCH_FILES", 150)  # a job is 200 files: a batch each
    assert len(plan.job_files) > 3 and len(expected) > 3 and whole == 900  # several batches
    assert ledger.plans.record_plan(PlanReader(tmp_path / "plan", seal.read_seal(tmp_path / "plan")), plan, GEN) == 900
    assert sorted(d["_id"] for d in mongo_db.buckets.find({}, {"_id": 1})) == expected
    assert len(ledger.reads.file_records()) == 900

    mongo_db.buckets.delete_many({})
    mongo_db.jobs.delete_many({})
    mongo_db.rses.delete_many({})
    last = tmp_path / "plan" / seal.JOBS_DIR / plan.job_files[-1]
    last.write_bytes(last.read_bytes().replace(b"f1", b"g1", 1))
    with pytest.raises(GuardTripped) as refused:
        ledger.plans.record_plan(PlanReader(tmp_path / "plan", seal.read_seal(tmp_path / "plan")), plan, GEN)
    assert refused.value.reason == PLAN_MODIFIED
    jobs = {d["job"] for d in mongo_db.buckets.find({}, {"job": 1})}
    assert jobs == {job_id(RSE, GEN, 1, i) for i in range(1, len(plan.job_files))}  # the batches sent before it


def test_refresh_counters_recounts_jobs_of_an_rse_without_a_generation(mongo_db: Database) -> None:
    """A first plan whose recording was cut short leaves jobs and no generation: the run's counters (which spare
    run_once a separate job count) still count them."""
    ledger = Ledger(mongo_db)
    mongo_db.rses.insert_one({"_id": RSE, "recording": GEN})
    mongo_db.jobs.insert_many([{"_id": job_id(RSE, GEN, 1, n), "rse": RSE, "gen": GEN, "state": "planned"}
                               for n in (1, 2)])
    assert ledger.counters.refresh_counters(RSE) == {}
    assert ledger.base.rse(RSE)["counters"]["jobs_by_state"] == {"planned": 2}
