"""The trigger queue (rest/triggers.TriggerQueue) on its own: modes are the one TriggerMode enum, their wire
values unchanged, and a mode that is not one is refused before anything is claimed or queued."""
from __future__ import annotations

import json
import threading
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


def test_a_merged_trigger_answers_with_its_own_id_and_is_listed() -> None:
    """Before: a trigger for an RSE and mode already pending answered with the pending trigger's record; its
    own id was spent and it was listed nowhere."""
    release = threading.Event()
    ran: list[str] = []

    def run(rse: str, mode: TriggerMode) -> None:
        ran.append(rse)
        release.wait(30)

    queue = TriggerQueue(run, lambda rid: True)
    try:
        first = queue.submit("T2_A", TriggerMode.PLAN, "alice", "req-1")
        second = queue.submit("T2_A", TriggerMode.PLAN, "bob", "req-2")
        other_mode = queue.submit("T2_A", TriggerMode.APPLY, "bob", "req-3")
        assert second["id"] not in (first["id"], other_mode["id"])
        assert second["state"] == TriggerState.MERGED and second["merged_into"] == first["id"]
        assert second["request_id"] == "req-2" and second["user"] == "bob"
        assert other_mode["state"] == TriggerState.QUEUED and other_mode["merged_into"] is None
        listed = {r["id"]: r for r in queue.recent()}
        assert listed[second["id"]]["merged_into"] == first["id"] and len(listed) == 3
        release.set()
        assert queue.wait_idle(30)
    finally:
        release.set()
        queue.stop()
    assert ran == ["T2_A", "T2_A"]  # the plan once, the apply once: the merged one ran nothing
    assert queue.summary()["by_state"] == {TriggerState.DONE: 2, TriggerState.MERGED: 1}
