"""WMCore MSUnmerged's answer shapes (its status report, its per-RSE document, `dirs`), built from the ledger's
view, so that a WMCore client reads this service as it reads WMCore's."""
from __future__ import annotations

import datetime
import time
from typing import Any, Optional

from MSUnmerged import __version__ as VERSION
from MSUnmerged.ledger.states import EXPECTED_DIR_REASONS, DirState, FileState, dir_failed
from MSUnmerged.ledger.view import LedgerView
from MSUnmerged.rest.params import MAX_PAGE
from MSUnmerged.statemachine import RSEState

ALL_DOCS = "all_docs"  # data/info?rse=ALL_DOCS, compared in lower case as WMCore does
# WMCore's Data.get names the manager class that answers: MSManager, for every microservice.
MICROSERVICE = "MSManager"
# The counters WMCore's ALL_DOCS answer projects (MSUnmerged.getStatsFromMongoDB), whatever `detail` says.
ALL_DOCS_COUNTERS = ("gfalErrors", "dirsToDelete", "dirsDeletedSuccess", "dirsDeletedFail")
# WMCore MSUnmerged counter -> the ledger counter with the same meaning and type.
COUNTERS = {
    "totalNumFiles": "files_total",
    "totalNumDirs": "dirs_removable",  # WMCore: its directories at the depth it deletes; here the plan's
    "dirsToDelete": "dirs_removable",
    "filesToDelete": "to_delete",
    "filesDeletedSuccess": "deleted",
    "filesDeletedFail": "failed",
    "dirsDeletedSuccess": "dirs_removed",
    "dirsDeletedFail": "dirs_failed",
    "gfalErrors": "failed_by_message",  # {the storage's message: count}; ours by class beside (failed_by_class)
}
DICTS = ("gfalErrors",)  # the others are numbers: 0, never null, when the ledger has none yet
DIR_LISTS = ("toDelete", "protected", "deletedSuccess", "deletedFail")
TIME_FORMAT = "%a, %d %b %Y %H:%M:%S UTC"  # WMCore's start_time/end_time (MSManager.updateTimeUTC)
TRUE = ("true", "True", "TRUE")  # the only values of a flag WMCore takes as true
JOBS_SHOWN, FAILED_SHOWN = 20, 100  # info?detail=true: an RSE's latest jobs, its first failed files


def flag(params: dict[str, Any], name: str, default: bool) -> bool:
    """A WMCore call's flag as WMCore reads `detail` (Data.get for status, strToBool for info): true only for one of
    TRUE, any other value false (empty, `1`, `yes`, `tRuE`, given twice); absent: the default. Never a 400 or 500:
    where WMCore's strToBool fails (info, a value neither true nor false), the answer is false's."""
    raw = params.pop(name, None)
    return default if raw is None else raw in TRUE


def iso(ts: Any) -> str:
    """Epoch seconds as WMCore answers them: naive UTC ISO-8601 (missing: the epoch, as WMCore's 0.0)."""
    ts = ts if isinstance(ts, (int, float)) and not isinstance(ts, bool) else 0.0
    return datetime.datetime.fromtimestamp(ts, datetime.timezone.utc).replace(tzinfo=None).isoformat()


def report_time(ts: Any) -> Optional[str]:
    """Epoch seconds as WMCore's status report writes them; None stays None (no cycle yet)."""
    if not isinstance(ts, (int, float)) or isinstance(ts, bool):
        return None
    return time.strftime(TIME_FORMAT, time.gmtime(ts))


def rse_doc(rse: dict[str, Any]) -> dict[str, Any]:
    """One RSE as WMCore's MSUnmerged document (MSUnmergedRSE), with the ledger's own fields beside."""
    plan = rse.get("plan") or {}
    ours = {"files_total": plan.get("files_total"), **(rse.get("counters") or {})}
    ours["failed_by_message"] = {e["message"]: e["n"] for e in ours.get("failed_by_message") or []}
    counters: dict[str, Any] = {name: ours.get(key) or ({} if name in DICTS else 0)
                                for name, key in COUNTERS.items()}
    counters.update((k, v) for k, v in ours.items() if k not in COUNTERS.values())
    gen = rse.get("generation")
    return {
        "name": rse["name"],
        "isClean": rse.get("state") == RSEState.CLEAN,
        "pfnPrefix": None,  # no central PFN: each job maps LFNs with its site's storage.json
        "rucioConMonStatus": "done" if gen is not None else None,  # a generation is a finished scan
        "timestamps": {
            "rseConsStatTime": iso(gen),  # the ConMon scan end_time of the generation worked on
            "prevStartTime": iso(None),
            "startTime": iso(plan.get("planned")),
            "prevEndTime": iso(None),
            "endTime": iso(rse.get("updated") if rse.get("state") == RSEState.CLEAN else None),
            "planTime": iso(plan.get("planned")),
            "updateTime": iso(rse.get("updated")),
            "countTime": iso(rse.get("counted_at")),
        },
        "counters": counters,
        "state": rse.get("state"),
        "reason": rse.get("reason"),
        "detail": rse.get("detail"),
        "generation": gen,
    }


