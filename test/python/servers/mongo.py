"""A real MongoDB wire-protocol server (SecantusDB) for the ledger and service tests; one per session.

The command line is the product's own (`embedded_mongo.command`); `MongoServer` is a server of a
test's own that can be stopped and started again on the same port and data (the end-to-end tests).
"""
from __future__ import annotations

import shutil
import uuid
from pathlib import Path
from typing import Iterator, Optional

import pytest
from pymongo import MongoClient
from pymongo.database import Database

from MSUnmerged.embedded_mongo import command
from servers import Process, free_port, server_dir, server_fixture, wait_port


class MongoServer:
    """SecantusDB on a free loopback port with its data in <directory>/db (emptied at creation)."""

    def __init__(self, directory: Path, name: str = "secantusdb", *extra: str) -> None:
        self.directory = directory
        self.name = name
        self.extra = extra
        shutil.rmtree(directory / "db", ignore_errors=True)
        self.port = free_port()
        self.proc: Optional[Process] = None

    @property
    def url(self) -> str:
        return f"mongodb://127.0.0.1:{self.port}/?directConnection=true"

    def start(self) -> "MongoServer":
        self.proc = Process(self.name, command(self.port, self.directory / "db", *self.extra), self.directory)
        wait_port(self.port, timeout=60, proc=self.proc)
        return self

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.stop()
            self.proc = None


@server_fixture
def mongo_url() -> Iterator[str]:
    """URL of a SecantusDB server on a free loopback port, data in this session's server folder."""
    server = MongoServer(server_dir("mongo"), "secantusdb", "--enable-test-commands")
    try:
        yield server.start().url
    finally:
        server.stop()


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


@pytest.fixture(scope="module")
def mongo_away() -> Iterator[MongoClient]:
    """A client of an address where nothing listens. Its server selection would wait 2 s, past the tests'
    rest.db_timeout_s (1 s), so only the deadline's pymongo.timeout cuts it short; and 2 s is short enough that,
    without the deadline, a ledger call's 6 attempts end within the HTTP client's 30 s (they fail on their count)."""
    client: MongoClient = MongoClient(f"mongodb://127.0.0.1:{free_port()}/?directConnection=true",
                                      serverSelectionTimeoutMS=2000)
    try:
        yield client
    finally:
        client.close()
