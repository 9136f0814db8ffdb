"""The polling service (docs/ledger.md): loop.py runs cycles, run.py works one RSE (run_once, apply_plan,
preview), jobkeeper.py owns its cleanup jobs, rses.py this instance's RSE list, result.py what a run reports."""
from MSUnmerged.service.jobkeeper import REVALIDATED, JobKeeper
from MSUnmerged.service.loop import Service
from MSUnmerged.service.result import STEPS, Failure, Hook, RunAction, RunResult, failure_of
from MSUnmerged.service.rses import InstanceRSEs, UnknownRSE
from MSUnmerged.service.run import ALREADY_APPLIED, Runner

__all__ = ["ALREADY_APPLIED", "REVALIDATED", "STEPS", "Failure", "Hook", "InstanceRSEs", "JobKeeper", "RunAction",
           "RunResult", "Runner", "Service", "UnknownRSE", "failure_of"]
