"""Builds the service from the configuration alone (ledger, sources, batch backends), and runs `serve`'s process
around it: the polling loop, the operator triggers' worker and the REST API."""
from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import threading
from typing import Any, Iterator, Optional

from MSUnmerged.config import Config
from MSUnmerged.guards import UNKNOWN_RSE
from MSUnmerged.jobs.router import RoutingBackend
from MSUnmerged.ledger import Ledger
from MSUnmerged.ledger.connect import open_client
from MSUnmerged.rest.triggers import TriggerMode, TriggerQueue, TriggerRefused
from MSUnmerged.service import Runner, Service, UnknownRSE
from MSUnmerged.sites import RSEAttributes, resolve_site
from MSUnmerged.sources import Sources
from MSUnmerged.sources.errors import SourceError

log = logging.getLogger("MSUnmerged.serve")
PING_S = 3.0  # the database watch's question to the ledger is answered within this


def make_router(config: Config, ledger_id: str = "", attributes: Optional[RSEAttributes] = None) -> RoutingBackend:
    """The service's batch backend: each RSE's jobs go to the backend of its site (resolve_site, with the RSE
    attributes of `attributes`, the service's sources)."""
    return RoutingBackend(config, lambda rse: resolve_site(config.jobs, rse, attributes), ledger_id)


@contextlib.contextmanager
def build_service(config: Config, sources: Optional[Sources] = None,
                  instance: Optional[str] = None) -> Iterator[Service]:
    """A ready Service (live sources unless given); the embedded database stops on exit."""
    client, embedded = open_client(config)
    try:
        if sources is None:
            from MSUnmerged.sources.live import LiveSources
            sources = LiveSources(config)
        ledger = Ledger(client[config.mongo.database], config.mongo.generations_kept, config.mongo.cycles_kept_days)
        ledger.ensure_indexes()
        router = make_router(config, ledger.instance_id(), sources)
        service = Service(config, ledger, sources, router, instance=instance)
        try:
            yield service
        finally:
            service.stop()
            router.close()  # after serve's triggers and loop ended: nothing submits any more
    finally:
        client.close()
        if embedded is not None:
            embedded.stop()


class TriggerWorker:
    """What an operator's trigger does (rest/triggers.py queues them, one at a time): TriggerMode.PLAN previews the
    RSE (planner only, nothing recorded), TriggerMode.APPLY runs run_once on it with the service's batch backend,
    as a lease owner of its own ("<instance>-trigger"), so an RSE the loop works on answers leased_elsewhere
    instead of being worked twice at once."""

    def __init__(self, service: Service) -> None:
        self.previews = service.runner
        self.runner = Runner(service.config, service.ledger, service.sources, service.runner.jobs.backend,
                             instance=f"{service.instance}-trigger")

    def admit(self, rse: str) -> None:
        """A trigger for an RSE that is not this instance's is refused before it is queued (nothing recorded)."""
        try:
            self.runner.require_rse(rse)
        except UnknownRSE as exc:
            raise TriggerRefused(404, UNKNOWN_RSE, str(exc)) from None
        except SourceError as exc:  # the RSE list cannot be read and the RSE is not configured
            raise TriggerRefused(503, f"{exc.source}_{exc.kind}", str(exc)) from None

    def run(self, rse: str, mode: TriggerMode) -> Any:
        return self.runner.run_once(rse) if mode is TriggerMode.APPLY else self.previews.preview(rse)

    def stop(self) -> None:
        self.runner.leases.stop_heartbeat()


def serve(config: Config, service: Service, port: Optional[int] = None) -> None:
    """Serve until interrupted (Ctrl-C, or SIGTERM made one: KeyboardInterrupt is raised on once everything is
    stopped): the service's loop in a thread, triggers in another, REST in CherryPy's. The REST API names the
    service's instance (thread_id) even when the configuration leaves it to the host name and PID."""
    from MSUnmerged.dbwatch import DatabaseWatch  # the REST side is loaded by serve only
    from MSUnmerged.embedded_mongo import EmbeddedMongo
    from MSUnmerged.rest import app

    config = dataclasses.replace(config, service=dataclasses.replace(config.service, instance=service.instance))
    triggers = TriggerWorker(service)
    request_ids = service.ledger.request_ids(config.rest.replay_window_s)
    request_ids.ensure_index()
    queue = TriggerQueue(triggers.run, request_ids.claim, check=triggers.admit)
    watch = DatabaseWatch(lambda: ping(service.ledger), None if config.mongo.url else
                          EmbeddedMongo(config.state_dir), config.rest.db_dead_s).start()
    loop = threading.Thread(target=service.serve, name="msunmerged-loop", daemon=True)
    loop.start()
    try:
        app.start(config, service.ledger.view(config.rest.cache_ttl_s), queue, port=port, watch=watch)
        app.block()
    finally:
        app.stop()
        watch.stop()
        service.stop()
        queue.stop()
        triggers.stop()
        loop.join(30)


def ping(ledger: Ledger) -> None:
    """The watch's question to the ledger database, answered within PING_S."""
    import pymongo
    with pymongo.timeout(PING_S):
        ledger.ping()


def serve_private(config: Config, sources: Optional[Sources] = None, port: Optional[int] = None) -> None:
    """Build the service (live sources unless given) and serve, every file it writes private to its user:
    0600 files and 0700 folders (plans, job areas, the embedded database, the audit log)."""
    os.umask(0o077)
    with build_service(config, sources=sources) as service:
        serve(config, service, port)
