"""One service instance as its own process, for the multi-instance test: runs one cycle and exits.

usage: service_instance_driver.py URL DB SOURCES BATCH STATE INSTANCE SLOT WORKLOG SITES

BATCH is the LocalBackend work folder shared by the instances (one batch system); SITES a JSON file
with config.jobs.sites (each RSE's site configuration).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from pymongo import MongoClient

from MSUnmerged.config import Config, SiteConfig
from MSUnmerged.ledger import Ledger
from MSUnmerged.service import Runner, RunResult, Service
from MSUnmerged.service.scans import StatsRead
from MSUnmerged.service.run import FirstBatch
from MSUnmerged.sources.offline import OfflineSources
from service_kit import LoggedLocalBackend


class LoggingRunner(Runner):
    """Appends one line per RSE actually worked on (not skipped for a lease) to a shared log."""

    def __init__(self, *args: object, worklog: Path, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.worklog = worklog

    def run_once(self, rse: str, slot: int | None = None, wait_s: float = 0.0,
                 stats: StatsRead | None = None, first_batch: FirstBatch | None = None) -> RunResult:
        result = super().run_once(rse, slot, wait_s, stats, first_batch)
        if result.action not in ("leased_elsewhere", "done_this_cycle"):
            with open(self.worklog, "a") as fh:
                fh.write(json.dumps({"rse": rse, "instance": self.instance, "action": result.action,
                                     "reason": result.reason}) + "\n")
        return result


def main(url: str, db: str, sources: str, batch: str, state: str, instance: str, slot: str, worklog: str,
         sites: str) -> int:
    config = Config()
    config.service.state_dir = state
    config.service.dry_run = False
    config.service.lease_ttl_s = 10
    config.service.parallel_rses = 2
    config.service.interval_s = 3600
    config.planner.files_per_job = 100
    config.jobs.sites = {rse: SiteConfig(**s) for rse, s in json.loads(Path(sites).read_text()).items()}
    ledger = Ledger(MongoClient(url)[db])
    ledger.ensure_indexes()
    backend = LoggedLocalBackend(config, Path(batch))
    svc = Service(config, ledger, OfflineSources(sources), backend, instance=instance)
    svc.runner = LoggingRunner(config, ledger, OfflineSources(sources), backend, instance=instance, worklog=Path(worklog))
    results = svc.cycle(slot=int(slot))
    svc.stop()
    print(json.dumps({rse: r.to_dict() for rse, r in results.items()}))
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
