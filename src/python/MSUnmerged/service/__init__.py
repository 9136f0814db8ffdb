"""The polling service (docs/ledger.md): loop.py's Service runs cycles with its Runner, schedule.py when each RSE
of a cycle starts (and its hold for the largest, with hold.py), run.py's Runner works one RSE as a context through
its list of steps (run_once, apply_plan, preview), decide.py the state machine on the ledger's progress,
jobkeeper.py's JobKeeper owns its cleanup jobs in the batch system, rses.py this instance's RSE list and the order a
cycle starts them in, scans.py the cycle's one ConMon `stats` read handed to its runs, result.py what a run
reports."""
from MSUnmerged.service.jobkeeper import JobKeeper
from MSUnmerged.service.loop import Service
from MSUnmerged.service.result import STEPS, Failure, Hook, RunAction, RunResult, failure_of
from MSUnmerged.service.rses import InstanceRSEs, UnknownRSE
from MSUnmerged.service.run import ALREADY_APPLIED, Runner

__all__ = ["ALREADY_APPLIED", "STEPS", "Failure", "Hook", "InstanceRSEs", "JobKeeper", "RunAction",
           "RunResult", "Runner", "Service", "UnknownRSE", "failure_of"]
