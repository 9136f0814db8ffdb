"""Fixtures for the REST tests: a SecantusDB server, the CherryPy app on a free port, headless Chromium."""
from __future__ import annotations

import hashlib
import shutil
import sys
from pathlib import Path
from typing import Any, Iterator

import pytest
from pymongo import MongoClient
from pymongo.database import Database

from MSUnmerged.config import Config

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


class RestApp:
    """The running app: its base URL, database, key and audit files, and the triggers it ran."""

    def __init__(self, url: str, db: Database, key: Path, audit: Path, config: Config) -> None:
        self.url = url
        self.db = db
        self.key = key
        self.audit = audit
        self.config = config
        self.ran: list[tuple[str, str]] = []

    def run(self, rse: str, mode: str) -> dict[str, Any]:
        self.ran.append((rse, mode))
        return {"rse": rse, "mode": mode}


@pytest.fixture(scope="session")
def rest_app(rest_mongo: MongoClient, hmac_key: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RestApp]:
    """The CherryPy app on a free loopback port over a real MongoDB wire-protocol server.

    CherryPy's engine is process-global, so one app serves the whole session; tests seed their own RSEs.
    """
    from MSUnmerged.rest import app as rest
    from MSUnmerged.rest.triggers import TriggerQueue
    from MSUnmerged.rest.view import MongoLedgerView

    config = Config()
    config.rest.hmac_key_file = str(hmac_key)
    config.rest.audit_log = str(tmp_path_factory.mktemp("rest-audit") / "audit.jsonl")
    config.rest.cache_ttl_s = 0.0
    config.rest.trigger_rate_per_min = 3
    db = rest_mongo["msunmerged_rest_test"]
    port = free_port()
    state = RestApp(f"http://127.0.0.1:{port}{config.rest.base}", db, hmac_key, Path(config.rest.audit_log), config)
    triggers = TriggerQueue(state.run)
    rest.start(config, MongoLedgerView(db), triggers, port=port)
    try:
        yield state
    finally:
        triggers.stop()
        rest.stop()
