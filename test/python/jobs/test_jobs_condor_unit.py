"""CondorBackend pieces that need no pool: error classes, batch ids, state mapping, submit description."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from MSUnmerged.config import CondorConfig, ConfigError, JobsConfig, SiteConfig, load_config
from MSUnmerged.jobs.backend import JobState, credential_for, job_environment
from MSUnmerged.jobs.condor import CondorBackend, Target, child_env, classify, parse_batch_id


@pytest.mark.parametrize("text,kind", [
    ('SECMAN:2010:Received "DENIED" from server for user intruder@localpool using method IDTOKENS.', "auth_denied"),
    ("AUTHENTICATE:1003:Failed to authenticate with any method|AUTHENTICATE:1004:Failed to authenticate using "
     "IDTOKENS", "auth_refused"),
    ("CEDAR:6001:Failed to connect to <127.0.0.1:9>", "unreachable"),
    ("Failed communication with collector.", "unreachable"),
    ("SECMAN:2007:Failed to end classad message.", "timeout"),
    # A schedd restarting after a crash closes the connections it had accepted (issue 36).
    ("SECMAN:2011:Connection closed during command authorization. Probably due to an unknown command.",
     "unreachable"),
    ("Failed to query schedd: SECMAN:2011 Connection closed", "unreachable"),
    ("SECMAN:2003:TCP connection to schedd <127.0.0.1:9618?sock=schedd> failed.", "unreachable"),
    ("recv(fd=9): Connection reset by peer", "unreachable"),
    ("send: Broken pipe", "unreachable"),
    # A denial stays a denial whatever else the message says.
    ('SECMAN:2010:Received "DENIED" from server; connection closed', "auth_denied"),
    ("something else", "bad_answer"),
])
def test_classify(text: str, kind: str) -> None:
    assert classify(text) == kind


def test_batch_id_keeps_at_signs_of_schedd_names() -> None:
    assert parse_batch_id("12.3@crab3@vocms0155.cern.ch") == (12, 3, "crab3@vocms0155.cern.ch")
    with pytest.raises(ValueError):
        parse_batch_id("12@schedd")


@pytest.fixture
def backend(tmp_path: Path) -> CondorBackend:
    worker = tmp_path / "worker.pyz"
    worker.write_text("")
    cfg = CondorConfig(pool="pool.example:9618", schedd="schedd1", hold_max_s=600,
                       requirements="stringListMember(TARGET.GLIDEIN_CMSSite, MY.DESIRED_Sites)",
                       extra_attributes={"CMS_JobType": '"Cleanup"', "+CMS_Type": '"production"'})
    jobs = JobsConfig(sites={"T1_XX_Disk": SiteConfig(site="T1_XX", schedd="schedd2", pool="other:9618"),
                             "T2_YY": SiteConfig(site="T2_YY")})
    return CondorBackend(cfg, jobs, tmp_path / "work", worker=worker)


def test_targets_per_site(backend: CondorBackend) -> None:
    assert backend.target("T1_XX_Disk") == Target("other:9618", "schedd2")
    assert backend.target("T2_YY") == Target("pool.example:9618", "schedd1")
    assert backend.target(None) == Target("pool.example:9618", "schedd1")


def test_description_as_cms_production(backend: CondorBackend) -> None:
    d = backend.description("T2_XX_Site", memory_mb=700, disk_mb=300, runtime_s=7200)
    assert d["+DESIRED_Sites"] == '"T2_XX_Site"'
    assert d["accounting_group"] == "analysis" and d["accounting_group_user"] == "msunmerged"
    assert d["request_memory"] == "700" and d["request_disk"] == str(300 * 1024)
    assert d["+MaxWallTimeMins"] == "120"
    assert d["+MSUnmergedJobId"] == '"$(msu_job_id)"'
    assert "HoldReasonCode =!= 16" in d["periodic_remove"] and "> 600" in d["periodic_remove"]
    assert "time() > MSUnmergedDeadline" in d["periodic_remove"] and "> 7200" in d["periodic_remove"]
    assert "StageOutFinish" in d["leave_in_queue"]
    assert d["requirements"].startswith("stringListMember")
    assert d["+CMS_JobType"] == '"Cleanup"' and d["+CMS_Type"] == '"production"'
    assert Path(d["executable"]).is_absolute()
    assert "concurrency_limits" not in d  # no RSE given


@pytest.mark.parametrize("cap", [1, 2, 3, 7, 10, 100, 1000, 5000])
def test_max_in_flight_becomes_a_concurrency_limit_of_the_rse(backend: CondorBackend, cap: int) -> None:
    """Each job takes 1/(cap + 1/2) of its RSE's limit, whose size the pool sets to 1: cap jobs fit, one more
    does not, also when the negotiator adds the weights up in floating point."""
    backend.jobs.sites["T2_YY"].max_in_flight = cap
    d = backend.description("T2_YY", 500, 500, 3600, rse="T2_YY")
    name, _, weight = d["concurrency_limits"].partition(":")
    assert name == "msunmerged.T2_YY"
    total = 0.0
    for _ in range(cap):
        total += float(weight)
    assert total <= 1.0 < total + float(weight)
    backend.jobs.sites["T2_YY"].max_in_flight = 0  # no limit: no concurrency limit either
    assert "concurrency_limits" not in backend.description("T2_YY", 500, 500, 3600, rse="T2_YY")


@pytest.mark.parametrize("ad,state,reason", [
    ({"JobStatus": 1}, JobState.QUEUED, ""),
    ({"JobStatus": 5, "HoldReasonCode": 16, "HoldReason": "Spooling input data files"}, JobState.QUEUED,
     "spooling input"),
    ({"JobStatus": 5, "HoldReasonCode": 13, "HoldReason": "Transfer input files failure"}, JobState.HELD,
     "Transfer input files failure (code 13)"),
    ({"JobStatus": 2}, JobState.RUNNING, ""),
    ({"JobStatus": 6}, JobState.RUNNING, ""),
    ({"JobStatus": 4, "ExitCode": 2}, JobState.FINISHED, ""),
    ({"JobStatus": 3, "RemoveReason": "MSUnmerged: revalidation"}, JobState.REMOVED, "MSUnmerged: revalidation"),
    ({"JobStatus": 3, "RemoveReason": "The job attribute PeriodicRemove expression evaluated to TRUE"},
     JobState.FAILED, "The job attribute PeriodicRemove expression evaluated to TRUE"),
    ({"JobStatus": 3, "ExitCode": 0, "StageOutFinish": 5}, JobState.FINISHED, ""),
])
def test_state_mapping(ad: dict, state: JobState, reason: str) -> None:
    status = CondorBackend.status_of("j", "1.0@s", ad)
    assert (status.state, status.reason) == (state, reason)


def test_exit_by_signal() -> None:
    status = CondorBackend.status_of("j", "1.0@s", {"JobStatus": 4, "ExitBySignal": True, "ExitSignal": 9})
    assert status.exit_code == 137


def test_description_carries_site_config_and_credential(backend: CondorBackend, tmp_path: Path) -> None:
    jobs = backend.jobs
    jobs.sites["T2_YY"].siteconfig, jobs.sites["T2_YY"].credential = "/cvmfs/cms.cern.ch/SITECONF/T2_YY", "token"
    jobs.token_file, jobs.proxy_file = str(tmp_path / "token"), str(tmp_path / "x509up")
    token = credential_for(jobs, "T2_YY")
    d = backend.description("T2_YY", 500, 500, 3600, job_environment(jobs, "T2_YY", token), token)
    assert d["transfer_input_files"] == "manifest.json,storage.token"
    assert d["environment"] == ("\"SITECONFIG_PATH='/cvmfs/cms.cern.ch/SITECONF/T2_YY' "
                                "MSUNMERGED_CREDENTIAL='token' BEARER_TOKEN_FILE='storage.token'\"")
    assert "x509userproxy" not in d and str(tmp_path) not in d["environment"]
    jobs.sites["T2_YY"].credential = "proxy"
    proxy = credential_for(jobs, "T2_YY")
    d = backend.description("T2_YY", 500, 500, 3600, job_environment(jobs, "T2_YY", proxy), proxy)
    assert d["x509userproxy"] == str(tmp_path / "x509up")  # HTCondor delegates it and sets X509_USER_PROXY
    assert d["transfer_input_files"] == "manifest.json" and "X509_USER_PROXY" not in d["environment"]
    assert "MSUNMERGED_CREDENTIAL='proxy'" in d["environment"]
    assert d["+MSUnmergedLedger"] == '""'


def test_token_dir_and_credentials_validated_at_start(tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text('[jobs]\nbackend = "condor"\n')
    with pytest.raises(ConfigError, match="condor.token_dir"):
        load_config(cfg, env={})
    cfg.write_text(f'[jobs]\nbackend = "condor"\n[condor]\ntoken_dir = "{tmp_path}/nowhere"\n')
    with pytest.raises(ConfigError, match="condor.token_dir.*not a directory"):
        load_config(cfg, env={})
    cfg.write_text(f'[condor]\ntoken_dir = "{tmp_path}"\n[jobs]\nbackend = "condor"\n'
                   '[jobs.sites.T2_XX_Disk]\ncredential = "token"\n')
    with pytest.raises(ConfigError, match="jobs.token_file.*jobs.sites.T2_XX_Disk.credential is token"):
        load_config(cfg, env={})
    cfg.write_text('[jobs]\ncredential = "password"\n')
    with pytest.raises(ConfigError, match="jobs.credential"):
        load_config(cfg, env={})


def test_preflight_child_imports_this_code_whatever_is_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    """With site-packages out of the way (-S), only the child's PYTHONPATH can lead it to MSUnmerged: it must
    be the package this process runs, not an install that points elsewhere."""
    import MSUnmerged
    monkeypatch.setenv("PYTHONPATH", "/nonexistent")
    out = subprocess.run([sys.executable, "-S", "-c", "import MSUnmerged; print(MSUnmerged.__file__)"],
                         env=child_env(), capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert Path(out.stdout.strip()).resolve() == Path(MSUnmerged.__file__).resolve()
    assert child_env()["PYTHONPATH"].endswith("/nonexistent")  # the caller's own path is kept, after ours
