"""apply applies exactly the sealed plan: every tamper of a plan directory is refused with its reason (nothing
recorded, nothing deleted), guards are re-run with the configuration in force and the ledger's baseline, an
applied plan is a no-op the second time and an older one is refused. Real POSIX site, real worker, dry_run off."""
from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Callable, Optional

import pytest
from pymongo.database import Database

from MSUnmerged import guards, planner, sample, seal
from MSUnmerged.config import Config
from MSUnmerged.dumpreader import iter_chunks
from MSUnmerged.jobs.backend import wait_for
from MSUnmerged.ledger import Ledger
from MSUnmerged.lfn import PrefixSet
from MSUnmerged.service import RunResult, Service
from MSUnmerged.samplesite import AGE_S
from MSUnmerged.sources import offline
from MSUnmerged.sources.offline import STATS_FILE, dump_file
from MSUnmerged.seal import PlanReader
from service_kit import LoggedLocalBackend, dump_lines, files_left, make_site, rse_list

pytestmark = pytest.mark.integration
RSE = "T2_IT_Sealed"
OTHER = "T2_IT_Other"  # also this instance's: a plan moved to it must not be applied there
# Bases that protect nothing in the dump: they make the protected list 12 long, like the run.
UNRELATED = [f"/store/unmerged/Unrelated/Base{i}" for i in range(10)]


class Site:
    """One RSE's storage filled with its dump, a service on a real ledger whose jobs run at that storage."""

    def __init__(self, tmp_path: Path, db: Database, files: int = 300) -> None:
        self.tmp = tmp_path
        self.lines, prot = dump_lines(RSE, files)
        self.protected = prot + UNRELATED
        self.src = src = tmp_path / "src"
        self.dump = dump_file(src, RSE)
        self.dump.parent.mkdir(parents=True)
        self.dump.write_text("\n".join(self.lines) + "\n")
        self.config = Config()
        self.config.service.state_dir = str(tmp_path / "state")
        self.config.service.dry_run = False
        self.config.planner.files_per_job = 60
        self.config.guards.max_delete_fraction = 1.0  # a short protected list leaves almost all deletable
        self.storage = make_site(tmp_path, src, RSE, self.config)
        self.filled = time.time()  # the scans start after the files exist: workers refuse files changed since
        self.db = db
        self.ledger = Ledger(db)
        self.ledger.ensure_indexes()
        self.backend = LoggedLocalBackend(self.config, tmp_path / "batch")
        self.svc = Service(self.config, self.ledger, rse_list(src, [RSE, OTHER]), self.backend, instance="cli")

    def plan(self, name: str, protected: Optional[list[str]] = None, end_time: Optional[float] = None) -> Path:
        """A sealed plan of the dump in tmp/<name>, from a scan that ended at `end_time` (its generation;
        default now) and started once the site was filled. That scan and the site's protected list are what
        run_once and apply read too."""
        out = self.tmp / name
        end = time.time() if end_time is None else end_time
        stats = sample.stats_for(RSE, len(self.lines), end, min(self.filled, end))
        (self.src / STATS_FILE).write_text(json.dumps(stats))
        (self.src / offline.PROTECTED_FILE).write_text(json.dumps(self.protected))
        made = planner.plan(RSE, iter_chunks(str(self.dump)), protected or self.protected, self.config, out,
                            stats=stats[RSE])
        assert made.guard is None and made.files_to_delete > 0
        return out

    def apply(self, plan_dir: Path, protected: Optional[list[str]] = None) -> RunResult:
        return self.svc.runner.apply_plan(plan_dir, protected or self.protected)

    def settle(self) -> None:
        """Wait until every submitted job has ended."""
        ids = {j["_id"]: j["batch_id"] for j in self.db.jobs.find({"batch_id": {"$exists": True}})}
        states = wait_for(self.backend, ids, timeout=120)
        assert {s.state.value for s in states.values()} <= {"finished"}

    def nothing_happened(self, result: RunResult, reason: str) -> None:
        """Refused with `reason`, recorded on the RSE's document; nothing recorded, submitted or deleted."""
        assert (result.state, result.reason) == ("guarded", reason), result
        doc = self.ledger.base.rse(RSE)
        assert (doc["state"], doc["reason"]) == ("guarded", reason)
        assert doc["events"][-1]["reason"] == reason
        assert not Ledger(self.db).reads.file_records() and self.db.jobs.count_documents({}) == 0
        assert self.db.rses.count_documents({"_id": {"$ne": RSE}}) == 0
        assert self.backend.submissions() == []
        assert files_left(self.storage) == set(self.lines)


