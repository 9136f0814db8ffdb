"""Issue 12 through the service, for real (dry_run = false unless said): hostile and misconfigured POSIX
sites (service_hostile_kit.py) worked by run_once with the real worker, through the local backend and the
HTCondor pool, and Rucio's mapping compared at the site. The storage is snapshotted without following
links before and after: nothing outside the physical unmerged area changes, plain files are deleted,
and the ledger holds every file and directory refusal with its reason."""
from __future__ import annotations

import json
import shutil
import stat
from pathlib import Path
from typing import Any, Optional, Sequence

import pytest
from pymongo.database import Database

from MSUnmerged.config import Config, SiteConfig
from MSUnmerged.jobs.local import LocalBackend
from MSUnmerged.jobs.spec import CleanupJob
from MSUnmerged.ledger import Ledger
from MSUnmerged.service import Service
from MSUnmerged.sources.offline import STATS_FILE, OfflineSources
from MSUnmerged.sources.rucio import RucioSource
from servers.condor import JOB_UID, SITE as POOL_SITE, CondorPool
from servers.rucio import RucioServer, add_cms_rse
from service_hostile_kit import (FILE_LINK, KEPT, LINK_DIRS, LINKED, LINKS, MAPPINGS, OUT_RUN, PLAIN, build_site,
                                 changed, dump_of, in_unmerged, snapshot, write_sources)
from service_kit import chown_tree, world_readable_dir
from test_service_condor import make_service as condor_service

pytestmark = pytest.mark.integration
SITE = "T2_XX_Hostile"
# The LINKS site and one RSE per storage.json/TFC variant.
WORLD = {"T2_XX_Links": LINKS, **{f"T2_XX_{kind.title()}": kind for kind in MAPPINGS}}


def configure(config: Config, site: str, siteconf: Optional[Path], rses: dict[str, str], dry_run: bool) -> None:
    """One job per RSE, no retry round (refusals stay refused), the plan may delete most of the dump."""
    config.service.dry_run = dry_run
    config.service.lease_ttl_s = 10
    config.planner.files_per_job = 100
    config.guards.max_delete_fraction = 1.0
    config.jobs.retries = 0
    for rse in rses:
        config.jobs.sites[rse] = SiteConfig(site=site, siteconfig=str(siteconf) if siteconf else "")


