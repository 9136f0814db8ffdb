"""Push alerts to AlertManager as WMCore's services do (MSCore.sendAlert, AlertManagerAPI): a JSON list of
{labels: alertname, severity, tag, service, ...; annotations: hostname, summary, description; startsAt; endsAt;
generatorURL} POSTed to `alerts.alertmanager_url`. The labels are the same at every push (no per-push uuid,
unlike WMCore's) and the same as the Prometheus rule's alert of the same problem (its alertname, `service`,
`partition`, and `rse`/`alert` per RSE), so AlertManager keeps one alert per problem, refreshed each cycle;
`startsAt` is when the problem began (the ledger's time, else when this process first saw it); a problem that
clears is resolved at once (endsAt now), one never refreshed ends by itself after `alerts.expire_cycles`
intervals."""
from __future__ import annotations

import datetime
import json
import logging
import socket
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, Mapping, Optional, Sequence

from pymongo.errors import PyMongoError

from MSUnmerged.alerts.rules import Alert, evaluate
from MSUnmerged.config import Config
from MSUnmerged.ledger.retry import LedgerError
from MSUnmerged.ledger.view import LedgerView
from MSUnmerged.redact import redact

log = logging.getLogger(__name__)


def rfc3339(ts: float) -> str:
    return datetime.datetime.fromtimestamp(ts, datetime.timezone.utc).isoformat()


class AlertManager:
    """The AlertManager endpoint of `alerts.alertmanager_url` with this service's labels."""

    def __init__(self, config: Config) -> None:
        self.cfg = config.alerts
        self.partition = config.service.partition_label
        self.expire_s = config.alerts.expire_cycles * config.service.interval_s
        self.hostname = socket.gethostname()

    def payload(self, firing: Sequence[Alert], resolved: Sequence[Alert], now: float,
                started: Mapping[tuple[str, str], float]) -> list[dict[str, Any]]:
        """The alerts as AlertManager takes them: firing ones end after expire_s unless pushed again; each starts
        at its `since`, else at `started` (when it was first seen)."""
        return [self._one(a, started.get(a.key, now), now + self.expire_s) for a in firing] + \
            [self._one(a, started.get(a.key, now), now) for a in resolved]

    def _one(self, alert: Alert, first_seen: float, ends: float) -> dict[str, Any]:
        labels = {"alertname": alert.alertname, "severity": alert.severity, "tag": self.cfg.tag,
                  "service": self.cfg.service}
        if self.partition:
            labels["partition"] = self.partition
        if alert.rse:
            labels["rse"] = alert.rse
            labels["alert"] = alert.kind.value
        starts = min(alert.since if alert.since is not None else first_seen, ends)
        link = self.cfg.page_url
        if link and alert.rse:
            link = f"{link.rstrip('/')}/rse?name={urllib.parse.quote(alert.rse, safe='')}"
        return {"labels": labels,
                # Redacted here too: a detail quoted from the ledger of an older version may hold a credential.
                "annotations": {"hostname": self.hostname, "summary": redact(alert.summary),
                                "description": redact(alert.description)},
                "startsAt": rfc3339(starts), "endsAt": rfc3339(ends), "generatorURL": link}

    def send(self, body: list[dict[str, Any]]) -> int:
        """POST the list; returns the HTTP status. OSError (urllib's errors included) when it cannot be sent."""
        request = urllib.request.Request(self.cfg.alertmanager_url, data=json.dumps(body).encode(), method="POST",
                                         headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=self.cfg.timeout_s) as answer:
                return int(answer.status)
        except urllib.error.HTTPError as exc:
            raise OSError(f"HTTP {exc.code}: {exc.read(300).decode(errors='replace')}") from None


class Notifier:
    """After each cycle: evaluate the alerts from the ledger's view and push what fires and what cleared."""

    def __init__(self, config: Config, view: LedgerView, manager: Optional[AlertManager] = None) -> None:
        self.config = config
        self.view = view
        self.manager = manager or AlertManager(config)
        self._firing: dict[tuple[str, str], Alert] = {}
        self._seen: dict[tuple[str, str], float] = {}  # when each firing alert was first seen

    def current(self, now: Optional[float] = None) -> list[Alert]:
        """The alerts firing now."""
        # The rules read the health's `alert` only (from the last cycles' failures): brief leaves out the cycles'
        # per-RSE results, which grow with the partition.
        health = self.view.health(self.config.service.stale_after_s, brief=True)
        return evaluate(health, self.view.rses(), self.config.alerts, time.time() if now is None else now)

    def after_cycle(self) -> int:
        """Push the firing alerts and resolve the cleared ones; returns how many were sent (0 on failure:
        the next cycle tries again; a failure is one log line, never an exception)."""
        now = time.time()
        try:
            firing = {a.key: a for a in self.current(now)}
        except (PyMongoError, LedgerError) as exc:  # the ledger is away: the cycle's own failure says so
            log.warning("alerts: not evaluated: %s", exc)
            return 0
        cleared = [a for k, a in self._firing.items() if k not in firing]
        if not firing and not cleared:
            return 0
        self._seen = {**{k: now for k in firing}, **self._seen}  # kept when the push fails: the next one starts alike
        body = self.manager.payload(list(firing.values()), cleared, now, self._seen)
        try:
            status = self.manager.send(body)
        except OSError as exc:
            log.warning("alerts: AlertManager %s did not take %d alerts: %s", self.config.alerts.alertmanager_url,
                        len(body), exc)
            return 0
        self._firing, self._seen = firing, {k: t for k, t in self._seen.items() if k in firing}
        log.info("alerts: %d firing (%s), %d resolved, pushed to AlertManager (HTTP %d)", len(firing),
                 ", ".join(sorted(f"{k}{'@' + r if r else ''}" for k, r in firing)) or "none", len(cleared), status)
        return len(body)