def planned(plan_dir: Path) -> set[str]:
    return {x for p in (plan_dir / "jobs").iterdir() for x in p.read_text().split("\n") if x}


def first_job(plan_dir: Path) -> Path:
    return sorted((plan_dir / "jobs").iterdir())[0]


def append(path: Path, data: bytes) -> None:
    with open(path, "ab") as fh:
        fh.write(data)


def edit_summary(plan_dir: Path, **values: object) -> None:
    path = plan_dir / "summary.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **values}, indent=1, sort_keys=True))


def reseal(plan_dir: Path, rse: Optional[str] = None, generation: Optional[float] = None) -> None:
    """What a careful tamperer does: seal the edited directory again with the project's own seal.py (the LFN
    checks and apply's re-derivation must still refuse), naming another RSE or generation if told."""
    old = seal.read_seal(plan_dir)
    protection = PrefixSet(["/store/unmerged/Unrelated"])
    seal.write_seal(plan_dir, rse or old.rse, old.generation if generation is None else generation, old.dump_sha256,
                    protection, Config().guards)


PROTECTED_FILE = f"/store/unmerged/Run3Era/Primary0/AODSIM/Proc{RSE[-3:]}-v1/000/000/f000000.root"
Tamper = Callable[[Path], None]
TAMPERS: dict[str, Tamper] = {
    "appended_lines": lambda d: append(first_job(d), PROTECTED_FILE.encode() + b"\n"),
    # A planned line swapped for a protected file: the same line count, every line a canonical LFN.
    "swapped_line": lambda d: first_job(d).write_bytes(
        first_job(d).read_bytes().replace(first_job(d).read_bytes().split(b"\n", 1)[0], PROTECTED_FILE.encode(), 1)),
    "new_jobs_file": lambda d: (d / "jobs" / "job-999999.txt").write_text(PROTECTED_FILE + "\n"),
    "extra_file_in_jobs": lambda d: (d / "jobs" / "notes").write_text("hello\n"),
    "removed_jobs_file": lambda d: first_job(d).unlink(),
    "edited_counts": lambda d: edit_summary(d, files_to_delete=1, job_sizes=[1]),
    "edited_rse": lambda d: edit_summary(d, rse=OTHER),
    "edited_generation": lambda d: edit_summary(d, dump_version=time.time()),
    "dirs_removed": lambda d: (d / "dirs.txt").write_bytes(b"".join(
        x + b"\n" for x in (d / "dirs.txt").read_bytes().split(b"\n")[1:-1])),
    "dirs_added": lambda d: append(d / "dirs.txt", PROTECTED_FILE.rsplit("/", 1)[0].encode() + b"\n"),
    "cr_line": lambda d: first_job(d).write_bytes(
        first_job(d).read_bytes().replace(b"\n", b"\r" + PROTECTED_FILE.encode() + b"\n", 1)),
    "invalid_lfns": lambda d: append(first_job(d), b"/store/data/Run3/x.root\n/store/unmerged/../data/y.root\n"),
    "seal_edited": lambda d: edit_seal(d, guards={**json.loads((d / "seal.json").read_text())["guards"],
                                                  "max_delete_files": 10 ** 12}),
    "seal_removed": lambda d: (d / "seal.json").unlink(),
}


