"""An RSE's state written with other fields in one update (ledger.base.state_update, with_state): pure."""
from __future__ import annotations

from MSUnmerged.ledger.base import EVENTS_KEPT, state_update, with_state


def test_a_state_joins_the_fields_of_the_same_write_and_upserts() -> None:
    state = state_update("skipped", "scan_missing", "no scan", started=1.0)
    update, upsert = with_state({"counters.jobs_by_state": {}}, state)
    assert upsert and update["$set"]["state"] == "skipped" and update["$set"]["started"] == 1.0
    assert update["$set"]["counters.jobs_by_state"] == {} and "created" in update["$setOnInsert"]
    assert update["$push"]["events"]["$each"][0]["reason"] == "scan_missing"
    assert update["$push"]["events"]["$slice"] == -EVENTS_KEPT
    assert state["$set"].keys() == {"state", "reason", "detail", "updated", "started"}  # not changed by the join


def test_without_a_state_only_the_fields_are_set_and_nothing_is_created() -> None:
    assert with_state({"counted_at": 2.0}, None) == ({"$set": {"counted_at": 2.0}}, False)
    assert "$push" not in state_update("running", detail="3 jobs submitted")  # no reason: no event
