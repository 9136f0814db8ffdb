"""The trigger queue (rest/triggers.TriggerQueue) on its own: modes are the one TriggerMode enum, their wire
values unchanged, and a mode that is not one is refused before anything is claimed or queued."""
from __future__ import annotations

import json
from typing import Any

import pytest

from MSUnmerged.rest.triggers import TriggerMode, TriggerQueue, TriggerState


def test_modes_reach_the_worker_as_the_enum_and_records_keep_the_wire_value() -> None:
    ran: list[tuple[str, Any]] = []
    claimed: list[str] = []
    queue = TriggerQueue(lambda rse, mode: ran.append((rse, mode)), lambda rid: claimed.append(rid) or True)
    try:
        queue.submit("T2_A", "apply", "alice", "req-1")  # as the REST caller sends it
        queue.submit("T2_A", TriggerMode.PLAN, "alice", "req-2")
        assert queue.wait_idle(30)
    finally:
        queue.stop()
    assert ran == [("T2_A", TriggerMode.APPLY), ("T2_A", TriggerMode.PLAN)]
    assert all(isinstance(mode, TriggerMode) for _, mode in ran)
    records = queue.recent()
    assert [r["mode"] for r in records] == ["plan", "apply"] and {r["state"] for r in records} == {TriggerState.DONE}
    assert [json.loads(json.dumps(r))["mode"] for r in records] == ["plan", "apply"]  # the JSON answer's value
    assert [m.value for m in TriggerMode] == ["plan", "apply"]


def test_a_mode_that_is_not_one_is_refused_before_anything() -> None:
    claimed: list[str] = []
    queue = TriggerQueue(lambda rse, mode: None, lambda rid: claimed.append(rid) or True)
    try:
        with pytest.raises(ValueError):
            queue.submit("T2_A", "delete-everything", "alice", "req-1")
        assert claimed == [] and queue.recent() == []
    finally:
        queue.stop()