def edit_seal(plan_dir: Path, **values: object) -> None:
    path = plan_dir / "seal.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **values}))


@pytest.mark.parametrize("name", sorted(TAMPERS))
def test_a_tampered_plan_is_refused_and_nothing_happens(tmp_path: Path, mongo_db: Database, name: str) -> None:
    site = Site(tmp_path, mongo_db)
    plan_dir = site.plan("plan")
    TAMPERS[name](plan_dir)
    result = site.apply(plan_dir)
    site.nothing_happened(result, guards.PLAN_MODIFIED)


# Lines a resealed plan may carry: each must be refused by the line check itself.
BAD_LINES = {
    "cr": PROTECTED_FILE.encode() + b"\r/store/unmerged/x/y.root",
    "outside": b"/store/data/Run3/x.root",
    "dotdot": b"/store/unmerged/../data/x.root",
    "relative": b"store/unmerged/x.root",
    "blank": b"",
    "control": b"/store/unmerged/x\x07y.root",
}


@pytest.mark.parametrize("where", ["jobs", "dirs"])
@pytest.mark.parametrize("bad", sorted(BAD_LINES))
def test_a_resealed_plan_with_an_invalid_line_is_refused(tmp_path: Path, mongo_db: Database, bad: str,
                                                         where: str) -> None:
    site = Site(tmp_path, mongo_db, files=100)
    plan_dir = site.plan("plan")
    append(first_job(plan_dir) if where == "jobs" else plan_dir / "dirs.txt", BAD_LINES[bad] + b"\n")
    reseal(plan_dir)
    result = site.apply(plan_dir)
    site.nothing_happened(result, guards.PLAN_MODIFIED)
    assert "not a valid LFN" in result.detail


def test_the_sealed_plan_is_applied_exactly(tmp_path: Path, mongo_db: Database) -> None:
    site = Site(tmp_path, mongo_db)
    plan_dir = site.plan("plan")
    sealed = json.loads((plan_dir / "seal.json").read_text())
    assert sealed["rse"] == RSE and sealed["guards"]["max_delete_files"] == site.config.guards.max_delete_files
    assert sealed["dump_sha256"] == seal.sha256(site.dump.read_bytes())  # the dump as read
    assert sealed["protected_count"] == len(site.protected)
    result = site.apply(plan_dir)
    assert result.submitted > 0 and result.reason == ""
    site.settle()
    want = planned(plan_dir)
    assert files_left(site.storage) == set(site.lines) - want  # file by file
    assert {d["lfn"] for d in Ledger(mongo_db).reads.file_records()} == want
    entry = site.ledger.base.rse(RSE)["generations"][0]
    assert entry["seal"] == sealed["digest"] and entry["baseline_count"] == len(site.protected)


def test_a_dump_edited_after_planning_is_refused(tmp_path: Path, mongo_db: Database) -> None:
    """The dump rewritten after the plan was made, a planned file's line replaced by another (its line count kept):
    the seal's dump digest no longer matches it, and apply, which plans the current dump again, refuses."""
    site = Site(tmp_path, mongo_db, files=100)
    plan_dir = site.plan("plan")
    gone = sorted(planned(plan_dir))[0]
    site.dump.write_text("\n".join(x.replace(".root", "-new.root") if x == gone else x for x in site.lines) + "\n")
    assert seal.read_seal(plan_dir).dump_sha256 != seal.sha256(site.dump.read_bytes())
    result = site.apply(plan_dir)
    site.nothing_happened(result, guards.PLAN_NOT_IN_CURRENT_DUMP)
    assert gone in result.detail


def test_an_applied_plan_applied_again_changes_nothing(tmp_path: Path, mongo_db: Database) -> None:
    site = Site(tmp_path, mongo_db, files=100)
    plan_dir = site.plan("plan")
    assert site.apply(plan_dir).submitted > 0
    site.settle()
    site.svc.runner.run_once(RSE)  # collects: the RSE is clean
    before = (site.ledger.base.rse(RSE), Ledger(mongo_db).reads.file_records(), list(mongo_db.jobs.find()))
    assert before[0]["state"] == "clean"
    again = site.apply(plan_dir)
    assert (again.reason, again.submitted, again.state) == ("already_applied", 0, "clean")
    assert (site.ledger.base.rse(RSE), Ledger(mongo_db).reads.file_records(), list(mongo_db.jobs.find())) == before


