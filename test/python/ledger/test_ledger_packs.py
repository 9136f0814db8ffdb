"""Packed buckets (docs/ledger.md, "Shape"): what a job's manifest is rebuilt from is exactly the plan's lines,
bucket ids never collide, a recording repeated after a crash (even under another floor depth or pack size)
gives the same buckets, generations of both shapes read side by side, and drop_protected inside a pack."""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any, Optional
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pymongo.database import Database

from MSUnmerged import seal
from MSUnmerged.config import GuardConfig
from MSUnmerged.guards import GuardTripped
from MSUnmerged.ledger import FileState, Ledger, file_id, job_id
from MSUnmerged.ledger import buckets as bk
from MSUnmerged.ledger import recording
from MSUnmerged.lfn import PrefixSet
from MSUnmerged.seal import JOBS_DIR, PlanReader

pytestmark = pytest.mark.integration
RSE = "T2_CH_Packs"
GEN = 1_700_000_000.0
DATASET = "/store/unmerged/Era/Prim/RAW/v1"  # 7 elements: planner.dir_floor_depth's default


def fresh(mongo_db: Database, generations_kept: int = 2) -> Ledger:
    for name in mongo_db.list_collection_names():
        mongo_db.drop_collection(name)
    ledger = Ledger(mongo_db, generations_kept=generations_kept)
    ledger.ensure_indexes()
    return ledger


def write_plan(plan_dir: Path, jobs: list[list[str]], raw: Optional[list[bytes]] = None) -> SimpleNamespace:
    """The jobs files of a plan (one LFN a line; `raw` replaces a job's file by these bytes) and its summary."""
    (plan_dir / JOBS_DIR).mkdir(parents=True, exist_ok=True)
    names = []
    for n, lfns in enumerate(jobs, 1):
        names.append(f"job_{n:06d}.txt")
        data = raw[n - 1] if raw else "".join(f"{x}\n" for x in lfns).encode()
        (plan_dir / JOBS_DIR / names[-1]).write_bytes(data)
    return SimpleNamespace(rse=RSE, guard=None, created=0.0, files_total=0, files_to_delete=0, files_protected=0,
                           files_excluded=0, files_invalid={}, dirs_removable=0, jobs=len(jobs), protected_count=1,
                           job_files=names, job_sizes=[len(j) for j in jobs])


def record(ledger: Ledger, plan_dir: Path, jobs: list[list[str]], gen: float = GEN, floor: int = 7) -> int:
    return ledger.plans.record_plan(PlanReader(plan_dir), write_plan(plan_dir, jobs), gen, floor_depth=floor)


def job_ids(jobs: list[list[str]], gen: float = GEN) -> list[str]:
    return [job_id(RSE, gen, 1, n) for n in range(1, len(jobs) + 1)]


def bucket_shape(mongo_db: Database, gen: float = GEN) -> list[tuple[Any, ...]]:
    return sorted((d["_id"], d["dir"], d["job"], d["names"], d["codes"]) for d in mongo_db.buckets.find({"gen": gen}))


def assert_manifests_are_the_plan(ledger: Ledger, mongo_db: Database, jobs: list[list[str]], gen: float = GEN) -> None:
    """Every job's files, read all ways the submission and the pages read them, are exactly its plan lines."""
    ids = job_ids(jobs, gen)
    want = {jid: sorted(set(lfns)) for jid, lfns in zip(ids, jobs)}
    assert ledger.rounds.jobs_lfns(ids) == want
    assert ledger.rounds.jobs_lfns(ids, None) == want
    for jid in ids:
        assert ledger.rounds.job_lfns(jid) == want[jid]
    docs = list(mongo_db.buckets.find({"rse": RSE, "gen": gen}))
    assert len({d["_id"] for d in docs}) == len(docs) == mongo_db.buckets.count_documents({"gen": gen})
    for d in docs:  # a bucket's id sorts before each of its files, all of them under its `dir`
        lfns = bk.lfns(d, bk.CODES[FileState.PLANNED])
        assert all(x.startswith(d["dir"] + "/") and d["_id"] < file_id(RSE, gen, x) for x in lfns)
        assert sum(len(v) for v in want.values()) >= len(lfns)
    assert sum(d["n"] for d in docs) == sum(len(v) for v in want.values())


