"""Slurm state and reason mapping, array index expressions, per-site settings: no cluster needed."""
from __future__ import annotations

from pathlib import Path

import pytest

from MSUnmerged.config import Config, ConfigError, SiteConfig, _validate
from MSUnmerged.jobs.backend import JobState
from MSUnmerged.jobs.router import RoutingBackend
from MSUnmerged.jobs.slurm import SlurmBackend
from MSUnmerged.jobs.slurm.rest import _expand
from MSUnmerged.jobs.slurm.states import SlurmRecord, map_state
from MSUnmerged.worker.ids import job_folder


def rec(state: str, reason: str = "None") -> SlurmRecord:
    return SlurmRecord("7_0", "msunmerged-x", state, reason)


@pytest.mark.parametrize("state,reason,markers,expected", [
    ("PENDING", "Priority", {}, (JobState.QUEUED, "Priority", None)),
    ("PENDING", "None", {}, (JobState.QUEUED, "", None)),
    ("PENDING", "JobHeldAdmin", {}, (JobState.HELD, "JobHeldAdmin", None)),
    ("PENDING", "PartitionTimeLimit", {}, (JobState.HELD, "PartitionTimeLimit", None)),
    # pending on a drained or down node: held, with Slurm's own words
    ("PENDING", "ReqNodeNotAvail, UnavailableNodes:c[1-2]", {},
     (JobState.HELD, "ReqNodeNotAvail, UnavailableNodes:c[1-2]", None)),
    ("PENDING", "Nodes required for job are DOWN, DRAINED or reserved for jobs in higher priority partitions", {},
     (JobState.HELD, "Nodes required for job are DOWN, DRAINED or reserved for jobs in higher priority partitions",
      None)),
    ("PENDING", "NodeDown", {}, (JobState.HELD, "NodeDown", None)),
    ("PENDING", "Resources", {}, (JobState.QUEUED, "Resources", None)),
    ("REQUEUED", "None", {}, (JobState.QUEUED, "", None)),
    ("CONFIGURING", "None", {}, (JobState.RUNNING, "", None)),
    ("RUNNING", "None", {"started": "8 vm 1"}, (JobState.RUNNING, "", None)),
    ("COMPLETING", "None", {}, (JobState.RUNNING, "", None)),
    ("SUSPENDED", "None", {}, (JobState.HELD, "suspended", None)),
    ("COMPLETED", "None", {"exit_code": "0"}, (JobState.FINISHED, "", 0)),
    ("FAILED", "NonZeroExitCode", {"exit_code": "3"}, (JobState.FINISHED, "", 3)),
    ("FAILED", "JobLaunchFailure", {}, (JobState.FAILED, "job failed (JobLaunchFailure)", None)),
    ("TIMEOUT", "TimeLimit", {}, (JobState.FAILED, "time limit", None)),
    ("NODE_FAIL", "NodeDown", {}, (JobState.FAILED, "node failure", None)),
    ("OUT_OF_MEMORY", "OutOfMemory", {}, (JobState.FAILED, "out of memory", None)),
    ("PREEMPTED", "None", {}, (JobState.FAILED, "preempted", None)),
    ("CANCELLED", "None", {"removed": "revalidation"}, (JobState.REMOVED, "revalidation", None)),
    ("CANCELLED by 0", "", {}, (JobState.FAILED, "cancelled outside MSUnmerged", None)),  # sacct's form
    ("BRAND_NEW", "None", {}, (JobState.HELD, "unknown Slurm state BRAND_NEW", None)),
])
def test_map_state(state: str, reason: str, markers: dict, expected: tuple) -> None:
    assert map_state(rec(state, reason), markers) == expected


def test_forgotten_jobs_judged_by_markers() -> None:
    assert map_state(None, {"started": "9 vm 1", "exit_code": "1"}) == (JobState.FINISHED, "", 1)
    assert map_state(None, {"removed": "policy"}) == (JobState.REMOVED, "policy", None)
    assert map_state(None, {"started": "9 vm 1"})[0] == JobState.VANISHED
    assert map_state(None, {})[0] == JobState.VANISHED


def test_expand_array_indexes() -> None:
    assert _expand("3-5%2") == [3, 4, 5]
    assert _expand("0,2,7-11:2") == [0, 2, 7, 9, 11]
    assert _expand("") == []


def test_job_folder_is_safe_and_unique() -> None:
    a, b = job_folder("T2_XX:1700000000.0:1"), job_folder("T2_XX:1700000000_0:1")
    assert a != b and "/" not in a and ":" not in a


def test_site_overrides_and_validation(tmp_path: Path) -> None:
    cfg = Config()
    cfg.condor.token_dir = str(tmp_path)  # T2_YY_Disk's jobs go to HTCondor
    cfg.slurm.work_dir = "/hpc/scratch/msunmerged"
    cfg.slurm.sites = {"T2_XX_HPC": {"transport": "rest", "rest_url": "https://rest.hpc:6820", "user": "cms",
                                     "token_file": "/etc/tok", "array_parallel": "50"}}
    cfg.jobs.sites = {"T2_XX_HPC_Disk": SiteConfig(site="T2_XX_HPC", backend="slurm", siteconfig="/cvmfs/x/T2_XX_HPC"),
                      "T2_YY_Disk": SiteConfig(site="T2_YY", backend="condor", siteconfig="/cvmfs/x/T2_YY")}
    _validate(cfg)
    site = cfg.slurm.for_site("T2_XX_HPC")
    assert (site.transport, site.array_parallel, site.work_dir) == ("rest", 50, "/hpc/scratch/msunmerged")
    assert cfg.slurm.for_site("T2_ZZ").transport == "cli"
    router = RoutingBackend(cfg, lambda rse: cfg.jobs.sites[rse].site)
    backend = router.for_rse("T2_XX_HPC_Disk")  # built by SlurmBackend.from_config for its site
    assert isinstance(backend, SlurmBackend) and backend.settings == site
    assert backend.jobs.setting("T2_XX_HPC_Disk", "siteconfig") == "/cvmfs/x/T2_XX_HPC"

    cfg.slurm.sites["T2_XX_HPC"]["transport"] = "ssh"
    with pytest.raises(ConfigError, match="slurm.sites.T2_XX_HPC.transport"):
        _validate(cfg)
    cfg.slurm.sites["T2_XX_HPC"] = {"array_parallel": "many"}
    with pytest.raises(ConfigError, match="array_parallel"):
        _validate(cfg)
    cfg.slurm.sites = {}
    cfg.slurm.work_dir = "relative"
    with pytest.raises(ConfigError, match="slurm.work_dir"):
        SlurmBackend(cfg.slurm)