def test_an_older_or_another_plan_of_the_generation_is_outdated(tmp_path: Path, mongo_db: Database) -> None:
    site = Site(tmp_path, mongo_db, files=100)
    now = time.time() - 60
    old, new = site.plan("old", end_time=now - 3600), site.plan("new", end_time=now)
    # The same scan planned again with another protected list: the same generation, another seal.
    other = site.plan("other", protected=site.protected + ["/store/unmerged/Unrelated/Base99"], end_time=now)
    assert seal.read_seal(other).digest != seal.read_seal(new).digest
    assert site.apply(new).submitted > 0
    site.settle()
    left = files_left(site.storage)
    for plan_dir in (old, other):
        result = site.apply(plan_dir)
        assert (result.state, result.reason) == ("guarded", guards.PLAN_OUTDATED), result
        assert site.ledger.base.rse(RSE)["reason"] == guards.PLAN_OUTDATED
    assert files_left(site.storage) == left
    assert [g["gen"] for g in site.ledger.base.rse(RSE)["generations"]] == [seal.read_seal(new).generation]


def test_count_guards_are_checked_again_with_the_configuration_in_force(tmp_path: Path, mongo_db: Database) -> None:
    site = Site(tmp_path, mongo_db, files=100)
    plan_dir = site.plan("plan")
    site.config.guards.max_delete_files = 10
    site.nothing_happened(site.apply(plan_dir), guards.GUARD_DELETE_COUNT)
    site.config.guards.max_delete_files = 10 ** 6
    site.config.guards.max_delete_fraction = 0.1
    site.nothing_happened(site.apply(plan_dir), guards.GUARD_DELETE_FRACTION)


def test_shrink_through_plan_and_apply_is_refused_and_the_baseline_kept(tmp_path: Path, mongo_db: Database) -> None:
    """The issue's run: 12 bases recorded, then a plan and an apply with a 1-base list."""
    site = Site(tmp_path, mongo_db)
    assert site.apply(site.plan("full", end_time=time.time() - 7200)).submitted > 0
    site.settle()
    assert site.ledger.plans.protected_baseline(RSE) == 12
    left = files_left(site.storage)
    short = [f"/store/unmerged/Run3Era/Primary1/AODSIM/Proc{RSE[-3:]}-v1/000/003"]
    plan_dir = site.plan("short", protected=short)  # offline, no --previous-protected-count: planned
    assert any("/Primary0/" in x for x in planned(plan_dir))  # the full list protects these
    result = site.apply(plan_dir, protected=short)
    assert (result.state, result.reason) == ("guarded", guards.GUARD_PROTECTED_SHRANK)
    assert "12" in result.detail
    assert files_left(site.storage) == left
    assert site.ledger.plans.protected_baseline(RSE) == 12 and site.ledger.base.rse(RSE)["protected_count"] == 12
    # The plan's own idea of the baseline is ignored: it cannot raise or lower the ledger's either.
    assert json.loads((plan_dir / "summary.json").read_text())["protected_count"] == 1
    # An operator's shorter list that passes the guard does not lower the baseline.
    eight = site.protected[:8]
    assert site.apply(site.plan("eight", protected=eight), protected=eight).reason == ""
    site.settle()
    assert site.ledger.plans.protected_baseline(RSE) == 12
    assert not any("/Primary0/" in x for x in set(site.lines) - files_left(site.storage))


