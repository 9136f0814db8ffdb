"""`serve`'s watch over its ledger database: pings it, restarts an embedded one that died, and tells the
liveness probe when the database has not answered for `rest.db_dead_s` (so the pod is restarted)."""
from __future__ import annotations

import logging
import threading
import time
from typing import Callable, Iterator, Optional

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from MSUnmerged.embedded_mongo import EmbeddedMongo, EmbeddedMongoError
from MSUnmerged.ledger.connect import first_error

log = logging.getLogger(__name__)

EVERY_S = 2.0  # between two pings
LOG_EVERY_S = 60.0  # while the database stays silent, one line a minute (a ping fails every EVERY_S)


class DatabaseWatch(Collector):
    """Pings with `ping()` every EVERY_S seconds in a thread of its own; `embedded`: the embedded server to
    bring back when it is gone (None: a configured MongoDB, only watched). Also the metrics of it."""

    def __init__(self, ping: Callable[[], None], embedded: Optional[EmbeddedMongo], dead_after_s: float) -> None:
        self.ping = ping
        self.embedded = embedded
        self.dead_after_s = dead_after_s
        self.restarts = 0
        self.last_answer = time.monotonic()
        self._logged: Optional[float] = None  # when the silence was last logged; None while the database answers
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="msunmerged-dbwatch", daemon=True)

    def start(self) -> "DatabaseWatch":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(10)

    def check(self) -> None:
        """One round: ping; when it fails and the embedded server is gone, start it again."""
        try:
            self.ping()
        except Exception as exc:  # any failure to answer is what is watched for
            failure = f"{type(exc).__name__}: {first_error(exc)}"
        else:
            if self._logged is not None:
                log.warning("ledger database answers again after %.0f s", self.silent_s())
            self.last_answer, self._logged = time.monotonic(), None
            return
        if self.embedded is None:
            self._log("ledger database not answering for %.0f s: %s", self.silent_s(), failure)
            return
        try:
            restarted = self.embedded.revive()
        except EmbeddedMongoError as exc:
            self._log("embedded database not answering for %.0f s and not restarted: %s", self.silent_s(), exc)
            return
        if restarted:
            self.restarts += 1
            log.error("embedded database was gone (%s): started again on its port and data (restart %d)",
                      failure, self.restarts)

    def _log(self, message: str, *args: object) -> None:
        """An error line when the silence begins, then one a minute."""
        now = time.monotonic()
        if self._logged is None or now - self._logged >= LOG_EVERY_S:
            self._logged = now
            log.error(message, *args)

    def silent_s(self) -> float:
        """Seconds since the database last answered."""
        return time.monotonic() - self.last_answer

    def dead(self) -> Optional[str]:
        """Why the liveness probe fails now (the database silent for longer than dead_after_s), or None."""
        silent = self.silent_s()
        if self.dead_after_s and silent > self.dead_after_s:
            return f"ledger database has not answered for {silent:.0f} s (rest.db_dead_s = {self.dead_after_s:g})"
        return None

    def _loop(self) -> None:
        while not self._stop.wait(EVERY_S):
            self.check()

    def collect(self) -> Iterator[Metric]:
        yield CounterMetricFamily("msunmerged_embedded_db_restarts", "Times serve started its embedded ledger "
                                  "database again after it died.", value=self.restarts)
        yield GaugeMetricFamily("msunmerged_ledger_silent_seconds", "Seconds since the ledger database last "
                                "answered serve's watch.", value=round(self.silent_s(), 1))
