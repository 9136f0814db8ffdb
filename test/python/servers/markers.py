"""The `integration` marker is true: a test that asks for a real server without it fails before anything starts.

A server fixture is one made with `servers.server_fixture`. Whether a test asks for one is read from its
fixture closure (its own fixtures and theirs, transitively), known once it is collected: no server has to run
for the check, so `pytest --setup-plan` checks the whole suite in seconds.
"""
from __future__ import annotations

import pytest

from servers import SERVER_FIXTURES


def unmarked_servers(item: pytest.Item) -> list[str]:
    """The server fixtures `item` asks for while it is not marked `integration` (none when it is)."""
    if item.get_closest_marker("integration") is not None:
        return []
    return sorted(SERVER_FIXTURES.intersection(getattr(item, "fixturenames", ())))


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Fails the test before any of its fixtures (the servers among them) is set up."""
    servers = unmarked_servers(item)
    if servers:
        pytest.fail(f"asks for the real server fixture(s) {', '.join(servers)} without @pytest.mark.integration "
                    "(docs/testing.md)", pytrace=False)
