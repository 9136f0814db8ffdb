"""Property: random sequences of record / outcomes / close / retry round / drop protected / collect on the real
ledger (buckets plus rows, SecantusDB) give the same per-file answers as a plain per-file model, through every
read path (file_records, query_files pages, job_lfns, count_files, file_history)."""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any, Iterator, Optional
from unittest import mock

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from pymongo.database import Database

from MSUnmerged.ledger import NOT_DELETED, RETRIABLE, FileState, Ledger, file_id, job_id
from MSUnmerged.ledger import buckets as bk
from MSUnmerged.lfn import PrefixSet
from MSUnmerged.seal import JOBS_DIR, PlanReader

pytestmark = pytest.mark.integration
RSE = "T2_CH_Model"
GEN = 1_700_000_000.0
ROOT = "/store/unmerged/Era/Prim/RAW/v1"
# Nested directories with names sorting before, between and after the subdirectory: the bucket merge's hard case;
# "000-x" sorts after "000" but its files before 000's ("-" < "/"): a pack's names are sorted whole; the dataset's
# parent (above planner.dir_floor_depth) is never packed.
DIRS = (f"{ROOT}/000", f"{ROOT}/000/sub", f"{ROOT}/001", f"{ROOT}/0000", f"{ROOT}/000-x", ROOT.rsplit("/", 1)[0])
NAMES = ("a.root", "s", "sub.root", "sua", "t.root", "z.root", "0.root", "!x")
OUTCOMES = ("deleted", "would_delete", "missing", "failed", "unknown", "skipped_protected")
SUCCESS_CLASS = ("", "symlink_in_path")  # success without, and (rarely) with an error class


class Model:
    """The ledger's per-file rules, one dict per file: state, job, attempts, error_class."""

    def __init__(self, jobs: list[list[str]]) -> None:
        self.files: dict[str, dict[str, Any]] = {}
        self.rounds = {job_id(RSE, GEN, 1, n): 1 for n in range(1, len(jobs) + 1)}
        for n, lfns in enumerate(jobs, 1):
            for lfn in lfns:
                self.files.setdefault(lfn, {"state": "planned", "job": job_id(RSE, GEN, 1, n), "attempts": 1,
                                            "error_class": None})

    def outcomes(self, job: str, given_: list[tuple[str, str, str]]) -> None:
        for lfn, state, cls in given_:
            f = self.files.get(lfn)
            if f is not None and f["job"] == job:
                f.update(state=state, error_class=cls)

    def close(self, job: str) -> int:
        hit = [f for f in self.files.values() if f["job"] == job and f["state"] == "planned"]
        for f in hit:
            f.update(state="unknown", error_class="no_report")
        return len(hit)

    def new_round(self, max_attempts: int, per_job: int, redo: bool) -> list[str]:
        retry = {s.value for s in RETRIABLE}
        ids = sorted(file_id(RSE, GEN, lfn) for lfn, f in self.files.items()
                     if f["state"] in retry and f["attempts"] < max_attempts or redo and f["state"] == "would_delete")
        round_ = max(self.rounds.values()) + 1
        prefix = file_id(RSE, GEN, "")
        created = []
        for n, start in enumerate(range(0, len(ids), per_job), 1):
            jid = job_id(RSE, GEN, round_, n)
            self.rounds[jid] = round_
            for fid in ids[start:start + per_job]:
                self.files[fid[len(prefix):]].update(state="planned", job=jid, attempts=round_)
            created.append(jid)
        return created

    def drop(self, covered: PrefixSet, job: Optional[str]) -> int:
        hit = [f for lfn, f in self.files.items() if f["state"] in {s.value for s in NOT_DELETED}
               and (job is None or f["job"] == job) and covered.covers(lfn.encode())]
        for f in hit:
            f.update(state="skipped_protected", error_class="protected_since_planning")
        return len(hit)


def record(ledger: Ledger, tmp: Path, jobs: list[list[str]]) -> int:
    (tmp / JOBS_DIR).mkdir(parents=True, exist_ok=True)
    names = []
    for n, lfns in enumerate(jobs, 1):
        names.append(f"job_{n:06d}.txt")
        (tmp / JOBS_DIR / names[-1]).write_text("".join(f"{x}\n" for x in lfns))
    plan = SimpleNamespace(rse=RSE, guard=None, created=0.0, files_total=0, files_to_delete=0, files_protected=0,
                           files_excluded=0, files_invalid={}, dirs_removable=0, jobs=len(jobs), protected_count=1,
                           job_files=names, job_sizes=[len(j) for j in jobs])
    return ledger.plans.record_plan(PlanReader(tmp), plan, GEN)


