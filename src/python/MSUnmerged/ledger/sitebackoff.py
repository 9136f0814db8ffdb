"""A site whose configuration is unusable is backed off instead of being sent the same files every cycle.

A job that ends with the worker's EXIT_CONFIG (no usable site-local-config or stage-out method, or a storage
mapping that disagrees with Rucio: nothing touched, its files `config_error`) counts one try on the RSE document's
`site_backoff` ({tries, until, detail, since}); until `until` nothing of the RSE is submitted (its jobs stay
planned: one retry round waits, not one a cycle), then one job goes out as a probe. The wait doubles with each try, from
`service.interval_s` up to `jobs.config_error_backoff_max_h`. A job that gets past the site configuration clears it.
"""
from __future__ import annotations

import time
from typing import Any, Mapping, Optional

from MSUnmerged.config import Config
from MSUnmerged.ledger.base import LedgerBase
from MSUnmerged.ledger.retry import with_retry
from MSUnmerged.present import when

FIELD = "site_backoff"


def wait_s(tries: int, config: Config) -> float:
    """The wait after `tries` tries in a row that ended config_error: one polling cycle, doubled each try, bounded."""
    bound = config.jobs.config_error_backoff_max_h * 3600
    return min(bound, config.service.interval_s * 2.0 ** min(max(tries - 1, 0), 60))


def current(doc: Optional[Mapping[str, Any]]) -> Optional[Mapping[str, Any]]:
    """The RSE document's back-off, None when its site is not backed off."""
    hold = (doc or {}).get(FIELD)
    return hold if isinstance(hold, Mapping) and hold.get("tries") else None


def holds(doc: Optional[Mapping[str, Any]], now: Optional[float] = None) -> bool:
    """Nothing of the RSE may be submitted now."""
    hold = current(doc)
    return hold is not None and float(hold.get("until") or 0) > (time.time() if now is None else now)


def describe(hold: Mapping[str, Any]) -> str:
    """The RSE's detail while backed off."""
    return (f"the site configuration was unusable in {hold['tries']} tries in a row (config_error: "
            f"{hold.get('detail') or '-'}); next try, one job, at {when(hold.get('until'))}")


class SiteBackoff:
    """An RSE's site backed off, probed and cleared on its document."""

    def __init__(self, base: LedgerBase) -> None:
        self.base = base

    def failed(self, rse: str, detail: str, submitted_at: float, config: Config) -> Mapping[str, Any]:
        """Jobs submitted at `submitted_at` (the latest of them) ended config_error: one more try, and the wait that
        follows it, unless they went out before the latest try began (they are that try's, counted). Returns the
        back-off."""
        now = time.time()
        hold = current(self.base.rse(rse))
        if hold is not None and submitted_at < float(hold.get("tried_at") or 0):
            return hold
        tries = int(hold["tries"]) + 1 if hold else 1
        new = {"tries": tries, "since": hold["since"] if hold else now, "tried_at": now,
               "until": now + wait_s(tries, config), "detail": detail[:500]}
        with_retry(lambda: self.base.rses.update_one({"_id": rse}, {"$set": {FIELD: new}}), f"back off {rse}")
        return new

    def probing(self, rse: str, hold: Mapping[str, Any], config: Config) -> None:
        """A probe job goes out: nothing more until its outcome is known, or until the wait after it is over."""
        now = time.time()
        new = {f"{FIELD}.tried_at": now, f"{FIELD}.until": now + wait_s(int(hold["tries"]) + 1, config)}
        with_retry(lambda: self.base.rses.update_one({"_id": rse}, {"$set": new}), f"probe {rse}")

    def cleared(self, rse: str) -> None:
        """A job got past the site configuration: the RSE is no longer backed off."""
        with_retry(lambda: self.base.rses.update_one({"_id": rse, FIELD: {"$exists": True}}, {"$unset": {FIELD: ""}}),
                   f"clear back-off {rse}")