def test_a_plan_file_changed_after_the_check_is_refused_where_it_is_read(tmp_path: Path, mongo_db: Database) -> None:
    """A jobs file edited between apply's check and its recording, and dirs.txt edited after recording (it is
    read again for every submission): both refused with plan_modified."""
    site = Site(tmp_path, mongo_db, files=100)
    plan_dir = site.plan("plan")
    sealed = seal.verify(plan_dir, site.config.planner.max_lfn_length)
    plan = planner.read_summary(plan_dir)
    original = first_job(plan_dir).read_bytes()
    append(first_job(plan_dir), PROTECTED_FILE.encode() + b"\n")
    with pytest.raises(guards.GuardTripped, match="plan_modified"):
        site.ledger.plans.record_plan(PlanReader(plan_dir, sealed), plan, plan.dump_version,
                                      scan_started=plan.scan_started)
    assert not Ledger(mongo_db).reads.file_records()
    first_job(plan_dir).write_bytes(original)
    assert site.apply(plan_dir).submitted > 0
    assert site.svc.runner.jobs.removable(RSE, plan.dump_version)  # as sealed
    append(plan_dir / "dirs.txt", PROTECTED_FILE.rsplit("/", 1)[0].encode() + b"\n")
    with pytest.raises(guards.GuardTripped, match="changed since its plan was recorded"):
        site.svc.runner.jobs.removable(RSE, plan.dump_version)
    site.settle()


# -- issue 23: apply trusts a plan only as a reviewed intent: it re-derives the scan and the files from the sources.

def put_old(storage: Path, lfns: set[str]) -> None:
    """Files at these LFNs under `storage`, dated back like the site's own (their mtime before any scan)."""
    for lfn in lfns:
        path = storage / lfn.lstrip("/")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch()
        os.utime(path, (time.time() - AGE_S, time.time() - AGE_S))


def add_other(site: Site) -> Path:
    """OTHER (this instance's too) with its own dump and a finished scan of it; its storage also holds every file
    of RSE's dump, which OTHER's dump never lists. Returns OTHER's storage."""
    lines, _ = dump_lines(OTHER, 120)
    dump_file(site.src, OTHER).write_text("\n".join(lines) + "\n")
    stats = json.loads((site.src / STATS_FILE).read_text())
    (site.src / STATS_FILE).write_text(json.dumps({**stats, **sample.stats_for(OTHER, len(lines))}))
    storage = make_site(site.tmp, site.src, OTHER, site.config)  # rescans OTHER after its files are made
    put_old(storage, set(site.lines))
    stats = json.loads((site.src / STATS_FILE).read_text())
    stats[OTHER]["start_time"] = stats[OTHER]["end_time"] = time.time()  # the scan started after every file
    (site.src / STATS_FILE).write_text(json.dumps(stats))
    return storage


def test_a_plan_relabelled_for_another_rse_and_resealed_is_refused(tmp_path: Path, mongo_db: Database) -> None:
    """The issue's run: RSE's plan relabelled as OTHER, resealed, deleted files at OTHER that OTHER's dump never
    listed. Now apply re-derives OTHER's scan: refused, nothing recorded or deleted anywhere."""
    site = Site(tmp_path, mongo_db)
    plan_dir = site.plan("plan")
    other = add_other(site)
    before = files_left(other)
    edit_summary(plan_dir, rse=OTHER)
    reseal(plan_dir, rse=OTHER)
    result = site.apply(plan_dir)
    assert (result.rse, result.state, result.reason) == (OTHER, "guarded", guards.PLAN_NOT_FROM_CURRENT_SCAN), result
    assert site.ledger.base.rse(OTHER)["reason"] == guards.PLAN_NOT_FROM_CURRENT_SCAN
    # The same, with OTHER's scan at exactly the plan's times: its dump does not hold RSE's files.
    sealed = seal.read_seal(plan_dir)
    stats = json.loads((site.src / STATS_FILE).read_text())
    stats[OTHER].update(start_time=planner.read_summary(plan_dir).scan_started, end_time=sealed.generation)
    (site.src / STATS_FILE).write_text(json.dumps(stats))
    result = site.apply(plan_dir)
    assert (result.state, result.reason) == ("guarded", guards.PLAN_NOT_IN_CURRENT_DUMP), result
    assert "/store/unmerged/Run3Era/" in result.detail and OTHER in result.detail
    assert not Ledger(mongo_db).reads.file_records() and mongo_db.jobs.count_documents({}) == 0
    assert site.backend.submissions() == []
    assert files_left(other) == before and files_left(site.storage) == set(site.lines)


