"""An RSE that is not this instance's (a typo) is refused by `run`, `apply` and `clean` with one clear line and
EXIT_BAD_INPUT, and leaves nothing in the ledger (the REST trigger: test_rest_serve.py). Sealed-plan refusals
exit with EXIT_GUARD and the reason on the RSE's document."""
from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from pymongo.database import Database

from MSUnmerged import guards, planner, sample, wiring
from MSUnmerged.cli import EXIT_BAD_INPUT, EXIT_GUARD, EXIT_OK, EXIT_UNAVAILABLE, apply as cli_apply, main, run as cli_run
from MSUnmerged.cli import demo  # noqa: F401  # imported before `cli` patches build_service, which it binds at import
from MSUnmerged.config import Config
from MSUnmerged.dumpreader import iter_chunks
from MSUnmerged.sources.offline import PROTECTED_FILE, RSES_FILE, STATS_FILE, OfflineSources, dump_file
from MSUnmerged.ledger import Ledger
from service_kit import make_site, write_sources

pytestmark = pytest.mark.integration
RSE = "T2_IT_Sample"
TYPO = "T2_IT_Sampel"


@pytest.fixture()
def cli(mongo_db: Database, mongo_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """The CLI on an instance whose only RSE is RSE (offline sources), the shared database; returns the sources."""
    src = write_sources(tmp_path / "src", [RSE], files=200)
    config = Config()
    make_site(tmp_path, src, RSE, config)
    (tmp_path / "c.toml").write_text(f"""
[service]
state_dir = "{tmp_path / 'state'}"
dry_run = false
[mongo]
url = "{mongo_url}"
database = "{mongo_db.name}"
[jobs.sites.{RSE}]
siteconfig = "{config.jobs.sites[RSE].siteconfig}"
""")
    monkeypatch.setenv("MSUNMERGED_CONFIG", str(tmp_path / "c.toml"))
    build = wiring.build_service

    def offline(config: Config) -> object:
        return build(config, sources=OfflineSources(src))
    for module in (wiring, cli_run, cli_apply):  # run and apply bind build_service at import
        monkeypatch.setattr(module, "build_service", offline)
    return src


def nothing_recorded(db: Database) -> None:
    for name in db.list_collection_names():
        assert db[name].count_documents({"$or": [{"_id": TYPO}, {"rse": TYPO}]}) == 0, name


def plan_for(rse: str, src: Path, out: Path) -> Path:
    sources = OfflineSources(src)
    made = planner.plan(rse, iter_chunks(str(dump_file(src, RSE))), sources.protected(), Config(), out,
                        stats=sources.stats()[RSE])
    assert made.guard is None and made.jobs > 0
    return out


@pytest.mark.parametrize("command", ["run", "clean", "apply"])
def test_a_typo_rse_is_refused_by_every_command_and_leaves_nothing(cli: Path, mongo_db: Database, tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str],
                                                                   command: str) -> None:
    if command == "apply":
        argv = ["apply", str(plan_for(TYPO, cli, tmp_path / "plan")), "--protected", str(cli / PROTECTED_FILE)]
    else:
        argv = [command, "--rse", TYPO]
    assert main(argv) == EXIT_BAD_INPUT
    err = capsys.readouterr().err.strip().splitlines()
    assert [line for line in err if "is not one of this instance's RSEs" in line] == [err[-1]]
    assert f"RSE {TYPO} is not one of this instance's RSEs (expression" in err[-1]
    nothing_recorded(mongo_db)


def test_apply_refusals_exit_with_the_guard_code_and_show_in_status(cli: Path, mongo_db: Database, tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    plan_dir = plan_for(RSE, cli, tmp_path / "plan")
    with open(sorted((plan_dir / "jobs").iterdir())[0], "ab") as fh:
        fh.write(b"/store/unmerged/Run3Era/Primary0/x.root\n")
    assert main(["apply", str(plan_dir), "--protected", str(cli / PROTECTED_FILE)]) == EXIT_GUARD
    assert "plan_modified" in capsys.readouterr().err
    assert not Ledger(mongo_db).reads.file_records()
    assert main(["status", "--json"]) == EXIT_OK
    assert guards.PLAN_MODIFIED in capsys.readouterr().out


def test_the_cycle_and_run_once_accept_the_instances_rses(cli: Path, mongo_db: Database) -> None:
    """The instance's own RSE is worked on as before (the RSE list is read once per TTL, not per call)."""
    stats = sample.stats_for(RSE, 200, time.time() - 60)
    (cli / STATS_FILE).write_text(json.dumps(stats))
    assert main(["run", "--rse", RSE]) == EXIT_OK
    assert mongo_db.rses.find_one({"_id": RSE})["state"] in ("planned", "running")


def test_without_the_rse_list_only_configured_rses_are_accepted(cli: Path, mongo_db: Database,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    """Rucio (here: the offline list) unreadable: an RSE configured under jobs.sites is accepted, any other
    is refused with the source's error (exit 5), never assumed to be this instance's."""
    (cli / RSES_FILE).write_text("{}")  # not a list: the list is unavailable
    assert main(["run", "--rse", TYPO]) == EXIT_UNAVAILABLE
    assert RSES_FILE in capsys.readouterr().err
    nothing_recorded(mongo_db)
    assert main(["run", "--rse", RSE]) == EXIT_OK  # configured: worked on
    assert mongo_db.rses.find_one({"_id": RSE})["state"] in ("planned", "running")
