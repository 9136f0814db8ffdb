"""Shared fixtures: fixture data paths and the real servers (see servers/)."""
from __future__ import annotations

import json
import signal
import threading
from pathlib import Path
from typing import Any

import pytest

from servers import keep_session_dir, run_script
from sites_kit import SITE_FIXTURES

# Server fixtures live in servers/<name>.py; each is listed here once. servers.markers fails a test that asks
# for one of them without the `integration` marker.
pytest_plugins: list[str] = ["servers.rest", "servers.condor", "servers.slurm", "servers.rucio", "servers.mongo", "servers.xrootd",
                             "servers.alertmanager", "servers.webdav", "servers.markers"]

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "test" / "fixtures" / "wmcore"  # real samples, copied into the repository (test/fixtures/README.md)


@pytest.fixture(scope="session")
def wmcore_fixtures() -> Path:
    """The real samples in test/fixtures/wmcore (protected list, ConMon answers)."""
    if not FIXTURES.is_dir():
        pytest.fail(f"fixtures not found at {FIXTURES}")
    return FIXTURES


@pytest.fixture(scope="session")
def site_fixtures() -> Path:
    """Real sites' site-local-config.xml, storage.json and trivial file catalogs in test/fixtures/sites/<site>."""
    if not SITE_FIXTURES.is_dir():
        pytest.fail(f"fixtures not found at {SITE_FIXTURES}")
    return SITE_FIXTURES


@pytest.fixture(scope="session")
def protected_lfns(wmcore_fixtures: Path) -> list[str]:
    return json.loads((wmcore_fixtures / "protectedLFNs.json").read_text())


@pytest.fixture(scope="session")
def conmon_dump_lfns(wmcore_fixtures: Path) -> list[str]:
    return json.loads((wmcore_fixtures / "conmon-unmerged-files.json").read_text())


@pytest.fixture(scope="session")
def conmon_stats(wmcore_fixtures: Path) -> dict:
    return json.loads((wmcore_fixtures / "conmon-stats.json").read_text())


@pytest.fixture(scope="session")
def wmcore() -> str:
    """PYTHONPATH of WMCore's own code, to run it beside ours (wmcore_kit.ask): PyPI wmcore without its dependencies
    in a folder of its own (never in the service's environment), plus `future` that its modules import."""
    return run_script("pip-target.sh", "wmcore-storage", "WMCore.Storage.RucioFileCatalog",
                      "--no-deps wmcore==2.4.5.9", "future", timeout=900).strip().splitlines()[-1]


def pytest_configure(config: pytest.Config) -> None:
    """A suite started as a background job of a shell without job control (`make test &`, nohup) inherits SIGINT
    ignored, and so would every command a test starts: the tests of Ctrl-C would test how the suite was started,
    not the command. Python's own handler then, as in a suite started in the foreground."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.default_int_handler)


KEPT: list[str] = []  # the servers' folders kept by this session (and by its pytest-xdist workers)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """A failed session, or pytest-xdist worker, keeps its servers' folder (logs, data); a passed one removes it."""
    if exitstatus not in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
        kept = keep_session_dir()
        if kept is not None:
            KEPT.append(str(kept))
            if hasattr(session.config, "workeroutput"):  # an xdist worker: tell the controller
                session.config.workeroutput["servers_kept"] = str(kept)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    """pytest-xdist's controller: a worker ended, having kept its servers' folder or not."""
    kept = getattr(node, "workeroutput", {}).get("servers_kept")
    if kept:
        KEPT.append(kept)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, exitstatus: int) -> None:
    for kept in KEPT:
        terminalreporter.write_line(f"servers' logs and data of this session kept in {kept}")
