"""`msunmerged serve`: the polling loop, operator triggers and the REST API / operator page in one process."""
from __future__ import annotations

import argparse
import logging
import os
import socket
import threading
from typing import Any, Optional

import pymongo
from pymongo.database import Database

from MSUnmerged.cli import EXIT_OK, BadInput
from MSUnmerged.config import Config
from MSUnmerged.dbwatch import DatabaseWatch
from MSUnmerged.embedded_mongo import EmbeddedMongo
from MSUnmerged.guards import UNKNOWN_RSE
from MSUnmerged.ledger.requestids import RequestIds
from MSUnmerged.ledger.view import MongoLedgerView
from MSUnmerged.rest import app
from MSUnmerged.rest.triggers import TriggerQueue, TriggerRefused
from MSUnmerged.service import Service, UnknownRSE
from MSUnmerged.sources import Sources
from MSUnmerged.sources.errors import SourceError

log = logging.getLogger("MSUnmerged.serve")
PING_S = 3.0


def register(p: argparse.ArgumentParser) -> None:
    p.add_argument("--port", type=int, default=None, help="listen port (default rest.port)")
    p.set_defaults(run=run)


def port_in_use(host: str, port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as CherryPy binds
        try:
            s.bind((host, port))
            return False
        except OSError:
            return True


def admit(service: Service, rse: str) -> None:
    """A trigger for an RSE that is not this instance's is refused before it is queued (nothing recorded)."""
    try:
        service.require_rse(rse)
    except UnknownRSE as exc:
        raise TriggerRefused(404, UNKNOWN_RSE, str(exc)) from None
    except SourceError as exc:  # the RSE list cannot be read and the RSE is not configured
        raise TriggerRefused(503, f"{exc.source}_{exc.kind}", str(exc)) from None


def serve(config: Config, service: Service, port: Optional[int] = None) -> None:
    """Serve until SIGTERM: the service's loop in a thread, triggers in another, REST in CherryPy's.

    Trigger mode=plan gives a fresh plan preview (planner only, nothing recorded); mode=apply runs
    run_once for the RSE as its own lease owner ("<instance>-trigger"), so an RSE the loop is
    working on answers leased_elsewhere instead of being worked twice at once.
    """
    listen = config.rest.port if port is None else port
    # Checked before anything runs: on a busy port CherryPy ends the process at once (os._exit), which
    # would skip every clean-up, the embedded database's too.
    if port_in_use(config.rest.host, listen):
        raise BadInput(f"port {listen} on {config.rest.host} is in use (another msunmerged serve?): "
                       "choose another with --port or rest.port")
    worker = Service(config, service.ledger, service.sources, service.backend,
                     instance=f"{service.instance}-trigger")
    request_ids = RequestIds(service.ledger.db, config.rest.replay_window_s)
    request_ids.ensure_index()
    triggers = TriggerQueue(lambda rse, mode: worker.run_once(rse) if mode == "apply" else service.preview(rse),
                            request_ids.claim, check=lambda rse: admit(worker, rse))
    watch = DatabaseWatch(lambda: ping(service.ledger.db), None if config.mongo.url else
                          EmbeddedMongo(config.state_dir), config.rest.db_dead_s).start()
    loop = threading.Thread(target=service.serve, name="msunmerged-loop", daemon=True)
    loop.start()
    try:
        app.start(config, MongoLedgerView(service.ledger.db), triggers, port=port, watch=watch)
        app.block()
    finally:
        watch.stop()
        service.stop()
        triggers.stop()
        worker.stop()
        loop.join(30)


def ping(db: Database) -> None:
    """The watch's question to the ledger database, answered within PING_S."""
    with pymongo.timeout(PING_S):
        db.client.admin.command("ping")


def serve_private(config: Config, sources: Optional[Sources] = None, port: Optional[int] = None) -> int:
    """Build the service (live sources unless given) and serve, every file it writes private to its user:
    0600 files and 0700 folders (plans, job areas, the embedded database, the audit log)."""
    os.umask(0o077)
    from MSUnmerged.wiring import build_service  # imports the live sources and backends only when needed
    with build_service(config, sources=sources) as service:
        serve(config, service, port)
    return EXIT_OK


def run(args: argparse.Namespace, config: Config) -> int:
    return serve_private(config, port=args.port)
