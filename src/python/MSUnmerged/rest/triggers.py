"""Operator triggers: a queue worked by one thread, so a trigger never blocks a request or the loop."""
from __future__ import annotations

import collections
import enum
import itertools
import logging
import queue
import threading
import time
from typing import Any, Callable, Optional

from MSUnmerged.redact import redact

log = logging.getLogger("MSUnmerged.rest.triggers")


class TriggerMode(enum.StrEnum):
    """What a trigger does to its RSE; the value is the REST `mode` callers send."""

    PLAN = "plan"  # previews a fresh plan of it: planner only, nothing recorded
    APPLY = "apply"  # works it as run_once does: records a new plan, submits jobs


# run(rse, mode) does one RSE now (wiring.TriggerWorker).
RunFn = Callable[[str, TriggerMode], Any]
# check(rse) raises TriggerRefused when the RSE may not be triggered at all (e.g. not this instance's).
CheckFn = Callable[[str], None]
# claim(request_id) records the id as used; False when it was used already (ledger.requestids.RequestIds).
ClaimFn = Callable[[str], bool]
REPLAYED = "request_id reused"  # the reason of a trigger refused for its request_id (409)


class TriggerState(enum.StrEnum):
    """A trigger's state in its record."""

    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"  # run() raised; `error` says what
    MERGED = "merged"  # the same RSE and mode was pending: that trigger (`merged_into`) does the work


PENDING = (TriggerState.QUEUED, TriggerState.RUNNING)


class TriggerRefused(Exception):
    """The trigger is refused before it is queued; `status` is the HTTP answer."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason


class TriggerQueue:
    """Triggers run one at a time, in order; an RSE already queued or running is not queued twice."""

    def __init__(self, run: RunFn, claim: ClaimFn, keep: int = 200, check: Optional[CheckFn] = None) -> None:
        self.run = run
        self.claim = claim
        self.check = check or (lambda rse: None)
        self._queue: queue.Queue[Optional[dict[str, Any]]] = queue.Queue()
        self._recent: collections.deque[dict[str, Any]] = collections.deque(maxlen=keep)
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._work, name="msunmerged-triggers", daemon=True)
        self._thread.start()

    def submit(self, rse: str, mode: TriggerMode, user: str, request_id: str) -> dict[str, Any]:
        """Queue a trigger; returns its record, with its own id: MERGED into the pending one (`merged_into`) when
        the same RSE and mode is queued or running, nothing run twice.
        TriggerRefused, with nothing queued, when `check` refuses the RSE or the request_id was used; the
        id is claimed only once the RSE is admitted, so a refused trigger may be sent again as it was.
        ValueError, before anything, for a mode that is not a TriggerMode."""
        mode = TriggerMode(mode)
        self.check(rse)
        if not self.claim(request_id):
            raise TriggerRefused(409, REPLAYED, f"request_id {request_id!r} was already used: send a fresh one")
        with self._lock:
            pending = next((r for r in self._recent if r["rse"] == rse and r["mode"] == mode
                            and r["state"] in PENDING), None)
            now = round(time.time(), 3)
            rec = {"id": next(self._ids), "rse": rse, "mode": mode, "user": user, "request_id": request_id,
                   "state": TriggerState.QUEUED, "queued": now, "started": None, "finished": None, "error": None,
                   "merged_into": None}
            if pending is not None:
                rec.update(state=TriggerState.MERGED, merged_into=pending["id"], finished=now)
            self._recent.append(rec)
        if pending is None:
            self._queue.put(rec)
        return dict(rec)

    def _work(self) -> None:
        while True:
            rec = self._queue.get()
            if rec is None:
                return
            self._set(rec, state=TriggerState.RUNNING, started=round(time.time(), 3))
            try:
                result = self.run(rec["rse"], rec["mode"])
                self._set(rec, state=TriggerState.DONE, result=_summary(result), finished=round(time.time(), 3))
            except Exception as exc:  # a failed trigger is reported, never kills the worker
                log.exception("trigger %s (%s %s) failed", rec["id"], rec["rse"], rec["mode"])
                self._set(rec, state=TriggerState.FAILED, error=redact(f"{type(exc).__name__}: {exc}")[:500],
                          finished=round(time.time(), 3))

    def _set(self, rec: dict[str, Any], **values: Any) -> None:
        with self._lock:
            rec.update(values)

    def recent(self) -> list[dict[str, Any]]:
        with self._lock:
            return [dict(r) for r in reversed(self._recent)]

    def summary(self) -> dict[str, Any]:
        counts: dict[str, int] = {}
        for rec in self.recent():
            counts[rec["state"]] = counts.get(rec["state"], 0) + 1
        return {"enabled": True, "by_state": counts}

    def wait_idle(self, timeout: float) -> bool:
        """True once nothing is queued or running (for tests and shutdown)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if all(r["state"] not in PENDING for r in self.recent()):
                return True
            time.sleep(0.05)
        return False

    def stop(self) -> None:
        self._queue.put(None)
        self._thread.join(5)


def _summary(result: Any) -> Any:
    """A JSON-ready short form of what run() returned."""
    if result is None or isinstance(result, (str, int, float, bool)):
        return result
    if isinstance(result, dict):
        return {k: v for k, v in result.items() if isinstance(v, (str, int, float, bool, type(None)))}
    to_dict = getattr(result, "to_dict", None)
    return _summary(to_dict()) if callable(to_dict) else str(result)[:500]