def answers(ledger: Ledger) -> dict[str, tuple[Any, ...]]:
    return {d["lfn"]: (d["state"], d["job"], d["attempts"], d.get("error_class")) for d in ledger.reads.file_records()}


def paged(ledger: Ledger, limit: int, **query: Any) -> list[dict[str, Any]]:
    out, after = [], None
    while True:
        page = ledger.reads.query_files(RSE, generation=GEN, after=after, limit=limit, **query)
        out += page["items"]
        after = page["next"]
        if not after:
            return out


def fence_variants(ledger: Ledger, records: list[dict[str, Any]]) -> Iterator[str]:
    """Puts each fence list the pages may meet in the ledger's cache: the recorded one, none (a generation
    recorded before fences), and stale ones (every file id and odd strings, some outside the generation)."""
    recorded = ledger.base.fences.get(RSE, GEN)
    assert recorded == sorted(d["_id"] for d in ledger.base.buckets.find({"rse": RSE, "gen": GEN}, {"_id": 1}))
    ids = [d["_id"] for d in records]
    prefix = file_id(RSE, GEN, "")
    for name, fences in (("recorded", recorded), ("none", []), ("stale", sorted(ids[::2] + [
            prefix[:-1], prefix, prefix + ROOT, prefix + ROOT + "/000/s", prefix + "\U0010ffff", "~"]))):
        ledger.base.fences._lists[(RSE, GEN)] = fences
        yield name
    ledger.base.fences._lists.pop((RSE, GEN))


def check(ledger: Ledger, model: Model, limit: int, prefix: str) -> None:
    want = {lfn: (f["state"], f["job"], f["attempts"], f["error_class"]) for lfn, f in model.files.items()}
    assert answers(ledger) == want
    records = ledger.reads.file_records()
    assert [d["_id"] for d in records] == sorted(file_id(RSE, GEN, x) for x in model.files)
    for fences in fence_variants(ledger, records):
        assert paged(ledger, limit) == records, fences
        assert paged(ledger, limit, dir_prefix=prefix) == [d for d in records if d["lfn"].startswith(prefix)], fences
        for state in FileState:
            assert paged(ledger, limit, state=state.value) == [d for d in records if d["state"] == state], fences
        for cls in ("e", "no_report"):  # an error class alone asks for failed files
            assert paged(ledger, limit, error_class=cls) == [
                d for d in records if d["state"] == FileState.FAILED and d.get("error_class") == cls], fences
        for job in model.rounds:
            assert paged(ledger, limit, job=job) == [d for d in records if d["job"] == job], fences
    for state in FileState:
        assert ledger.counters.count_files(RSE, GEN, [state]) == sum(1 for d in records if d["state"] == state)
    for job in model.rounds:
        assert ledger.rounds.job_lfns(job, None) == sorted(d["lfn"] for d in records if d["job"] == job)
    for d in records[::5]:
        assert ledger.reads.file_history(RSE, d["lfn"]) == [d]


lfns_st = st.lists(st.sampled_from([f"{d}/{n}" for d in DIRS for n in NAMES]), min_size=1, max_size=24, unique=True)
op_st = st.one_of(
    st.tuples(st.just("outcomes"), st.integers(0, 50), st.lists(
        st.tuples(st.integers(0, 99), st.sampled_from(OUTCOMES), st.sampled_from(SUCCESS_CLASS)), max_size=12),
              st.booleans()),
    st.tuples(st.just("close"), st.integers(0, 50), st.booleans()),
    st.tuples(st.just("collect"), st.integers(0, 50), st.lists(
        st.tuples(st.integers(0, 99), st.sampled_from(OUTCOMES[:3]), st.just("")), max_size=12)),
    st.tuples(st.just("retry"), st.integers(2, 4), st.integers(1, 6), st.booleans()),
    st.tuples(st.just("drop"), st.sampled_from(DIRS + (f"{ROOT}/000/s",)), st.booleans(), st.integers(0, 50)),
)


