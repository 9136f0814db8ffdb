"""Shared by the ledger-reading commands (status, jobs, files): open the ledger view, print JSON or tables."""
from __future__ import annotations

import contextlib
import json
import sys
from typing import Any, Iterator

from pymongo.errors import PyMongoError

from MSUnmerged.cli import BadInput
from MSUnmerged.config import Config
from MSUnmerged.ledger import open_client
from MSUnmerged.rest.view import MongoLedgerView


@contextlib.contextmanager
def ledger_view(config: Config) -> Iterator[MongoLedgerView]:
    """The ledger's read view (the embedded database is started and stopped when mongo.url is empty)."""
    client, embedded = open_client(config)
    try:
        view = MongoLedgerView(client[config.mongo.database])
        view.ping()
        yield view
    except PyMongoError as exc:
        raise BadInput(f"ledger database unreachable: {exc}") from None
    finally:
        client.close()
        if embedded is not None:
            embedded.stop()


def print_json(result: Any) -> None:
    json.dump({"result": result}, sys.stdout, indent=1, sort_keys=True, default=str)
    sys.stdout.write("\n")
