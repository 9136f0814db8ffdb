"""What deserves an alert now, decided from the ledger's view alone (pure functions): the polling cycles
failing for too long, and per RSE: no progress for days, the same guard again and again, a stale scan, the
site's storage mapping refused by the jobs."""
from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional, Sequence

from MSUnmerged.config import AlertsConfig
from MSUnmerged.guards import GUARD_SCAN_STALE
from MSUnmerged.statemachine import SITE_CONFIG_BACKOFF, RSEState
from MSUnmerged.worker.report import (MAPPING_DISAGREES, NO_PFN, OTHER_NAMESPACE, PFN_OUTSIDE_UNMERGED,
                                      UNCONDITIONAL_DELETE)

DAY = 86400.0
# Error classes of files a job refused because the site's storage mapping is not to be trusted for them.
MAPPING_CLASSES = (MAPPING_DISAGREES, PFN_OUTSIDE_UNMERGED, NO_PFN, OTHER_NAMESPACE, UNCONDITIONAL_DELETE,
                   "config_error")
# Files left to do in the current generation (a dry run's would_delete files are done for it).
LEFT = ("pending", "failed", "unknown")
DONE_STATES = (RSEState.CLEAN, RSEState.DRY_RUN_DONE)


class AlertKind(enum.StrEnum):
    """Every alert this service raises (its `alertname` is ALERTNAME's; the per-RSE kinds in the `alert` label)."""

    CYCLES_FAILING = "cycles_failing"
    RSE_NO_PROGRESS = "rse_no_progress"
    RSE_GUARDED = "rse_guarded"
    RSE_SCAN_STALE = "rse_scan_stale"
    RSE_MAPPING_REFUSED = "rse_mapping_refused"
    RSE_SITE_CONFIG_UNUSABLE = "rse_site_config_unusable"


SEVERITY = {AlertKind.CYCLES_FAILING: "high"}  # WMCore's levels: high, medium, low; the others are medium
# The `alertname` of each kind: the Prometheus rule's of the same problem (deploy/prometheus/ms-unmerged-rules.yaml),
# so that AlertManager merges a push and the rule's alert into one (same labels); the per-RSE kinds share one
# name, told apart by their `alert` label as the rule's are.
ALERTNAME = {AlertKind.CYCLES_FAILING: "MSUnmergedCyclesFailing"}
RSE_ALERTNAME = "MSUnmergedRSEStalled"


@dataclass(frozen=True)
class Alert:
    """One firing alert; (kind, rse) identifies it. `since`: when the problem began, where the ledger says."""

    kind: AlertKind
    summary: str
    description: str
    rse: str = ""
    since: Optional[float] = None

    @property
    def severity(self) -> str:
        return SEVERITY.get(self.kind, "medium")

    @property
    def alertname(self) -> str:
        return ALERTNAME.get(self.kind, RSE_ALERTNAME)

    @property
    def key(self) -> tuple[str, str]:
        return (self.kind.value, self.rse)


def evaluate(health: Mapping[str, Any], rses: Sequence[Mapping[str, Any]], cfg: AlertsConfig,
             now: float) -> list[Alert]:
    """Every alert that fires now: the health's cycle alert (LedgerView.health) and each RSE's."""
    out = []
    if health.get("alert"):
        since = health.get("age_from")  # the last good cycle (before any: the first cycle's start), as recorded
        out.append(Alert(AlertKind.CYCLES_FAILING, "MSUnmerged polling cycles are failing", str(health["alert"]),
                         since=since if isinstance(since, (int, float)) else None))
    for rse in rses:
        out += rse_alerts(rse, cfg, now)
    return out


def rse_alerts(rse: Mapping[str, Any], cfg: AlertsConfig, now: float) -> list[Alert]:
    """The alerts of one RSE (LedgerView.rses shape): each of RSE_RULES that fires."""
    return [alert for rule in RSE_RULES if (alert := rule(rse, cfg, now)) is not None]


