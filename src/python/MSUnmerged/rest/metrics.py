"""Prometheus text exposition (format 0.0.4) of the ledger's per-RSE counters, jobs and cycles."""
from __future__ import annotations

from typing import Any, Iterable

from MSUnmerged.rest.view import LedgerView

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def _label(value: Any) -> str:
    """Label values escape backslash, double quote and newline, as the format requires."""
    return str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _labels(**labels: Any) -> str:
    return "{" + ",".join(f'{k}="{_label(v)}"' for k, v in labels.items()) + "}"


def _number(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return "0"
    return repr(float(value)) if isinstance(value, float) else str(value)


class _Family:
    def __init__(self, name: str, kind: str, help_text: str) -> None:
        self.name = name
        self.lines = [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]

    def add(self, value: Any, **labels: Any) -> None:
        self.lines.append(f"{self.name}{_labels(**labels) if labels else ''} {_number(value)}")


def render(view: LedgerView) -> str:
    """All metric families in one text answer."""
    deleted = _Family("msunmerged_files_deleted", "gauge", "Files deleted in the RSE's current generation.")
    to_delete = _Family("msunmerged_files_to_delete", "gauge", "Files planned for deletion in the current generation.")
    failed = _Family("msunmerged_files_failed", "gauge", "Files whose deletion failed, by error class.")
    freed = _Family("msunmerged_bytes_freed", "gauge", "Bytes freed where file sizes are known.")
    state = _Family("msunmerged_rse_state", "gauge", "1 for the RSE's current state.")
    updated = _Family("msunmerged_rse_updated_timestamp_seconds", "gauge", "Last change of the RSE's ledger state.")
    jobs = _Family("msunmerged_jobs", "gauge", "Cleanup jobs by RSE and state.")
    cycle = _Family("msunmerged_cycle_duration_seconds", "gauge", "Duration of the last finished polling cycle.")
    cycle_end = _Family("msunmerged_cycle_last_end_timestamp_seconds", "gauge", "End of the last polling cycle.")
    up = _Family("msunmerged_ledger_up", "gauge", "1 when the ledger database answered this scrape.")

    for rse in view.rses():
        name = rse["name"]
        c = rse.get("counters") or {}
        deleted.add(c.get("deleted", 0), rse=name)
        to_delete.add(c.get("to_delete", 0), rse=name)
        for error_class, n in sorted((c.get("failed_by_class") or {}).items()):
            failed.add(n, rse=name, error_class=error_class)
        freed.add(c.get("bytes_freed", 0), rse=name)
        state.add(1, rse=name, state=rse.get("state", "unknown"))
        if isinstance(rse.get("updated"), (int, float)):
            updated.add(rse["updated"], rse=name)
    for row in view.jobs_by_state():
        jobs.add(row["count"], rse=row["rse"], state=row["state"])
    finished = [c for c in view.cycles(5) if c.get("duration_s") is not None]
    if finished:
        cycle.add(finished[0]["duration_s"])
        cycle_end.add(finished[0].get("finished"))
    up.add(1)
    families: Iterable[_Family] = (deleted, to_delete, failed, freed, state, updated, jobs, cycle, cycle_end, up)
    return "\n".join(line for f in families for line in f.lines) + "\n"


def render_down() -> str:
    """What a scrape gets while the database is unreachable: only the up gauge, at 0."""
    f = _Family("msunmerged_ledger_up", "gauge", "1 when the ledger database answered this scrape.")
    f.add(0)
    return "\n".join(f.lines) + "\n"
