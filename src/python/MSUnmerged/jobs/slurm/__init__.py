"""Slurm batch backend: cleanup jobs as Slurm job arrays, through slurmrestd (REST, JWT) or the command line.

Modules: states (Slurm states -> JobState), shell (command lines through the prefix), transport (the interface),
cli and rest (the two transports), backend (SlurmBackend).

Jobs and service share a folder (`slurm.work_dir`) on the cluster's file system:

    <work_dir>/jobs/<job>/     manifest.json; written by the job: started (its raw Slurm job id),
                               report.jsonl (the worker's), exit_code, job.log; by remove(): removed (reason)
    <work_dir>/arrays/<tag>/   msunmerged-worker.pyz, jobs.txt (task index -> job folder), jobs.json (task index ->
                               job id), job.sh, slurm-<i>.log
File names: worker/ids.py.

The service reaches that folder, and in `cli` mode the Slurm commands, through `slurm.command_prefix`: every
command is handed to it as ONE shell-quoted string (as ssh expects); empty means `sh -c` on this machine.
The marker files let a job be judged after Slurm forgot it (MinJobAge), and tell our own cancellations
(REMOVED) from anyone else's (FAILED). Everything is written with umask 077: the storage credential each job
folder holds (docs/jobs.md) is readable by the job's user only.
"""
from MSUnmerged.jobs.slurm.backend import SlurmBackend

__all__ = ["SlurmBackend"]