def test_a_resealed_plan_with_an_lfn_not_in_the_dump_is_refused(tmp_path: Path, mongo_db: Database) -> None:
    """An unmerged LFN appended to a jobs file (not in the dump, not protected), the summary's counts mended and
    the plan resealed: the file was deleted. Now: not in the current dump, refused."""
    site = Site(tmp_path, mongo_db)
    plan_dir = site.plan("plan")
    extra = "/store/unmerged/Run3Era/Extra/AODSIM/Stray-v1/000/000/stray.root"
    put_old(site.storage, {extra})
    append(first_job(plan_dir), extra.encode() + b"\n")
    summary = json.loads((plan_dir / "summary.json").read_text())
    edit_summary(plan_dir, files_to_delete=summary["files_to_delete"] + 1,
                 job_sizes=[summary["job_sizes"][0] + 1] + summary["job_sizes"][1:])
    reseal(plan_dir)
    result = site.apply(plan_dir)
    assert (site.storage / extra.lstrip("/")).exists()
    site.lines.append(extra)  # on the site, untouched
    site.nothing_happened(result, guards.PLAN_NOT_IN_CURRENT_DUMP)
    assert extra in result.detail


@pytest.mark.parametrize("field", ["scan_started", "generation"])
def test_a_resealed_plan_with_another_scan_is_refused(tmp_path: Path, mongo_db: Database, field: str) -> None:
    """The plan's scan start moved 10 days ahead (a file changed after the real scan was deleted), or its generation
    30 days ahead (accepted, and every real scan after it skipped as dump_older_than_current): both refused, and
    the next cycle works the real scan."""
    site = Site(tmp_path, mongo_db)
    plan_dir = site.plan("plan")
    plan = planner.read_summary(plan_dir)
    changed = sorted(planned(plan_dir))[0]
    (site.storage / changed.lstrip("/")).write_bytes(b"rewritten after the scan started")
    if field == "scan_started":
        edit_summary(plan_dir, scan_started=plan.scan_started + 10 * 86400)
        reseal(plan_dir)
    else:
        edit_summary(plan_dir, dump_version=plan.dump_version + 30 * 86400)
        reseal(plan_dir, generation=plan.dump_version + 30 * 86400)
    site.nothing_happened(site.apply(plan_dir), guards.PLAN_NOT_FROM_CURRENT_SCAN)
    cycle = site.svc.runner.run_once(RSE, wait_s=60)
    assert (cycle.action, cycle.generation, cycle.collected) == ("new_generation", plan.dump_version, cycle.submitted)
    assert changed in files_left(site.storage)  # changed after the scan started: refused at the site
    record = [r for r in Ledger(mongo_db).reads.file_records() if r["lfn"] == changed]
    assert [(r["state"], r["error_class"]) for r in record] == [("failed", "modified_since_scan")]


def test_a_plan_made_without_the_scan_is_not_applied(tmp_path: Path, mongo_db: Database) -> None:
    """`plan` without --stats: no generation, no scan start; apply refuses it (plan_scan_unknown)."""
    site = Site(tmp_path, mongo_db, files=100)
    site.plan("with-stats")  # the site's current scan, for apply to read
    out = tmp_path / "no-stats"
    made = planner.plan(RSE, iter_chunks(str(site.dump)), site.protected, site.config, out, require_scan=False)
    assert made.guard is None and made.files_to_delete > 0 and made.scan_started is None
    site.nothing_happened(site.apply(out), guards.PLAN_SCAN_UNKNOWN)
