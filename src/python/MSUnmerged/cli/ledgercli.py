"""Shared by the ledger-reading commands (status, jobs, files): open the ledger view, print JSON or tables."""
from __future__ import annotations

import contextlib
import json
import sys
from typing import Any, Iterator

from MSUnmerged.cli import BadInput
from MSUnmerged.config import Config
from MSUnmerged.ledger import Ledger, open_client
from MSUnmerged.ledger.view import MongoLedgerView


@contextlib.contextmanager
def ledger_view(config: Config) -> Iterator[MongoLedgerView]:
    """The ledger's read view (on the embedded database when mongo.url is empty, shared with its other users)."""
    client, embedded = open_client(config)
    try:
        yield Ledger(client[config.mongo.database]).view()
    finally:
        client.close()
        if embedded is not None:
            embedded.stop()


def known_rse(view: MongoLedgerView, rse: str) -> dict[str, Any]:
    """The RSE's summary; an RSE the ledger does not know is bad input (a typo must not look like 'nothing')."""
    doc = view.rse(rse)
    if doc is None:
        names = [r["name"] for r in view.rses()]
        known = f"known: {', '.join(names[:10])}{', ...' if len(names) > 10 else ''}" if names else "the ledger is empty"
        raise BadInput(f"no RSE {rse!r} in the ledger ({known})")
    return doc


def print_json(result: Any) -> None:
    json.dump({"result": result}, sys.stdout, indent=1, sort_keys=True, default=str)
    sys.stdout.write("\n")