def _no_progress(rse: Mapping[str, Any], cfg: AlertsConfig, now: float) -> Optional[Alert]:
    """Files left in the current generation and none done for cfg.stall_days."""
    name, state, reason = str(rse["name"]), rse.get("state"), rse.get("reason") or ""
    c = rse.get("counters") or {}
    left = sum(int(c.get(k) or 0) for k in LEFT)
    since = rse.get("progress_at") or (rse.get("plan") or {}).get("planned")
    if rse.get("generation") is None or state in DONE_STATES or not left or not isinstance(since, (int, float)) \
            or now - since <= cfg.stall_days * DAY:
        return None
    return Alert(AlertKind.RSE_NO_PROGRESS, f"{name}: no cleanup progress for {(now - since) / DAY:.1f} days",
                 f"{left:,} files left ({', '.join(f'{k} {int(c.get(k) or 0):,}' for k in LEFT)}); "
                 f"state {state}, reason {reason or '-'}; no file done since the time stamp {since:.0f}", name, since)


def _guarded(rse: Mapping[str, Any], cfg: AlertsConfig, now: float) -> Optional[Alert]:
    """The same guard refused cfg.guard_repeats times in a row, or for longer than cfg.stall_days."""
    name, reason = str(rse["name"]), rse.get("reason") or ""
    if rse.get("state") != RSEState.GUARDED:
        return None
    same = repeated(rse.get("events") or [], RSEState.GUARDED, reason)
    started = same[0]["at"] if same else None
    first = now if started is None else started
    if len(same) < cfg.guard_repeats and now - first <= cfg.stall_days * DAY:
        return None
    return Alert(AlertKind.RSE_GUARDED, f"{name}: guard {reason} refused {len(same)} times in a row",
                 f"nothing is deleted while it holds; since {(now - first) / DAY:.1f} days; last detail: "
                 f"{rse.get('detail') or '-'}", name, started)


def _scan_stale(rse: Mapping[str, Any], cfg: AlertsConfig, now: float) -> Optional[Alert]:
    """The RSE waits on a stale ConMon scan."""
    if rse.get("reason") != GUARD_SCAN_STALE:
        return None
    name = str(rse["name"])
    return Alert(AlertKind.RSE_SCAN_STALE, f"{name}: its ConMon scan is stale",
                 f"the scanner has not produced a usable dump: {rse.get('detail') or '-'}", name)


def _site_config_unusable(rse: Mapping[str, Any], cfg: AlertsConfig, now: float) -> Optional[Alert]:
    """The RSE's jobs are held back: its site's configuration was unusable (ledger/sitebackoff.py)."""
    if rse.get("reason") != SITE_CONFIG_BACKOFF:
        return None
    name = str(rse["name"])
    return Alert(AlertKind.RSE_SITE_CONFIG_UNUSABLE, f"{name}: its site configuration is unusable, its jobs are held "
                 "back", f"{rse.get('detail') or '-'}; fix jobs.sites.{name}.siteconfig or the site's "
                 "site-local-config.xml / storage.json", name)


def _mapping_refused(rse: Mapping[str, Any], cfg: AlertsConfig, now: float) -> Optional[Alert]:
    """Jobs refused files because the site's storage mapping is not to be trusted for them."""
    failed = (rse.get("counters") or {}).get("failed_by_class") or {}
    refused = {k: int(v) for k, v in failed.items() if k in MAPPING_CLASSES and v}
    if not refused:
        return None
    name = str(rse["name"])
    return Alert(AlertKind.RSE_MAPPING_REFUSED, f"{name}: jobs refused the site's storage mapping",
                 f"{sum(refused.values()):,} files not deleted "
                 f"({', '.join(f'{k} {v:,}' for k, v in sorted(refused.items()))}): "
                 "check the site's storage.json / site-local-config against Rucio", name)


RSE_RULES: tuple[Callable[[Mapping[str, Any], AlertsConfig, float], Optional[Alert]], ...] = (
    _no_progress, _guarded, _scan_stale, _site_config_unusable, _mapping_refused)


def repeated(events: Sequence[Mapping[str, Any]], state: str, reason: str) -> list[Mapping[str, Any]]:
    """The newest run of events (oldest first) with this state and reason."""
    run: list[Mapping[str, Any]] = []
    for e in reversed(events):
        if e.get("state") != state or (e.get("reason") or "") != reason:
            break
        run.append(e)
    return run[::-1]
