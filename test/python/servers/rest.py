"""Fixtures for the REST tests: the CherryPy app on a free port over the shared SecantusDB, headless Chromium."""
from __future__ import annotations

import copy
import hashlib
from pathlib import Path
from typing import Any, Iterator

import pytest
from pymongo import MongoClient
from pymongo.database import Database

from MSUnmerged.config import Config
from MSUnmerged.ledger.requestids import RequestIds

from servers import free_port, run_script, server_fixture


@pytest.fixture(scope="session")
def chromium() -> str:
    """Debian's Chromium, installed once by test/scripts/chromium.sh."""
    return run_script("chromium.sh", timeout=1200).strip().splitlines()[-1]


# The logins the REST tests' operators trigger as (rest.operator_logins of the session's app).
TEST_OPERATORS = ("alice", "bob", "carol", "erin", "frank", "fuzzer", "ivan", "jmuller", "judy", "kate",
                  "olga", "oscar", "rita", "tina")


@pytest.fixture(scope="session")
def hmac_key(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("rest-auth") / "hmac.key"
    path.write_bytes(hashlib.sha256(b"msunmerged-test-key").digest())
    path.chmod(0o600)
    return path


class Mounted:
    """Another app on the running server, under its own base (RestApp.mount)."""

    def __init__(self, url: str, root: Any) -> None:
        self.url = url
        self.root = root


class RestApp:
    """The running app: its base URL, database, key and audit files, and the triggers it ran."""

    def __init__(self, url: str, db: Database, key: Path, audit: Path, config: Config) -> None:
        self.url = url
        self.db = db
        self.key = key
        self.audit = audit
        self.config = config
        self.ran: list[tuple[str, str]] = []
        self.ids = RequestIds(db, config.rest.replay_window_s)  # the trigger request ids, in the ledger
        self.ids.ensure_index()

    def run(self, rse: str, mode: str) -> dict[str, Any]:
        self.ran.append((rse, mode))
        return {"rse": rse, "mode": mode}

    def triggers(self, claim: Any = None, check: Any = None) -> Any:
        """A trigger queue that runs `run`, over the ledger's request ids (or `claim`), admitting with `check`."""
        from MSUnmerged.rest.triggers import TriggerQueue
        return TriggerQueue(self.run, claim or self.ids.claim, check=check)

    def mount(self, base: str, view: Any = None, watch: Any = None, claim: Any = None, check: Any = None,
              **rest_keys: Any) -> Mounted:
        """A second app on the running server under `base`, with its own view (default: over `db`), triggers
        (`claim`, `check`: see `triggers`) and configuration: this one's with `rest_keys` changed."""
        from MSUnmerged.ledger import Ledger
        from MSUnmerged.rest import app as rest
        config = copy.deepcopy(self.config)
        config.rest.base = base
        for key, value in rest_keys.items():
            setattr(config.rest, key, value)
        root = rest.mount(config, Ledger(self.db).view() if view is None else view, self.triggers(claim, check),
                          watch)
        return Mounted(self.url.rsplit("/", 1)[0] + base, root)


@server_fixture
def rest_app(mongo_client: MongoClient, hmac_key: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RestApp]:
    """The CherryPy app on a free loopback port over the shared MongoDB wire-protocol server (servers.mongo).

    CherryPy's engine is process-global, so one app serves the whole session; tests seed their own RSEs.
    """
    from MSUnmerged.rest import app as rest
    from MSUnmerged.ledger import Ledger

    config = Config()
    config.rest.hmac_key_file = str(hmac_key)
    config.rest.audit_log = str(tmp_path_factory.mktemp("rest-audit") / "audit.jsonl")
    config.rest.cache_ttl_s = 0.0
    config.rest.trigger_rate_per_min = 3
    config.rest.operator_logins = list(TEST_OPERATORS)  # triggers are closed while it is empty
    config.rest.thread_pool = 8  # small, so that the slow-client test can hold every thread
    config.rest.max_connections_per_client = 4  # (from several addresses: the cap is below the threads)
    config.rest.max_requests_per_caller = 4
    config.rest.max_requests_unverified = 6
    config.rest.caller_requests_per_s = 1000.0  # the tests' own many requests (one caller: 127.0.0.1) are not limited
    config.rest.caller_burst = 1000
    config.rest.socket_timeout_s = 1.5
    mongo_client.drop_database("msunmerged_rest_test")
    db = mongo_client["msunmerged_rest_test"]
    port = free_port()
    state = RestApp(f"http://127.0.0.1:{port}{config.rest.base}", db, hmac_key, Path(config.rest.audit_log), config)
    triggers = state.triggers()
    rest.start(config, Ledger(db).view(), triggers, port=port)
    try:
        yield state
    finally:
        triggers.stop()
        rest.stop()