# Path elements that sort around '/', '-', '.' and digits, and UTF-8 (the plan-line checks refuse what is not).
PARTS = ("0", "00", "0-1", "0.1", "0a", "1", "a", "a-", "a.b", "a!", "ab", "A", "~", "a|b", "$x", "é", "日本", "z\u00ff", "\U0001f600")
part_st = st.sampled_from(PARTS)
lfn_st = st.builds(lambda mid, name: "/".join((DATASET.rsplit("/", 1)[0], *mid, name)),
                   st.lists(part_st, min_size=0, max_size=4), part_st)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(lfns=st.lists(lfn_st, min_size=1, max_size=60, unique=True), per_job=st.integers(1, 25),
       shuffle=st.randoms(use_true_random=False), floor=st.integers(5, 9), pack=st.sampled_from([1, 2, 3, 7, 1000]),
       cut=st.integers(16, 60), limit=st.integers(1, 9))
def test_every_job_manifest_is_exactly_its_plan_lines(tmp_path_factory: pytest.TempPathFactory, mongo_db: Database,
                                                      lfns: list[str], per_job: int, shuffle: Any, floor: int,
                                                      pack: int, cut: int, limit: int) -> None:
    ledger = fresh(mongo_db)
    shuffle.shuffle(lfns)  # jobs hold scattered directories; a directory may span jobs
    jobs = [lfns[i:i + per_job] for i in range(0, len(lfns), per_job)]
    plan_dir = tmp_path_factory.mktemp("plan")
    with mock.patch.object(bk, "PACK_NAMES", pack):
        assert record(ledger, plan_dir, jobs, floor=floor) == len(lfns)
        shape = bucket_shape(mongo_db)
        record(ledger, plan_dir, jobs, floor=floor)  # a repeat changes nothing
        assert bucket_shape(mongo_db) == shape
    assert_manifests_are_the_plan(ledger, mongo_db, jobs)
    for n, lfns_ in enumerate(jobs, 1):
        for lfn in lfns_[:3]:
            assert [d["job"] for d in ledger.reads.file_history(RSE, lfn)] == [job_id(RSE, GEN, 1, n)]
    missing = lfns[0] + "x"  # no plan line: in no bucket
    assert ledger.reads.file_history(RSE, missing) == [] or missing in lfns
    # pages under a path prefix cut anywhere (inside a name too), and a job's, in pieces of `limit`
    prefix = lfns[-1][:cut]
    assert paged(ledger, limit, dir_prefix=prefix) == sorted(x for x in lfns if x.startswith(prefix))
    assert paged(ledger, limit, state="planned") == sorted(lfns)
    jid = job_id(RSE, GEN, 1, len(jobs))
    assert paged(ledger, limit, job=jid) == sorted(jobs[-1])


def paged(ledger: Ledger, limit: int, gen: float = GEN, **query: Any) -> list[str]:
    out, after = [], None
    while True:
        page = ledger.reads.query_files(RSE, generation=gen, after=after, limit=limit, **query)
        out += [d["lfn"] for d in page["items"]]
        if not (after := page["next"]):
            return out


def test_a_plan_line_that_is_not_utf8_is_refused_before_any_bucket(tmp_path: Path, mongo_db: Database) -> None:
    ledger = fresh(mongo_db)
    good = [f"{DATASET}/000/a.root"]
    plan = write_plan(tmp_path, [good, good], raw=[f"{good[0]}\n".encode(), f"{DATASET}/000/b\xff.root\n".encode("latin-1")])
    with pytest.raises(GuardTripped):
        ledger.plans.record_plan(PlanReader(tmp_path), plan, GEN)
    assert mongo_db.buckets.count_documents({}) == 0