def dirs(view: LedgerView, rse: str) -> dict[str, Any]:
    """WMCore's `dirs` of an RSE (lists of directories, each at most MAX_PAGE long) from the plan and the
    jobs' directory outcomes: toDelete (holding files still to delete), protected (kept by a protected or
    kept path), deletedSuccess (removed), deletedFail (not removed for an error), allUnmerged (all these)."""
    preview = view.plan_preview(rse, MAX_PAGE)
    out: dict[str, Any] = {"allUnmerged": [], "toDelete": [d["dir"] for d in preview["directories"]],
                           "protected": [], "deletedSuccess": [], "deletedFail": []}
    for record in view.dirs(rse, None, None, None, None, None, MAX_PAGE):
        state, reason = record.get("state"), record.get("error_class") or ""
        if state == DirState.REMOVED:
            out["deletedSuccess"].append(record["dir"])
        elif state == DirState.REFUSED and reason in EXPECTED_DIR_REASONS:
            out["protected"].append(record["dir"])
        elif dir_failed(str(state), reason):
            out["deletedFail"].append(record["dir"])
    out["allUnmerged"] = sorted({d for key in DIR_LISTS for d in out[key]})[:MAX_PAGE]
    out["toDeleteComplete"] = preview["shown"] >= preview["files_to_delete"]
    return out


def versions() -> dict[str, Any]:
    """What WMCore's Data.get puts in every answer."""
    return {"wmcore_version": VERSION, "microservice_version": VERSION, "microservice": MICROSERVICE}


def summary_doc(rse: dict[str, Any]) -> dict[str, Any]:
    """One RSE as WMCore's ALL_DOCS answer projects it: name, isClean, rucioConMonStatus, timestamps and four
    counters; our state and reason beside."""
    doc = rse_doc(rse)
    return {"name": doc["name"], "isClean": doc["isClean"], "rucioConMonStatus": doc["rucioConMonStatus"],
            "timestamps": doc["timestamps"], "counters": {k: doc["counters"][k] for k in ALL_DOCS_COUNTERS},
            "state": doc["state"], "reason": doc["reason"]}


def info(view: LedgerView, names: list[str], detail: bool) -> dict[str, Any]:
    """data/info's answer, as WMCore's MSManager.info and getStatsFromMongoDB: no RSE, the versions alone; ALL_DOCS
    (alone), every RSE's summary, whatever `detail` says; else the RSEs named as WMCore's documents, with detail
    each with its `dirs`, latest jobs and first failed files."""
    if not names:
        return versions()
    query = f"rse={names[0] if len(names) == 1 else names}&detail={detail}"
    if len(names) == 1 and names[0].lower() == ALL_DOCS:
        return {**versions(), "query": query, "rseData": [summary_doc(r) for r in view.rses()]}
    docs = [rse_doc(r) for r in map(view.rse, names) if r]
    if detail:
        for doc in docs:
            doc["dirs"] = dirs(view, doc["name"])
            doc["jobs"] = view.jobs(doc["name"], None, JOBS_SHOWN)
            doc["files"] = {"deletedFail": list(view.files(doc["name"], FileState.FAILED, None, None, None, None,
                                                           FAILED_SHOWN))}
    return {**versions(), "query": query, "rseData": docs}


def cycle_error(cycle: dict[str, Any], alert: str) -> str:
    """The status report's `error`: empty when the last cycle had no failure, else what failed (and the
    failing-cycles alert when it is raised), as one line."""
    failures = cycle.get("failures") or []
    if not failures:
        return ""
    shown = "; ".join(f"{f.get('source')}/{f.get('reason')}" + (f" ({f.get('rse')})" if f.get("rse") else "")
                      + (f": {str(f.get('detail'))[:200]}" if f.get("detail") else "") for f in failures[:5])
    more = f"; and {len(failures) - 5} more" if len(failures) > 5 else ""
    return (f"{alert}. " if alert else "") + f"last cycle: {len(failures)} failures: {shown}{more}"


def report(rses: list[dict[str, Any]], cycle: Optional[dict[str, Any]], instance: str,
           alert: str = "") -> dict[str, Any]:
    """WMCore's UNMERGED_REPORT (DataStructs/DefaultStructs) from the ledger and the last polling cycle."""
    cycle = cycle or {}
    return {
        **versions(),
        "status": "OK",
        "thread_id": instance,
        "start_time": report_time(cycle.get("started")),
        "end_time": report_time(cycle.get("finished")),
        "execution_time": cycle.get("duration_s"),
        "error": cycle_error(cycle, alert),
        "total_num_rses": len(rses),
        "total_num_files": sum((r.get("plan") or {}).get("files_total") or 0 for r in rses),
        "num_rses_cleaned": sum(r.get("state") == RSEState.CLEAN for r in rses),
        "num_files_deleted": sum((r.get("counters") or {}).get("deleted") or 0 for r in rses),
    }
