"""Fixtures for the REST tests: the CherryPy app on a free port over the shared SecantusDB, headless Chromium."""
from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any, Iterator

import pytest
from pymongo import MongoClient
from pymongo.database import Database

from MSUnmerged.config import Config

from servers import free_port, run_script


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
def rest_app(mongo_client: MongoClient, hmac_key: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RestApp]:
    """The CherryPy app on a free loopback port over the shared MongoDB wire-protocol server (servers.mongo).

    CherryPy's engine is process-global, so one app serves the whole session; tests seed their own RSEs.
    """
    from MSUnmerged.rest import app as rest
    from MSUnmerged.rest.triggers import TriggerQueue
    from MSUnmerged.ledger.view import MongoLedgerView

    config = Config()
    config.rest.hmac_key_file = str(hmac_key)
    config.rest.audit_log = str(tmp_path_factory.mktemp("rest-audit") / "audit.jsonl")
    config.rest.cache_ttl_s = 0.0
    config.rest.trigger_rate_per_min = 3
    config.rest.thread_pool = 8  # small, so that the slow-client test can hold every thread
    config.rest.socket_timeout_s = 1.5
    mongo_client.drop_database("msunmerged_rest_test")
    db = mongo_client["msunmerged_rest_test"]
    port = free_port()
    state = RestApp(f"http://127.0.0.1:{port}{config.rest.base}", db, hmac_key, Path(config.rest.audit_log), config)
    triggers = TriggerQueue(state.run)
    rest.start(config, MongoLedgerView(db), triggers, port=port)
    try:
        yield state
    finally:
        triggers.stop()
        rest.stop()