def test_a_directory_and_a_pack_of_its_subdirectories_in_one_job_have_distinct_ids(tmp_path: Path,
                                                                                   mongo_db: Database) -> None:
    """Two buckets of one job with the same `dir`: the directory's own files, then its subdirectories packed. Their
    ids are at their first file's directory (each directory is in one pack), so neither is dropped as a duplicate."""
    ledger = fresh(mongo_db)
    top = f"{DATASET}/000"
    job = [f"{top}/{n}.root" for n in "abc"] + [f"{top}/s{i}/{n}.root" for i in (1, 2) for n in "ab"]
    with mock.patch.object(bk, "PACK_NAMES", 4):
        record(ledger, tmp_path, [job])
    docs = sorted(mongo_db.buckets.find(), key=lambda d: d["_id"])
    assert [(d["dir"], d["n"]) for d in docs] == [(top, 3), (top, 4)]
    assert [d["_id"] for d in docs] == [bk.bucket_id(file_id(RSE, GEN, ""), d, 1) for d in (top, f"{top}/s1")]
    assert_manifests_are_the_plan(ledger, mongo_db, [job])


class Crash(Exception):
    pass


def crash_after(batches: int) -> Any:
    """recording's bucket insert, failing once `batches` inserts went in (the process dies mid-recording)."""
    real, calls = recording.insert_ignoring_duplicates, []

    def insert(coll: Any, docs: list[dict[str, Any]]) -> None:
        if coll.name == "buckets":
            if len(calls) == batches:
                raise Crash
            calls.append(len(docs))
        real(coll, docs)
    return insert


def spread_jobs() -> list[list[str]]:
    """Four jobs of several datasets, directories of a few files each, a directory over two jobs."""
    files = [f"{DATASET[:-2]}v{v}/{b:03d}/{s}{n}.root" for v in (1, 2) for b in range(6) for s in ("", "x-")
             for n in range(3)]
    return [files[i:i + 18] for i in range(0, len(files), 18)]


@pytest.mark.parametrize("pack", [1, 5, bk.PACK_NAMES])
def test_a_recording_repeated_after_a_crash_gives_the_buckets_of_one_whole_recording(
        tmp_path: Path, mongo_db: Database, monkeypatch: pytest.MonkeyPatch, pack: int) -> None:
    monkeypatch.setattr(bk, "PACK_NAMES", pack)
    jobs = spread_jobs()
    ledger = fresh(mongo_db)
    record(ledger, tmp_path, jobs)
    whole = bucket_shape(mongo_db)
    ledger = fresh(mongo_db)
    monkeypatch.setattr(recording, "RECORD_BATCH_FILES", 18)  # a batch a job
    with monkeypatch.context() as m:
        m.setattr(recording, "insert_ignoring_duplicates", crash_after(2))
        with pytest.raises(Crash):
            record(ledger, tmp_path, jobs)
    assert 0 < mongo_db.buckets.count_documents({}) < len(whole)
    assert ledger.base.rse(RSE)["recording"] == GEN
    record(ledger, tmp_path, jobs)
    assert bucket_shape(mongo_db) == whole
    assert_manifests_are_the_plan(ledger, mongo_db, jobs)


@pytest.mark.parametrize("change", ["floor", "pack", "before_packing"])
def test_a_repeat_after_a_crash_keeps_the_generation_s_packing(tmp_path: Path, mongo_db: Database,
                                                               monkeypatch: pytest.MonkeyPatch, change: str) -> None:
    """The configuration's floor depth (or the code's pack size: an upgrade, or a recording by the code before
    packing) changed between the crash and the repeat: the repeat packs as the crashed recording did, so no file
    is in two buckets of its job."""
    jobs = spread_jobs()
    with monkeypatch.context() as m:
        if change == "before_packing":
            m.setattr(bk, "PACK_NAMES", 1)
        ledger = fresh(mongo_db)
        record(ledger, tmp_path, jobs)
        whole = bucket_shape(mongo_db)
        ledger = fresh(mongo_db)
        m.setattr(recording, "RECORD_BATCH_FILES", 18)
        m.setattr(recording, "insert_ignoring_duplicates", crash_after(2))
        with pytest.raises(Crash):
            record(ledger, tmp_path, jobs)
    if change == "before_packing":  # that code wrote no `packing` on the generation's entry
        mongo_db.rses.update_one({"_id": RSE, "generations.gen": GEN}, {"$unset": {"generations.$.packing": ""}})
        assert "packing" not in ledger.base.rse(RSE)["generations"][0]
    with monkeypatch.context() as m:
        if change == "pack":
            m.setattr(bk, "PACK_NAMES", 5)
        record(ledger, tmp_path, jobs, floor=8 if change == "floor" else 7)
    assert bucket_shape(mongo_db) == whole
    assert_manifests_are_the_plan(ledger, mongo_db, jobs)
    assert sorted(d["lfn"] for d in ledger.reads.file_records()) == sorted(x for j in jobs for x in j)


