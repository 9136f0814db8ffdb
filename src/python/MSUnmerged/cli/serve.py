"""`msunmerged serve`: the REST service face (and, given a Service, its polling loop and triggers)."""
from __future__ import annotations

import argparse
import logging
import threading
from typing import Any, Optional

from MSUnmerged.cli import EXIT_OK
from MSUnmerged.config import Config
from MSUnmerged.ledger import open_client
from MSUnmerged.rest import app
from MSUnmerged.rest.triggers import TriggerQueue
from MSUnmerged.rest.view import MongoLedgerView
from MSUnmerged.service import Service

log = logging.getLogger("MSUnmerged.serve")


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("serve", help="serve the REST API and operator page (with the loop when wired)")
    p.add_argument("--port", type=int, default=None, help="listen port (default rest.port)")
    p.set_defaults(run=run)


def serve(config: Config, service: Optional[Service] = None, port: Optional[int] = None) -> None:
    """Serve until SIGTERM. With a Service: its loop runs in a thread and triggers call run_once."""
    client, embedded = open_client(config)
    triggers = None
    try:
        view = MongoLedgerView(client[config.mongo.database])
        if service is not None:
            # run_once has no plan-only mode: "plan" answers the ledger's current plan preview,
            # "apply" works the RSE now (dry-run or not as service.dry_run says).
            triggers = TriggerQueue(lambda rse, mode: service.run_once(rse).to_dict() if mode == "apply"
                                    else view.plan_preview(rse, 0))
            loop = threading.Thread(target=service.serve, name="msunmerged-loop", daemon=True)
            loop.start()
        app.start(config, view, triggers, port=port)
        app.block()
    finally:
        if service is not None:
            service.stop()
        if triggers is not None:
            triggers.stop()
        client.close()
        if embedded is not None:
            embedded.stop()


def run(args: argparse.Namespace, config: Config) -> int:
    # No factory builds a Service from configuration alone yet (sources + batch backend), so the
    # command serves the read side; triggers answer 503 until a Service is passed to serve().
    log.warning("serving the REST API read-only: the polling loop and triggers need a Service")
    serve(config, None, args.port)
    return EXIT_OK
