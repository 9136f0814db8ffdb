"""The ledger-reading commands (status, jobs, files) against the shared SecantusDB."""
from __future__ import annotations

import json
import time

import pytest
from pymongo.database import Database

from MSUnmerged.cli import EXIT_BAD_INPUT, EXIT_OK, main
from MSUnmerged.ledger import file_id

pytestmark = pytest.mark.integration

RSE = "T2_CL_Cli"


@pytest.fixture()
def cli_env(mongo_db: Database, mongo_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path) -> Database:
    monkeypatch.setenv("MSUNMERGED_CONFIG", str(tmp_path / "none.toml"))
    (tmp_path / "none.toml").write_text("")
    monkeypatch.setenv("MSUNMERGED_MONGO__URL", mongo_url)
    monkeypatch.setenv("MSUNMERGED_MONGO__DATABASE", mongo_db.name)
    gen = time.time() - 60
    mongo_db.rses.insert_one({"_id": RSE, "state": "running", "generation": gen,
                              "counters": {"to_delete": 4, "pending": 1, "deleted": 2, "failed": 1,
                                           "failed_by_class": {"timeout": 1}}})
    for i, state in enumerate(["deleted", "deleted", "failed", "planned"]):
        lfn = f"/store/unmerged/a/b/f{i}.root"
        mongo_db.files.insert_one({"_id": file_id(RSE, gen, lfn), "rse": RSE, "gen": gen, "lfn": lfn, "state": state,
                                   "error_class": "timeout" if state == "failed" else "", "job": "j", "attempts": 1})
    return mongo_db


def test_status_files_jobs(cli_env: Database, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["status", "--json"]) == EXIT_OK
    (rse,) = json.loads(capsys.readouterr().out)["result"]
    assert rse["name"] == RSE and rse["counters"]["deleted"] == 2
    assert main(["status"]) == EXIT_OK
    assert "75%" in capsys.readouterr().out
    assert main(["files", "--rse", RSE, "--state", "failed", "--json"]) == EXIT_OK
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["lfn"] for r in lines] == ["/store/unmerged/a/b/f2.root"]
    assert main(["jobs", "--json"]) == EXIT_OK
    assert json.loads(capsys.readouterr().out)["result"] == []


def test_bad_input_exit_codes(cli_env: Database, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["status", "--rse", "T2_XX_Nowhere"]) == EXIT_BAD_INPUT
    assert main(["files", "--rse", RSE, "--dir", "/etc/"]) == EXIT_BAD_INPUT
    assert "--dir" in capsys.readouterr().err
