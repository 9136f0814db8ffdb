"""make_job: the job files of a real plan -> CleanupJobs with their dirs and protection."""
from __future__ import annotations

import json
import time
from pathlib import Path

from MSUnmerged import planner
from MSUnmerged.config import Config, SiteConfig
from MSUnmerged.jobs.spec import CleanupJob, job_dirs, make_job, relevant_protection
from MSUnmerged.worker.cleanup import Job
from MSUnmerged.worker.ids import MANIFEST_VERSION

B = "/store/unmerged/Run2024F/Muon0/AOD/PromptReco-v1"


def test_jobs_from_a_real_plan(tmp_path: Path) -> None:
    cfg = Config()
    cfg.planner.files_per_job = 3
    cfg.guards.max_delete_fraction = 1.0
    lfns = [f"{B}/000/380/001/a{i}.root" for i in range(4)] + [f"{B}/000/381/001/p.root", f"{B}/00000/c.root"]
    protected = [f"{B}/000/381", "/store/unmerged/Other/X/AOD/v1"]
    plan = planner.plan("T2_XX_A", [("\n".join(lfns) + "\n").encode()], protected, cfg, tmp_path / "plan",
                        require_scan=False)
    assert plan.files_to_delete == 5 and plan.jobs == 2
    now = time.time()
    removable = set((tmp_path / "plan" / "dirs.txt").read_text().split())
    jobs = [make_job(f"T2_XX_A:1700000000:1-{n:06d}", "T2_XX_A", "T2_XX", path.read_text().split(), removable,
                     protected, cfg, 1700000000.0, now)
            for n, path in enumerate(sorted((tmp_path / "plan" / "jobs").iterdir()), 1)]
    assert sorted(f for j in jobs for f in j.step.lfns) == sorted(lfns[:4] + [lfns[5]])
    for job in jobs:
        assert job.deadline == now + cfg.jobs.deadline_h * 3600 and job.step.dry_run is True
        assert job.step.file_timeout_s == cfg.jobs.file_timeout_s and job.site == "T2_XX"
        files_dirs = {f.rsplit("/", 1)[0] for f in job.step.lfns}
        # Every removable dir of the job holds one of its files; none holds the protected base.
        assert all(any(d == fd or fd.startswith(d + "/") for fd in files_dirs) for d in job.step.remove_dirs)
        assert f"{B}/000" not in job.step.remove_dirs and B not in job.step.remove_dirs
        depths = [d.count("/") for d in job.step.remove_dirs]
        assert depths == sorted(depths, reverse=True)  # leaf first
    first = jobs[0]
    assert f"{B}/000/380/001" in first.step.remove_dirs and f"{B}/000/380" in first.step.remove_dirs
    assert first.step.protected == [f"{B}/000/381"] and f"{B}/000" in first.step.keep_dirs
    # The manifest round-trips and keeps its format.
    path = first.write_manifest(tmp_path / "m.json")
    again = CleanupJob.from_manifest(json.loads(path.read_text()))
    assert again == first and json.loads(path.read_text())["version"] == MANIFEST_VERSION
    step = first.manifest()["task"]["steps"][0]
    assert (step["unmerged_pfn"], step["mapping_check"], step["pfn_layout"], step["scan_started"]) == \
        (None, "site_config_only", "standard", None)


def test_make_job_carries_the_mapping_check_and_scan_start() -> None:
    cfg = Config()
    cfg.jobs.sites = {"T2_XX_A": SiteConfig(pfn_layout="site_specific")}
    lfns = [f"{B}/00000/a.root"]
    job = make_job("T2_XX_A:1:1", "T2_XX_A", "T2_XX", lfns, set(), [], cfg, unmerged_pfn="root://se//store/unmerged/",
                   scan_started=1700000000.5)
    assert (job.step.unmerged_pfn, job.step.mapping_check, job.step.pfn_layout, job.step.scan_started) == \
        ("root://se//store/unmerged/", "rucio", "site_specific", 1700000000.5)
    # What the service writes is what the worker reads.
    worker_job = Job(json.loads(json.dumps(job.manifest())))
    assert (worker_job.unmerged_pfn, worker_job.mapping_check, worker_job.pfn_layout, worker_job.scan_started) == \
        ("root://se//store/unmerged/", "rucio", "site_specific", 1700000000.5)
    other = make_job("T2_YY_B:1:1", "T2_YY_B", "T2_YY", lfns, set(), [], cfg)
    assert (other.step.mapping_check, other.step.pfn_layout) == ("site_config_only", "standard")


def test_relevant_protection_and_dirs() -> None:
    lfns = [f"{B}/00000/a.root"]
    bases, keep = relevant_protection(lfns, [f"{B}/000/380//", f"{B}0/x", "/store/unmerged/Z/Y/X/W"])
    # Bases sharing a directory of depth >= 5 with the job are relevant (a sibling dataset too: safe
    # over-inclusion); one in another tree is not. Their ancestors among the job's dirs are kept.
    assert bases == [f"{B}/000/380", f"{B}0/x"]
    assert keep == ["/store/unmerged/Run2024F/Muon0", "/store/unmerged/Run2024F/Muon0/AOD", B]
    assert job_dirs(lfns, {f"{B}/00000", B, "/store/unmerged/Run2024F"}) == [f"{B}/00000", B, "/store/unmerged/Run2024F"]
