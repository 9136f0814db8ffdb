"""The end-to-end tests' session fixture: the world of e2e_world_kit, started once."""
from __future__ import annotations

from typing import Iterator

import pytest

from e2e.e2e_world_kit import World, running_world
from servers.condor import CondorPool
from servers.rucio import RucioServer


@pytest.fixture(scope="session")
def e2e_world(condor_pool: CondorPool, rucio_server: RucioServer) -> Iterator[World]:
    with running_world(condor_pool, rucio_server) as world:
        yield world
