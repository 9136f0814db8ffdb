"""Opens the ledger database: the configured MongoDB (URL, replica set, credentials) or the embedded one."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Optional

from pymongo import MongoClient

from MSUnmerged.config import Config, ConfigError
from MSUnmerged.embedded_mongo import EmbeddedMongo


def client_options(config: Config) -> dict[str, Any]:
    """pymongo keyword arguments from the mongo section (credentials from a file, never logged)."""
    m = config.mongo
    opts: dict[str, Any] = {"serverSelectionTimeoutMS": 15000, "connectTimeoutMS": 10000,
                            "socketTimeoutMS": 300000, "retryWrites": True, "appname": "msunmerged"}
    if m.replica_set:
        opts["replicaSet"] = m.replica_set
    if m.username:
        if not m.password_file:
            raise ConfigError("mongo.password_file", "needed when mongo.username is set")
        path = Path(os.path.expanduser(m.password_file))
        try:
            opts["password"] = path.read_text().strip()
        except OSError as exc:
            raise ConfigError("mongo.password_file", f"cannot read {path}: {exc.strerror}") from None
        opts["username"] = m.username
    return opts


def open_client(config: Config) -> tuple[MongoClient, Optional[EmbeddedMongo]]:
    """A client on mongo.url, or on an embedded server started under service.state_dir (caller stops it)."""
    embedded = None
    url = config.mongo.url
    if not url:
        embedded = EmbeddedMongo(config.state_dir, config.mongo.embedded_port)
        url = embedded.start()
    try:
        return MongoClient(url, **client_options(config)), embedded
    except Exception:
        if embedded is not None:
            embedded.stop()
        raise
