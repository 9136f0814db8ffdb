"""What a local job carries to its site: the storage credential (a private copy) and the site configuration
(the service's, else the node's SITECONFIG_PATH, else CMS's SITECONF/local), run by the real worker."""
from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from MSUnmerged.collector import Collector, MemorySink, parse_report
from MSUnmerged.config import Config
from MSUnmerged.jobs.backend import BackendError, JobState, wait_for
from MSUnmerged.jobs.local import LocalBackend
from MSUnmerged.jobs.spec import CleanupJob, DeleteFilesStep
from MSUnmerged.samplesite import write_siteconf
from MSUnmerged.worker.cleanup import EXIT_CONFIG
from MSUnmerged.worker.ids import ENV_NAME, LOG_NAME, MANIFEST_NAME, REPORT_NAME

SITE = RSE = "T2_XX_Local"
B = "/store/unmerged/Run2024F/JetMET1/AOD/PromptReco-v3"
# A WLCG token's shape (header.payload.signature); the worker only reads its exp claim.
TOKEN = "eyJhbGciOiJFUzI1NiJ9.eyJleHAiOjQxMDI0NDQ4MDAsInNjb3BlIjoic3RvcmFnZS5tb2RpZnk6L3N0b3JlL3VubWVyZ2VkIn0.c2ln"
EXPIRED = "eyJhbGciOiJFUzI1NiJ9.eyJleHAiOjEwMDAwMDAwMDB9.c2ln"  # exp 2001-09-09


def setup_site(root: Path, n: int = 5) -> tuple[Path, Path, list[str]]:
    storage = root / "storage"
    sc = write_siteconf(root / "SITECONF" / SITE, SITE, RSE, "V", str(storage))
    lfns = [f"{B}/00000/f{i}.root" for i in range(n)]
    for lfn in lfns:
        (storage / lfn.lstrip("/")).parent.mkdir(parents=True, exist_ok=True)
        (storage / lfn.lstrip("/")).write_bytes(b"")
    return storage, sc, lfns


def run_one(backend: LocalBackend, lfns: list[str], tmp_path: Path) -> tuple[CleanupJob, MemorySink, int]:
    job = CleanupJob(job_id=f"{RSE}:1:1", rse=RSE, site=SITE, deadline=time.time() + 600,
                     step=DeleteFilesStep(lfns=lfns, dry_run=False, retries=0, scan_started=time.time()))
    ids = backend.submit([job])
    states = wait_for(backend, ids, timeout=120)
    assert states[job.job_id].state == JobState.FINISHED
    report = backend.fetch_report(job.job_id, ids[job.job_id], tmp_path / "report.jsonl")
    sink = MemorySink()
    Collector(sink).collect(job.job_id, job.lfns, parse_report(report), states[job.job_id])
    return job, sink, int(states[job.job_id].exit_code or 0)


def token_config(tmp_path: Path, token: str) -> Config:
    cfg = Config()
    cfg.jobs.credential = "token"
    cfg.jobs.token_file = str(tmp_path / "service-token")
    Path(cfg.jobs.token_file).write_text(token)
    return cfg


def test_token_travels_as_a_private_copy(tmp_path: Path) -> None:
    storage, sc, lfns = setup_site(tmp_path)
    backend = LocalBackend(token_config(tmp_path, TOKEN), tmp_path / "work", siteconfig=str(sc))
    job, sink, code = run_one(backend, lfns, tmp_path)
    assert code == 0 and {o["state"] for o in sink.outcomes[job.job_id].values()} == {"deleted"}
    jdir = backend.job_dir(job.job_id)
    copy = jdir / "storage.token"
    assert copy.read_text() == TOKEN
    assert copy.stat().st_mode & 0o777 == 0o600 and jdir.stat().st_mode & 0o777 == 0o700
    start = parse_report(jdir / "report.jsonl").start or {}
    assert start["credential"] == {"kind": "token", "file": str(copy.resolve()), "mode": "0600"}
    for name in (MANIFEST_NAME, REPORT_NAME, LOG_NAME, ENV_NAME):
        assert TOKEN not in (jdir / name).read_text(), name


def test_missing_token_is_a_classified_submit_error(tmp_path: Path) -> None:
    _, sc, lfns = setup_site(tmp_path)
    cfg = token_config(tmp_path, TOKEN)
    os.unlink(cfg.jobs.token_file)
    backend = LocalBackend(cfg, tmp_path / "work", siteconfig=str(sc))
    with pytest.raises(BackendError) as err:
        backend.submit([CleanupJob(job_id=f"{RSE}:1:1", rse=RSE, site=SITE, deadline=time.time() + 600,
                                   step=DeleteFilesStep(lfns=lfns, scan_started=time.time()))])
    assert err.value.kind == "credential_missing" and cfg.jobs.token_file in err.value.message


def test_expired_token_is_refused_before_anything_is_submitted(tmp_path: Path) -> None:
    """Before: the expired token went out with every job (each ended auth_failed, a try of its files). A token
    that expires at the site while queued is still refused there (test_worker_credentials.py)."""
    storage, sc, lfns = setup_site(tmp_path)
    backend = LocalBackend(token_config(tmp_path, EXPIRED), tmp_path / "work", siteconfig=str(sc))
    job = CleanupJob(job_id=f"{RSE}:1:1", rse=RSE, site=SITE, deadline=time.time() + 600,
                     step=DeleteFilesStep(lfns=lfns, dry_run=False))
    with pytest.raises(BackendError) as err:
        backend.submit([job])
    assert err.value.kind == "credential_expired" and "2001-09-09" in err.value.message
    assert EXPIRED not in err.value.message
    assert backend.find([job.job_id]) == {}  # no job folder, nothing started
    assert all((storage / lfn.lstrip("/")).exists() for lfn in lfns)


def test_cms_default_site_config_then_a_classified_config_error(tmp_path: Path) -> None:
    """Without the service's setting or SITECONFIG_PATH: $CMS_PATH/SITECONF/local (a link to the site), and
    when that is missing too, config_error for every file (nothing touched)."""
    storage, sc, lfns = setup_site(tmp_path)
    cms = tmp_path / "cvmfs"
    (cms / "SITECONF").mkdir(parents=True)
    (cms / "SITECONF" / "local").symlink_to(sc)
    env = {"PATH": os.environ["PATH"], "CMS_PATH": str(cms)}
    job, sink, code = run_one(LocalBackend(Config(), tmp_path / "work", env=env), lfns, tmp_path)
    assert code == 0 and {o["state"] for o in sink.outcomes[job.job_id].values()} == {"deleted"}

    (cms / "SITECONF" / "local").unlink()
    job, sink, code = run_one(LocalBackend(Config(), tmp_path / "work2", env=env), [f"{B}/00001/g.root"], tmp_path)
    assert code == EXIT_CONFIG
    outcome = sink.outcomes[job.job_id][f"{B}/00001/g.root"]
    assert (outcome["state"], outcome["error_class"]) == ("failed", "config_error")
    assert "SITECONF/local" in outcome["error"]