# No shrinking: each example runs dozens of database queries, and shrinking a failure took over 5 minutes;
# the failing example is printed as found.
@settings(max_examples=30, deadline=None, phases=[Phase.explicit, Phase.reuse, Phase.generate], suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(lfns=lfns_st, per_job=st.integers(1, 8), shuffle=st.randoms(use_true_random=False),
       ops=st.lists(op_st, max_size=8), limit=st.integers(1, 7), prefix=st.sampled_from(DIRS + (f"{ROOT}/000/s",)),
       pack=st.sampled_from([1, 3, bk.PACK_NAMES]))
def test_ledger_answers_like_a_per_file_model(tmp_path: Path, mongo_db: Database, lfns: list[str], per_job: int,
                                               shuffle: Any, ops: list[tuple[Any, ...]], limit: int,
                                               prefix: str, pack: int) -> None:
    with mock.patch.object(bk, "PACK_NAMES", pack):  # 1: one directory a bucket, as recorded before packing
        run_model(tmp_path, mongo_db, lfns, per_job, shuffle, ops, limit, prefix)


def run_model(tmp_path: Path, mongo_db: Database, lfns: list[str], per_job: int, shuffle: Any,
              ops: list[tuple[Any, ...]], limit: int, prefix: str) -> None:
    for name in mongo_db.list_collection_names():
        mongo_db.drop_collection(name)
    ledger = Ledger(mongo_db)
    ledger.ensure_indexes()
    shuffle.shuffle(lfns)  # a job may hold any files: scattered directories, a directory over several jobs
    jobs = [lfns[i:i + per_job] for i in range(0, len(lfns), per_job)]
    model = Model(jobs)
    assert record(ledger, tmp_path / "plan", jobs) == len(lfns)
    record(ledger, tmp_path / "plan", jobs)  # a repeat after a crash changes nothing
    check(ledger, model, limit, prefix)
    names = sorted(model.files)
    for op in ops:
        jobs_now = sorted(model.rounds)
        if op[0] in ("outcomes", "collect"):
            job = jobs_now[op[1] % len(jobs_now)]
            given_ = [(names[i % len(names)], state, cls if state in ("deleted", "would_delete", "missing") else "e")
                      for i, state, cls in op[2]]
            model.outcomes(job, given_)
            outs = [{"lfn": lfn, "state": s, "error_class": c, "size": 7} for lfn, s, c in given_]
            for _ in range(2 if op[0] == "collect" or op[3] else 1):  # repeated: the same records
                ledger.outcomes.record_outcomes(job, outs)
            if op[0] == "collect":
                assert ledger.outcomes.close_job(job, "finished") == model.close(job)
        elif op[0] == "close":
            job = jobs_now[op[1] % len(jobs_now)]
            assert ledger.outcomes.close_job(job, "failed") == model.close(job)
            if op[2]:
                assert ledger.outcomes.close_job(job, "failed") == 0
        elif op[0] == "retry":
            assert ledger.rounds.new_round(RSE, GEN, op[1], op[2], redo_dry_run=op[3]) \
                == model.new_round(op[1], op[2], op[3])
        elif op[0] == "drop":
            covered = PrefixSet([op[1]])
            job = jobs_now[op[3] % len(jobs_now)] if op[2] else None
            assert ledger.plans.drop_protected(RSE, GEN, covered, job) == model.drop(covered, job)
        check(ledger, model, limit, prefix)


def test_a_per_file_ledger_from_before_buckets_is_read_and_updated_as_rows(mongo_db: Database) -> None:
    """Migration: documents written one per file (no buckets) are rows, so old generations keep working."""
    ledger = Ledger(mongo_db)
    ledger.ensure_indexes()
    jid = job_id(RSE, GEN, 1, 1)
    lfns = [f"{ROOT}/000/{n}" for n in NAMES]
    mongo_db.files.insert_many([{"_id": file_id(RSE, GEN, x), "rse": RSE, "gen": GEN, "lfn": x, "dir": f"{ROOT}/000",
                                 "state": "planned", "job": jid, "attempts": 1, "t": 0.0} for x in lfns])
    mongo_db.jobs.insert_one({"_id": jid, "rse": RSE, "gen": GEN, "round": 1, "n": 1, "state": "queued", "files": 8})
    mongo_db.rses.insert_one({"_id": RSE, "generation": GEN, "generations": [{"gen": GEN}]})
    model = Model([lfns])
    assert ledger.rounds.job_lfns(jid) == sorted(lfns)
    given_ = [(lfns[0], "deleted", ""), (lfns[1], "failed", "timeout")]
    ledger.outcomes.record_outcomes(jid, [{"lfn": x, "state": s, "error_class": c} for x, s, c in given_])
    model.outcomes(jid, given_)
    assert ledger.outcomes.close_job(jid, "finished") == model.close(jid) == 6
    assert ledger.rounds.new_round(RSE, GEN, 3, 4) == model.new_round(3, 4, False)
    check(ledger, model, 3, f"{ROOT}/000/s")
    assert not mongo_db.buckets.count_documents({})
    assert ledger.counters.refresh_counters(RSE)["unknown"] == 0
    assert ledger.counters.refresh_counters(RSE)["pending"] == 7


def test_names_sort_like_ids() -> None:
    """The bucket _id separator sorts below every character a plan line may hold (see buckets.SEP)."""
    from MSUnmerged.ledger.buckets import SEP
    from MSUnmerged.lfn import PRINTABLE
    assert all(chr(c) > SEP for c in PRINTABLE)
