"""Builds a Service from the configuration alone: ledger, sources and batch backends."""
from __future__ import annotations

import contextlib
from typing import Iterator, Optional

from MSUnmerged.config import Config
from MSUnmerged.jobs.router import RoutingBackend
from MSUnmerged.ledger import Ledger
from MSUnmerged.ledger.connect import open_client
from MSUnmerged.service import Service
from MSUnmerged.sites import RSEAttributes, resolve_site
from MSUnmerged.sources import Sources


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
        service = Service(config, ledger, sources, make_router(config, ledger.instance_id(), sources),
                          instance=instance)
        try:
            yield service
        finally:
            service.stop()
    finally:
        client.close()
        if embedded is not None:
            embedded.stop()