def test_generations_of_both_shapes_and_floors_read_side_by_side(tmp_path: Path, mongo_db: Database,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """An older generation recorded before packing (one directory a bucket) or under another floor depth beside a
    packed one: pages, manifests and a file's history read both, whatever the floor is now."""
    jobs = spread_jobs()
    ledger = fresh(mongo_db, generations_kept=3)
    with monkeypatch.context() as m:
        m.setattr(bk, "PACK_NAMES", 1)
        record(ledger, tmp_path / "g1", jobs, GEN)
    record(ledger, tmp_path / "g2", jobs, GEN + 1, floor=5)  # may pack across datasets of one era
    record(ledger, tmp_path / "g3", jobs[1:], GEN + 2, floor=7)
    assert sorted(d["dir"] for d in mongo_db.buckets.find({"gen": GEN + 1})) == [DATASET] * 2 + [DATASET[:-2] + "v2"] * 2
    assert mongo_db.buckets.count_documents({"gen": GEN}) > mongo_db.buckets.count_documents({"gen": GEN + 2})
    for gen, js in ((GEN, jobs), (GEN + 1, jobs), (GEN + 2, jobs[1:])):
        assert_manifests_are_the_plan(ledger, mongo_db, js, gen)
        assert paged(ledger, 7, gen, dir_prefix=f"{DATASET[:-2]}v2/003") == sorted(x for j in js for x in j if x.startswith(f"{DATASET[:-2]}v2/003/"))
    for lfn in (jobs[0][0], jobs[1][5], jobs[-1][-1]):
        hist = ledger.reads.file_history(RSE, lfn)
        n = next(i for i, j in enumerate(jobs, 1) if lfn in j)
        want = [(GEN + 2, job_id(RSE, GEN + 2, 1, n - 1))] if n > 1 else []
        want += [(GEN + 1, job_id(RSE, GEN + 1, 1, n)), (GEN, job_id(RSE, GEN, 1, n))]
        assert [(d["gen"], d["job"]) for d in hist] == want
        assert all(d["lfn"] == lfn and d["_id"] == file_id(RSE, d["gen"], lfn) for d in hist)


@pytest.mark.parametrize("job", [None, 1])
def test_drop_protected_inside_a_pack_takes_exactly_the_covered_files(tmp_path: Path, mongo_db: Database,
                                                                      job: Optional[int]) -> None:
    """Bases inside one packed bucket: a subdirectory of its `dir`, one file, and a prefix ending inside a name
    (component-wise: it covers nothing, '/a/b' is not '/a/bc'). Only the covered files become skipped_protected."""
    ledger = fresh(mongo_db)
    files = [f"{DATASET}/{b}/{n}" for b in ("000", "000-x", "0001", "001") for n in ("a.root", "ab.root", "b.root")]
    files += [f"{DATASET}/{n}" for n in ("top.root", "000")]  # the pack's own directory's files; "000" also a dir
    record(ledger, tmp_path, [files])
    assert [d["dir"] for d in mongo_db.buckets.find()] == [DATASET]
    bases = [f"{DATASET}/0001", f"{DATASET}/001/ab.root", f"{DATASET}/000-x/a", f"{DATASET}/000/a.ro"]
    protection = PrefixSet(bases)
    # holds_below: the file "000" is above the base 000/a.ro (removed as a directory, it could take the base along)
    covered = sorted(x for x in files if protection.holds_below(x.encode()))
    assert covered == sorted([f"{DATASET}/0001/{n}" for n in ("a.root", "ab.root", "b.root")]
                             + [f"{DATASET}/001/ab.root", f"{DATASET}/000"])
    jid = job_id(RSE, GEN, 1, 1) if job else None
    assert ledger.plans.drop_protected(RSE, GEN, protection, jid) == len(covered)
    states = {d["lfn"]: (d["state"], d.get("error_class")) for d in ledger.reads.file_records()}
    assert {x for x, s in states.items() if s[0] == "skipped_protected"} == set(covered)
    assert all(s == ("skipped_protected", "protected_since_planning") for x, s in states.items() if x in covered)
    assert all(s[0] == "planned" for x, s in states.items() if x not in covered)
    assert ledger.rounds.job_lfns(job_id(RSE, GEN, 1, 1)) == sorted(set(files) - set(covered))
    assert ledger.plans.drop_protected(RSE, GEN, protection, jid) == 0  # repeated: nothing more
    more = PrefixSet([f"{DATASET}/000"])  # a subdirectory's files, "000-x" and "0001" sorting around it stay
    assert ledger.plans.drop_protected(RSE, GEN, more, jid) == 3
    assert ledger.rounds.job_lfns(job_id(RSE, GEN, 1, 1)) == sorted(
        x for x in set(files) - set(covered) if not (x == f"{DATASET}/000" or x.startswith(f"{DATASET}/000/")))


def sealed_plan(plan_dir: Path, jobs: list[list[str]]) -> tuple[SimpleNamespace, seal.Seal]:
    plan = write_plan(plan_dir, jobs)
    (plan_dir / seal.SUMMARY_NAME).write_text("{}")
    (plan_dir / seal.DIRS_NAME).write_text("")
    return plan, seal.write_seal(plan_dir, RSE, GEN, None, None, GuardConfig())


def test_a_recording_repeated_with_another_plan_keeps_nothing_of_the_first(tmp_path: Path, mongo_db: Database,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """A crash mid-recording, then the plan directory lost and the dump planned again into another plan (the
    protected list changed meanwhile): the repeat records that plan alone. Before, the first plan's buckets kept
    their ids and the second's of the same ids were dropped as duplicates: a job's manifest listed a file the plan
    recorded did not list."""
    first = [[f"{DATASET}/000/{n}.root" for n in "abc"], [f"{DATASET}/000/{n}.root" for n in "de"]]
    second = [[f"{DATASET}/000/{n}.root" for n in "bcd"], [f"{DATASET}/000/e.root"]]  # a.root protected now
    ledger = fresh(mongo_db)
    plan, sealed = sealed_plan(tmp_path, first)
    with monkeypatch.context() as m:
        m.setattr(recording, "RECORD_BATCH_FILES", 3)
        m.setattr(recording, "insert_ignoring_duplicates", crash_after(1))
        with pytest.raises(Crash):
            ledger.plans.record_plan(PlanReader(tmp_path, sealed), plan, GEN)
    assert mongo_db.buckets.count_documents({}) == 1
    plan, sealed = sealed_plan(tmp_path, second)
    ledger.plans.record_plan(PlanReader(tmp_path, sealed), plan, GEN)
    assert_manifests_are_the_plan(ledger, mongo_db, second)
    assert sorted(d["lfn"] for d in ledger.reads.file_records()) == sorted(x for j in second for x in j)
    assert [g["seal"] for g in ledger.base.rse(RSE)["generations"]] == [sealed.digest]
    assert mongo_db.jobs.count_documents({}) == len(second)


def test_another_plan_s_recording_whose_job_started_is_refused_and_kept(tmp_path: Path, mongo_db: Database) -> None:
    """Never reached by the service (jobs go out after recording): should a job of the other plan have started,
    nothing of it is deleted and the new plan is refused with a named reason."""
    first = [[f"{DATASET}/000/{n}.root" for n in "abc"]]
    ledger = fresh(mongo_db)
    plan, sealed = sealed_plan(tmp_path, first)
    ledger.plans.record_plan(PlanReader(tmp_path, sealed), plan, GEN)
    mongo_db.rses.update_one({"_id": RSE}, {"$set": {"recording": GEN}})
    mongo_db.jobs.update_one({}, {"$set": {"state": "queued"}})
    plan, other = sealed_plan(tmp_path, [first[0][1:]])
    with pytest.raises(GuardTripped, match="plan_outdated.*has started"):
        ledger.plans.record_plan(PlanReader(tmp_path, other), plan, GEN)
    assert ledger.rounds.jobs_lfns(job_ids(first)) == {job_ids(first)[0]: first[0]}
    assert [g["seal"] for g in ledger.base.rse(RSE)["generations"]] == [sealed.digest]