class ManifestsKept(LocalBackend):
    """LocalBackend that keeps every manifest it submitted (job folders go after collection)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.manifests: dict[str, dict[str, Any]] = {}

    def submit(self, jobs: Sequence[CleanupJob]) -> dict[str, str]:
        self.manifests.update({job.job_id: job.manifest() for job in jobs})
        return super().submit(jobs)


def local_service(tmp: Path, db: Database, sources: OfflineSources, siteconf: Path, rses: dict[str, str],
                  dry_run: bool = False) -> Service:
    config = Config()
    config.service.state_dir = str(tmp / "state")
    configure(config, SITE, siteconf, rses, dry_run)
    ledger = Ledger(db)
    ledger.ensure_indexes()
    return Service(config, ledger, sources, ManifestsKept(config, tmp / "batch"), instance="safety")


def run_to_end(svc: Service, rses: dict[str, str], wait_s: float = 60) -> None:
    """Every RSE worked until it finishes, in at most four runs each; the first runs submit every RSE's jobs before
    any waits, so that they run side by side."""
    runs = {rse: 1 for rse in rses}
    firsts = {rse: svc.runner.run_once(rse) for rse in rses}
    for rse, result in firsts.items():
        while result.action != "finish":
            assert result.action != "failed", result
            if runs[rse] == 4:
                raise AssertionError(f"run_once never finished {rse}")
            result = svc.runner.run_once(rse, wait_s=wait_s)
            runs[rse] += 1


def under(path: str, bases: tuple[str, ...]) -> bool:
    return any(path == b or path.startswith(b + "/") for b in bases)


def of(snap: dict[str, Any], rse: str) -> dict[str, Any]:
    """The part of a snapshot that belongs to one RSE (its storage, outside and elsewhere folders)."""
    return {p: v for p, v in snap.items() if f"/{rse}/" in f"/{p}/"}


def check_rse(db: Database, rse: str, kind: str, before: dict[str, Any], after: dict[str, Any],
              dry_run: bool) -> None:
    """Storage and ledger of one RSE after its jobs ran."""
    files = {f["lfn"]: f for f in Ledger(db).reads.file_records(rse)}
    dirs = {d["dir"]: d for d in db.dirs.find({"rse": rse})}
    outcome = {lfn: (f["state"], f.get("error_class", "")) for lfn, f in files.items()}
    assert set(files) == set(dump_of(kind)) - {KEPT}
    moved = changed(of(before, rse), of(after, rse))
    assert not [p for p in moved if not in_unmerged(p, rse)], "changed outside the physical unmerged area"
    assert f"storage/{rse}{KEPT}" in after
    if dry_run:
        assert not moved
    if kind == LINKS:
        done = ("would_delete", "") if dry_run else ("deleted", "")
        assert {lfn: outcome[lfn] for lfn in PLAIN + [FILE_LINK]} == {lfn: done for lfn in PLAIN + [FILE_LINK]}
        assert {outcome[lfn] for lfn in LINKED + OUT_RUN} == {("failed", "symlink_in_path")}
        for d in LINK_DIRS:  # the links themselves stay; what is behind them is unchanged (checked above)
            assert stat.S_ISLNK(after[f"storage/{rse}{d}"][0])
        gone = {lfn for lfn in PLAIN + [FILE_LINK] if f"storage/{rse}{lfn}" not in after}
        assert gone == (set() if dry_run else set(PLAIN + [FILE_LINK]))
        counters = db.rses.find_one({"_id": rse})["counters"]
        # A file holds its LFN as text; the worker's stat gives the sizes, their sum is what was freed.
        assert [files[lfn]["size"] for lfn in PLAIN] == [len(lfn) for lfn in PLAIN]
        assert counters["bytes_freed"] == (0 if dry_run else sum(f["size"] for f in files.values()
                                                                 if f["state"] == "deleted"))
        linked_dirs = {d: (r["state"], r["error_class"]) for d, r in dirs.items() if under(d, LINK_DIRS)}
        assert linked_dirs and set(linked_dirs.values()) == {("refused", "symlink_in_path")}
        assert counters["failed_by_class"] == {"symlink_in_path": len(LINKED + OUT_RUN)}
        assert counters["dirs_refused_by_reason"]["symlink_in_path"] == len(linked_dirs)
    else:
        assert not moved  # the mapped place is /store/data: nothing may change anywhere
        assert set(outcome.values()) == {("failed", "pfn_outside_unmerged")}
        assert dirs and {(r["state"], r["error_class"]) for r in dirs.values()} == {("refused", "pfn_outside_unmerged")}


@pytest.mark.parametrize("dry_run", [False, True], ids=["real", "dry_run"])
def test_local_backend_never_leaves_the_unmerged_area(tmp_path: Path, mongo_db: Database, dry_run: bool) -> None:
    root = world_readable_dir("msunmerged-hostile-")
    siteconf = build_site(root, SITE, WORLD)
    src = write_sources(tmp_path / "src", WORLD)
    before = snapshot(root)
    svc = local_service(tmp_path, mongo_db, OfflineSources(src), siteconf, WORLD, dry_run)
    run_to_end(svc, WORLD)
    svc.stop()
    after = snapshot(root)
    for rse, kind in WORLD.items():
        check_rse(mongo_db, rse, kind, before, after, dry_run)
    assert all(any(in_unmerged(p, rse) for rse in WORLD) for p in changed(before, after))


@pytest.mark.slow
def test_condor_pool_never_leaves_the_unmerged_area(condor_pool: CondorPool, tmp_path: Path,
                                                    mongo_db: Database) -> None:
    """The same site inside the pool's chroot; the jobs run there as the pool's submitter account."""
    world = {f"{POOL_SITE}_{kind.title()}": kind for kind in (LINKS, *MAPPINGS)}
    root = condor_pool.inside("/srv/hostile")
    shutil.rmtree(root, ignore_errors=True)  # an earlier run's site
    root.mkdir(parents=True)
    build_site(root, POOL_SITE, world, root_site="/srv/hostile")
    siteconf = condor_pool.inside("/srv/siteconf")  # the SITECONFIG_PATH the pool's slot gives its jobs
    for name in ("JobConfig/site-local-config.xml", "storage.json"):
        (siteconf / name).parent.mkdir(parents=True, exist_ok=True)
        (siteconf / name).write_text((root / "siteconf" / name).read_text())
    chown_tree(root, JOB_UID)
    src = write_sources(tmp_path / "src", world)
    before = snapshot(root)
    svc = condor_service(str(tmp_path), mongo_db, str(src), str(condor_pool.token_dir("submitter")),
                         configure=lambda config: configure(config, POOL_SITE, None, world, False))
    run_to_end(svc, world, wait_s=240)
    svc.stop()
    after = snapshot(root)
    for rse, kind in world.items():
        check_rse(mongo_db, rse, kind, before, after, False)


class RucioOffline(OfflineSources):
    """Files for ConMon and WMStats, the real Rucio server for the PFN of /store/unmerged/."""

    def __init__(self, directory: Path, rucio: RucioSource) -> None:
        super().__init__(directory)
        self.rucio = rucio

    def unmerged_pfn(self, rse: str) -> Optional[str]:
        return self.rucio.unmerged_pfn(rse)


def test_rucio_mapping_must_agree_with_the_site(rucio_server: RucioServer, tmp_path: Path,
                                                mongo_db: Database) -> None:
    """AGREE: Rucio maps /store/unmerged/ where storage.json does: plain files deleted. DISAGREE: the site's
    prefix is a folder outside its storage (holding the same names): every file refused mapping_disagrees,
    nothing touched anywhere. NOTINRUCIO: Rucio cannot answer for the RSE: nothing submitted, recorded."""
    agree, disagree, unknown = "T2_XX_AGREE", "T2_XX_DISAGREE", "T2_XX_NOTINRUCIO"
    world = {agree: LINKS, disagree: LINKS, unknown: LINKS}
    root = world_readable_dir("msunmerged-rucio-")
    siteconf = build_site(root, SITE, world, elsewhere={disagree: "elsewhere"})
    admin = rucio_server.admin_client()
    for rse in (agree, disagree):
        add_cms_rse(admin, rse, site=SITE, posix=True, prefix=f"{root}/storage/{rse}")
    rucio = rucio_server.source(tmp_path)
    src = write_sources(tmp_path / "src", world)
    before = snapshot(root)
    svc = local_service(tmp_path, mongo_db, RucioOffline(src, rucio), siteconf, world)
    run_to_end(svc, {agree: LINKS, disagree: LINKS})
    failed = svc.runner.run_once(unknown)
    svc.stop()
    after = snapshot(root)

    check_rse(mongo_db, agree, LINKS, before, after, False)
    assert not changed(of(before, disagree), of(after, disagree))
    states = {(f["state"], f["error_class"]) for f in Ledger(mongo_db).reads.file_records(disagree)}
    assert states == {("failed", "mapping_disagrees")}
    assert {(d["state"], d["error_class"]) for d in mongo_db.dirs.find({"rse": disagree})} == \
        {("refused", "mapping_disagrees")}
    for rse in (agree, disagree):  # every job carried Rucio's PFN and the scan's start
        scan = json.loads((src / STATS_FILE).read_text())[rse]
        jobs = [j["_id"] for j in mongo_db.jobs.find({"rse": rse})]
        assert jobs and set(jobs) <= set(svc.runner.jobs.backend.manifests)
        for job in jobs:
            step = svc.runner.jobs.backend.manifests[job]["task"]["steps"][0]
            assert (step["unmerged_pfn"], step["mapping_check"]) == (rucio.unmerged_pfn(rse), "rucio")
            assert step["scan_started"] == pytest.approx(scan["start_time"])

    assert (failed.action, failed.reason) == ("failed", "rucio_no_match"), failed
    assert mongo_db.rses.find_one({"_id": unknown})["reason"] == "rucio_no_match"
    assert mongo_db.jobs.count_documents({"rse": unknown, "state": {"$ne": "planned"}}) == 0
    assert not changed(of(before, unknown), of(after, unknown))
