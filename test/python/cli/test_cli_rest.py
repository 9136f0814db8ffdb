"""The ledger-reading commands (status, jobs, files) against the shared SecantusDB."""
from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from pymongo.database import Database

from MSUnmerged.cli import EXIT_BAD_INPUT, EXIT_OK, main
from MSUnmerged import wiring
from MSUnmerged.samplesite import DEMO_RSE, DEMO_SITE
from MSUnmerged.sources.offline import OfflineSources
from MSUnmerged.ledger import Ledger
from rest.rest_kit import offline_site, seed_rse

pytestmark = pytest.mark.integration

RSE = "T2_CL_Cli"


@pytest.fixture()
def cli_env(mongo_db: Database, mongo_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Database:
    monkeypatch.setenv("MSUNMERGED_CONFIG", str(tmp_path / "none.toml"))
    (tmp_path / "none.toml").write_text("")
    monkeypatch.setenv("MSUNMERGED_MONGO__URL", mongo_url)
    monkeypatch.setenv("MSUNMERGED_MONGO__DATABASE", mongo_db.name)
    dump = [f"/store/unmerged/a/b/c/d/f{i}.root" for i in range(8)] + ["/store/unmerged/a/b/c/kept/f.root"]
    states = [{"state": "deleted"}, {"state": "deleted"}, {"state": "failed", "error_class": "timeout"}, None]
    seed_rse(mongo_db, RSE, tmp_path, dump, ["/store/unmerged/a/b/c/kept"], time.time() - 60, done_jobs=1,
             outcome=lambda i, lfn: states[i], files_per_job=4,
             dirs=[{"dir": "/store/unmerged/a/b/c/d", "state": "refused", "error_class": "pfn_outside_unmerged",
                    "error": "maps to /data/store/data/a/b/c/d"}])
    return mongo_db


def test_status_files_jobs(cli_env: Database, capsys: pytest.CaptureFixture[str],
                           monkeypatch: pytest.MonkeyPatch) -> None:
    assert main(["status", "--json"]) == EXIT_OK
    (rse,) = json.loads(capsys.readouterr().out)["result"]
    assert rse["name"] == RSE and rse["counters"]["deleted"] == 2 and rse["counters"]["unknown"] == 1
    assert main(["status"]) == EXIT_OK
    out = capsys.readouterr().out
    assert "50%" in out  # 4 of 8 files have an outcome
    assert out.splitlines()[0] == "DRY RUN: jobs delete nothing (service.dry_run = true)"  # the default; no cycle yet
    monkeypatch.setenv("MSUNMERGED_SERVICE__DRY_RUN", "false")
    assert main(["status", "--rse", RSE]) == EXIT_OK
    assert capsys.readouterr().out.splitlines()[0] == "real mode: jobs delete files"
    assert main(["files", "--rse", RSE, "--state", "failed", "--json"]) == EXIT_OK
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(r["lfn"], r["error_class"]) for r in lines] == [("/store/unmerged/a/b/c/d/f2.root", "timeout")]
    assert main(["files", "--rse", RSE, "--error-class", "no_report", "--state", "unknown", "--json"]) == EXIT_OK
    assert len(capsys.readouterr().out.splitlines()) == 1
    assert main(["files", "--rse", RSE, "--dirs", "--state", "refused", "--json"]) == EXIT_OK
    (d,) = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert (d["dir"], d["error_class"], d["error"]) == ("/store/unmerged/a/b/c/d", "pfn_outside_unmerged",
                                                         "maps to /data/store/data/a/b/c/d")
    assert main(["files", "--rse", RSE, "--dirs"]) == EXIT_OK
    out = capsys.readouterr().out
    assert "pfn_outside_unmerged" in out and "/store/unmerged/a/b/c/d" in out and "reason" in out
    assert main(["jobs", "--json"]) == EXIT_OK
    assert [j["state"] for j in json.loads(capsys.readouterr().out)["result"]] == ["running", "finished"]
    assert main(["jobs"]) == EXIT_OK and "running" in capsys.readouterr().out


def test_bad_input_exit_codes(cli_env: Database, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["status", "--rse", "T2_XX_Nowhere"]) == EXIT_BAD_INPUT
    assert main(["files", "--rse", RSE, "--dir", "/etc/"]) == EXIT_BAD_INPUT
    assert "--dir" in capsys.readouterr().err
    assert main(["files", "--rse", RSE, "--dirs", "--state", "deleted"]) == EXIT_BAD_INPUT
    assert "not a directory state" in capsys.readouterr().err


