"""Opens the ledger database: the configured MongoDB (URL, replica set, credentials) or the embedded one."""
from __future__ import annotations

import ast
import os
from pathlib import Path
from typing import Any, Optional

import pymongo
from pymongo import MongoClient
from pymongo.errors import PyMongoError

from MSUnmerged.config import Config, ConfigError
from MSUnmerged.embedded_mongo import EmbeddedMongo

# The first contact answers within this, so that a command on an unreachable database says so at once.
FIRST_CONTACT_S = 5.0


class DatabaseUnreachable(RuntimeError):
    """The ledger database did not answer the first contact; the message names it (no credentials)."""


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
            text = path.read_text()
        except OSError as exc:
            raise ConfigError("mongo.password_file", f"cannot read {path}: {exc.strerror}") from None
        opts["password"] = wmcore_setting(text, m.password_setting, path) if m.password_setting else text.strip()
        opts["username"] = m.username
    return opts


def wmcore_setting(text: str, name: str, path: Path) -> str:
    """The string assigned last to `name` (`name = "..."` or `<section>.name = "..."`) in a WMCore python
    configuration, read without running it (CMSWEB keeps the service's credentials in it)."""
    try:
        tree = ast.parse(text, str(path))
    except (SyntaxError, ValueError) as exc:
        raise ConfigError("mongo.password_setting", f"{path} is not a python configuration: {exc}") from None
    found: list[ast.Assign] = [node for node in ast.walk(tree) if isinstance(node, ast.Assign)
                             for target in node.targets
                             if (target.id if isinstance(target, ast.Name) else
                                 target.attr if isinstance(target, ast.Attribute) else None) == name]
    if not found:
        raise ConfigError("mongo.password_setting", f"{path} assigns no {name}")
    value = max(found, key=lambda node: node.lineno).value  # the last in the file, as running it would leave it
    if not (isinstance(value, ast.Constant) and isinstance(value.value, str)):
        raise ConfigError("mongo.password_setting", f"{name} in {path} is not a string literal")
    return value.value


def open_client(config: Config) -> tuple[MongoClient, Optional[EmbeddedMongo]]:
    """A client on mongo.url, or on the embedded server of service.state_dir (caller stops using it).

    The database must answer within FIRST_CONTACT_S, else DatabaseUnreachable.
    """
    embedded = None
    url = config.mongo.url
    if not url:
        embedded = EmbeddedMongo(config.state_dir, config.mongo.embedded_port)
        url = embedded.start()
    try:
        client: MongoClient = MongoClient(url, **client_options(config))
        try:
            with pymongo.timeout(FIRST_CONTACT_S):
                client.admin.command("ping")
        except PyMongoError as exc:
            client.close()
            where = "the embedded database" if embedded else "mongo.url"
            raise DatabaseUnreachable(f"ledger database unreachable ({where}: {', '.join(hosts(url))}) "
                                      f"within {FIRST_CONTACT_S:g} s: {first_error(exc)}") from None
        return client, embedded
    except BaseException:
        if embedded is not None:
            embedded.stop()
        raise


def hosts(url: str) -> list[str]:
    """host:port of each server in a MongoDB URL, without credentials or options."""
    rest = url.split("://", 1)[-1].split("/", 1)[0].split("?", 1)[0]
    return rest.rsplit("@", 1)[-1].split(",")


def first_error(exc: Exception) -> str:
    """The first server's error of a pymongo message (the rest repeats timeouts and topology)."""
    text = str(exc).split(" (configured timeouts", 1)[0].split(", Timeout:", 1)[0]
    return text if len(text) <= 200 else text[:197] + "..."
