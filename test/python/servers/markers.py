"""Markers that are true: a test that asks for a real server without the `integration` marker fails before anything
starts, and the tests of the machine's shared servers run one at a time under pytest-xdist.

A server fixture is one made with `servers.server_fixture` (`machine_wide_fixture` for the HTCondor pool and
Slurm). Whether a test asks for one is read from its fixture closure (its own fixtures and theirs, transitively),
known once it is collected: no server has to run for the check, so `pytest --setup-plan` checks the whole suite
in seconds.
"""
from __future__ import annotations

import pytest

from servers import MACHINE_WIDE, SERVER_FIXTURES

MACHINE_GROUP = "machine-wide-servers"  # the xdist_group of the tests that use the machine's servers


def unmarked_servers(item: pytest.Item) -> list[str]:
    """The server fixtures `item` asks for while it is not marked `integration` (none when it is)."""
    if item.get_closest_marker("integration") is not None:
        return []
    return sorted(SERVER_FIXTURES.intersection(getattr(item, "fixturenames", ())))


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's worker reads the groups into the test ids
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The tests using a machine-wide server change what its other users see (the pool's /srv/siteconf, the node's
    state): one xdist group, so that `--dist loadgroup` runs them in one worker, one after the other."""
    if not config.pluginmanager.hasplugin("xdist"):
        return
    for item in items:
        if MACHINE_WIDE.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.xdist_group(MACHINE_GROUP))


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Fails the test before any of its fixtures (the servers among them) is set up."""
    servers = unmarked_servers(item)
    if servers:
        pytest.fail(f"asks for the real server fixture(s) {', '.join(servers)} without @pytest.mark.integration "
                    "(docs/testing.md)", pytrace=False)
