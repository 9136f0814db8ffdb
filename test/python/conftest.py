"""Shared fixtures: fixture data paths and the real servers (see servers/)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

# Server fixtures live in servers/<name>.py; each is listed here once.
pytest_plugins: list[str] = ["servers.rest", "servers.condor", "servers.slurm", "servers.rucio", "servers.mongo", "servers.xrootd", "e2e.e2e_harness"]

REPO = Path(__file__).resolve().parents[2]
FIXTURES = (REPO.parent / "shared" / "fixtures" / "wmcore").resolve()


@pytest.fixture(scope="session")
def wmcore_fixtures() -> Path:
    """The real samples in ../shared/fixtures/wmcore (protected list, ConMon answers, site configs)."""
    if not FIXTURES.is_dir():
        pytest.fail(f"shared fixtures not found at {FIXTURES}")
    return FIXTURES


@pytest.fixture(scope="session")
def protected_lfns(wmcore_fixtures: Path) -> list[str]:
    return json.loads((wmcore_fixtures / "protectedLFNs.json").read_text())


@pytest.fixture(scope="session")
def conmon_dump_lfns(wmcore_fixtures: Path) -> list[str]:
    return json.loads((wmcore_fixtures / "conmon-unmerged-files.json").read_text())


@pytest.fixture(scope="session")
def conmon_stats(wmcore_fixtures: Path) -> dict:
    return json.loads((wmcore_fixtures / "conmon-stats.json").read_text())
