"""The polling service (docs/ledger.md): loop.py's Service runs cycles with its Runner, run.py's Runner works one
RSE in its step order (run_once, apply_plan, preview), jobkeeper.py's JobKeeper owns its cleanup jobs in the batch
system, rses.py this instance's RSE list and the order a cycle starts them in, scans.py the cycle's one ConMon
`stats` read handed to its runs, result.py what a run reports."""
from MSUnmerged.service.jobkeeper import JobKeeper
from MSUnmerged.service.loop import Service
from MSUnmerged.service.result import STEPS, Failure, Hook, RunAction, RunResult, failure_of
from MSUnmerged.service.rses import InstanceRSEs, UnknownRSE
from MSUnmerged.service.run import ALREADY_APPLIED, Runner

__all__ = ["ALREADY_APPLIED", "STEPS", "Failure", "Hook", "InstanceRSEs", "JobKeeper", "RunAction",
           "RunResult", "Runner", "Service", "UnknownRSE", "failure_of"]