@pytest.fixture()
def offline_env(mongo_db: Database, mongo_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Database:
    """The CLI on the sample RSE: OfflineSources given to build_service, the local backend, the shared database."""
    sources, _, siteconf = offline_site(tmp_path)
    (tmp_path / "c.toml").write_text(f"""
[service]
state_dir = "{tmp_path / 'state'}"
[mongo]
url = "{mongo_url}"
database = "{mongo_db.name}"
[jobs.sites.{DEMO_RSE}]
site = "{DEMO_SITE}"
siteconfig = "{siteconf}"
""")
    monkeypatch.setenv("MSUNMERGED_CONFIG", str(tmp_path / "c.toml"))
    build = wiring.build_service
    monkeypatch.setattr(wiring, "build_service", lambda config: build(config, sources=OfflineSources(sources)))
    return mongo_db


def test_clean_shows_the_plan_and_applies_only_when_told(offline_env: Database,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["clean", "--rse", DEMO_RSE]) == EXIT_OK  # no terminal: shown, not applied
    out = capsys.readouterr()
    assert "to delete" in out.out and "nothing applied" in out.err
    assert not Ledger(offline_env).reads.file_records() and offline_env.jobs.count_documents({}) == 0
    assert main(["clean", "--rse", DEMO_RSE, "--apply"]) == EXIT_OK
    out = capsys.readouterr()
    assert "new_generation" in out.out and f"{DEMO_RSE}: recorded" in out.err
    jobs = list(offline_env.jobs.find({"rse": DEMO_RSE}))
    assert jobs and all(j["state"] in ("queued", "running", "finished") for j in jobs)
    assert len(Ledger(offline_env).reads.file_records(DEMO_RSE)) == sum(j["files"] for j in jobs)


def test_status_and_jobs_tell_the_drain_and_the_truth_of_each_job(cli_env: Database,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 39: `status` says what an RSE's backlog does, at what rate and until when; `jobs` shows each job's
    slice and why it waits; an older dump's unsubmitted jobs read `superseded`."""
    ledger = Ledger(cli_env)
    doc = ledger.base.rse(RSE)
    running = [j["_id"] for j in ledger.base.jobs_in(RSE, ["running"])]
    ledger.rounds.set_job_state(running[0], "queued", "waiting for a free local slot (jobs.local_parallel at once)")
    cli_env.jobs.update_one({"_id": running[0]}, {"$set": {"slice": 2}})
    cli_env.jobs.insert_one({"_id": f"{RSE}:old:1-1", "rse": RSE, "gen": doc["generation"] - 1000, "round": 1,
                             "n": 1, "state": "superseded", "files": 7, "reason": "superseded by the plan of dump X"})
    now = time.time()
    cli_env.rses.update_one({"_id": RSE}, {"$set": {"drained": [{"t": now - 100, "n": 0}, {"t": now, "n": 4}]}})
    ledger.counters.refresh_job_counts(RSE)
    assert main(["status"]) == EXIT_OK
    out = capsys.readouterr().out
    header = next(line for line in out.splitlines() if line.startswith("RSE"))
    assert all(word in header for word in ("backlog", "rate", "expected end", "now"))
    row = next(line for line in out.splitlines() if line.startswith(RSE))
    assert "waiting_for_slot" in row and "0.04 files/s" in row
    assert "total: 4 files left at 0.04 files/s, expected end " in out
    old_dir = "/store/unmerged/a/b/old"  # tried 1 + jobs.retries (2) times, and one more still to try
    cli_env.pending_dirs.insert_many([
        {"_id": f"{RSE}|{old_dir}", "rse": RSE, "dir": old_dir, "since": 1.0, "tries": 3,
         "state": "permission_denied", "error": "EACCES"},
        {"_id": f"{RSE}|{old_dir}2", "rse": RSE, "dir": old_dir + "2", "since": 1.0, "tries": 2, "state": "not_empty"}])
    assert main(["status", "--rse", RSE]) == EXIT_OK
    out = capsys.readouterr().out
    assert "waiting_for_slot: 1 jobs queued in the batch system, none running" in out
    assert "directories given up on (1, tried 3 times)" in out and old_dir + "2" not in out
    given = next(line for line in out.splitlines() if old_dir in line)
    assert given.split()[1:] == ["permission_denied", "EACCES", "3"]
    assert "50% deleted" not in out and "25% deleted · 25% failed · 50% pending" in out
    assert main(["jobs", "--rse", RSE]) == EXIT_OK
    out = capsys.readouterr().out
    queued = next(line for line in out.splitlines() if line.startswith(running[0]))
    assert " 2 " in queued and "waiting for a free local slot" in queued
    old = next(line for line in out.splitlines() if line.startswith(f"{RSE}:old:1-1"))
    assert "superseded" in old and "7 files" in old
    assert main(["jobs", "--state", "superseded", "--json"]) == EXIT_OK
    assert [j["id"] for j in json.loads(capsys.readouterr().out)["result"]] == [f"{RSE}:old:1-1"]
