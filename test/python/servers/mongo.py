"""A real MongoDB wire-protocol server (SecantusDB) for the ledger and service tests; one per session."""
from __future__ import annotations

import shutil
import sys
import uuid
from pathlib import Path
from typing import Iterator

import pytest
from pymongo import MongoClient
from pymongo.database import Database

from servers import Process, free_port, server_dir, wait_port


def _secantusd() -> str:
    local = Path(sys.executable).with_name("secantusd-py")
    found = str(local) if local.exists() else shutil.which("secantusd-py")
    if not found:
        pytest.fail("secantusd-py not found: pip install -r requirements.txt")
    return found


@pytest.fixture(scope="session")
def mongo_url() -> Iterator[str]:
    """URL of a SecantusDB server on a free loopback port, data in test/.servers/mongo/db."""
    directory = server_dir("mongo")
    shutil.rmtree(directory / "db", ignore_errors=True)
    port = free_port()
    proc = Process("secantusdb", [_secantusd(), "--host", "127.0.0.1", "--port", str(port), "--storage-path",
                                  str(directory / "db"), "--standalone", "--log-level", "WARNING",
                                  "--enable-test-commands"], directory)
    try:
        wait_port(port, timeout=60, proc=proc)
        yield f"mongodb://127.0.0.1:{port}/?directConnection=true"
    finally:
        proc.stop()


@pytest.fixture(scope="session")
def mongo_client(mongo_url: str) -> Iterator[MongoClient]:
    client: MongoClient = MongoClient(mongo_url, serverSelectionTimeoutMS=10000)
    yield client
    client.close()


@pytest.fixture
def mongo_db(mongo_client: MongoClient) -> Iterator[Database]:
    """A database of its own for each test, dropped afterwards."""
    name = f"t_{uuid.uuid4().hex[:12]}"
    yield mongo_client[name]
    mongo_client.drop_database(name)
