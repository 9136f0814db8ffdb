"""Builds a Service from the configuration alone: ledger, sources and batch backends."""
from __future__ import annotations

import contextlib
from typing import Iterator, Optional

from MSUnmerged.config import Config
from MSUnmerged.jobs.backend import BatchBackend
from MSUnmerged.jobs.router import RoutingBackend
from MSUnmerged.ledger import Ledger
from MSUnmerged.ledger.connect import open_client
from MSUnmerged.service import Service
from MSUnmerged.sources import Sources
from MSUnmerged.sources.rucio import site_from_rse


def make_backend(config: Config, kind: str, site: str, ledger_id: str = "") -> BatchBackend:
    """The batch backend of one kind for one site (imports only what that kind needs); `ledger_id` marks the
    jobs of this ledger where a batch system may be shared (HTCondor)."""
    if kind == "local":
        from MSUnmerged.jobs.local import LocalBackend
        siteconfigs = {s.get("site"): s.get("siteconfig") for s in config.jobs.sites.values() if s.get("siteconfig")}
        return LocalBackend(config, siteconfig=siteconfigs.get(site))
    if kind == "condor":
        from MSUnmerged.jobs.condor import CondorBackend
        return CondorBackend(config.condor, config.jobs, config.state_dir / "condor-jobs", ledger_id=ledger_id)
    if kind == "slurm":
        from MSUnmerged.jobs.slurm import SlurmBackend
        return SlurmBackend.from_config(config, site)
    raise ValueError(f"unknown batch backend {kind!r}")  # config validation prevents this


def site_of(config: Config, rse: str) -> str:
    return config.jobs.sites.get(rse, {}).get("site") or site_from_rse(rse) or rse


def make_router(config: Config, ledger_id: str = "") -> RoutingBackend:
    """The service's batch backend: each RSE's jobs go to the backend of its site."""
    return RoutingBackend(config, lambda kind, site: make_backend(config, kind, site, ledger_id),
                          lambda rse: site_of(config, rse))


@contextlib.contextmanager
def build_service(config: Config, sources: Optional[Sources] = None,
                  instance: Optional[str] = None) -> Iterator[Service]:
    """A ready Service (live sources unless given); the embedded database stops on exit."""
    client, embedded = open_client(config)
    try:
        if sources is None:
            from MSUnmerged.sources.live import LiveSources
            sources = LiveSources(config)
        ledger = Ledger(client[config.mongo.database], config.mongo.generations_kept)
        ledger.ensure_indexes()
        service = Service(config, ledger, sources, make_router(config, ledger.instance_id()), instance=instance)
        try:
            yield service
        finally:
            service.stop()
    finally:
        client.close()
        if embedded is not None:
            embedded.stop()
