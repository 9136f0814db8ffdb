"""Fixtures for the REST tests: a SecantusDB server, the CherryPy app on a free port, headless Chromium."""
from __future__ import annotations

import hashlib
import shutil
import sys
from pathlib import Path
from typing import Iterator

import pytest
from pymongo import MongoClient

from servers import Process, free_port, run_script, server_dir, wait_port


def secantusd() -> str:
    local = Path(sys.executable).with_name("secantusd-py")
    found = str(local) if local.exists() else shutil.which("secantusd-py")
    if not found:
        pytest.fail("secantusd-py not found: pip install -r requirements.txt")
    return found


@pytest.fixture(scope="session")
def rest_mongo_url() -> Iterator[str]:
    """A SecantusDB (MongoDB wire protocol) server in memory on a free loopback port."""
    port = free_port()
    proc = Process("rest-secantusdb", [secantusd(), "--host", "127.0.0.1", "--port", str(port),
                                       "--storage-path", ":memory:", "--standalone", "--log-level", "WARNING"],
                   server_dir("rest-mongo"))
    try:
        wait_port(port, timeout=60, proc=proc)
        yield f"mongodb://127.0.0.1:{port}/?directConnection=true"
    finally:
        proc.stop()


@pytest.fixture(scope="session")
def rest_mongo(rest_mongo_url: str) -> Iterator[MongoClient]:
    client: MongoClient = MongoClient(rest_mongo_url, serverSelectionTimeoutMS=10000)
    yield client
    client.close()


@pytest.fixture(scope="session")
def chromium() -> str:
    """Debian's Chromium, installed once by test/scripts/chromium.sh."""
    return run_script("chromium.sh", timeout=1200).strip().splitlines()[-1]


@pytest.fixture(scope="session")
def hmac_key(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("rest-auth") / "hmac.key"
    path.write_bytes(hashlib.sha256(b"msunmerged-test-key").digest())
    path.chmod(0o600)
    return path
