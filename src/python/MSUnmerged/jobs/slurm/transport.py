"""How the backend talks to Slurm (the command line or slurmrestd): the interface and what an array asks for."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Protocol

from MSUnmerged.jobs.slurm.states import SlurmRecord

NAME_PREFIX = "msunmerged-"  # of our arrays' job names: how find() tells them from the user's others
JOB_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"  # a job's PATH when Slurm gives none


class Transport(Protocol):
    """How Slurm is talked to: the command line or slurmrestd."""

    def ping(self) -> None: ...

    def submit(self, script: str, spec: "ArraySpec") -> str: ...

    def query(self, array_ids: Iterable[str]) -> list[SlurmRecord]: ...

    def ours(self) -> list[SlurmRecord]: ...

    def accounting(self, raw_ids: Iterable[str]) -> dict[str, SlurmRecord]: ...

    def cancel(self, batch_id: str) -> None: ...


@dataclass
class ArraySpec:
    """What one job array asks of Slurm."""

    name: str
    size: int
    parallel: int
    time_limit_min: int
    memory_mb: int
    directory: str
    partition: str = ""
    account: str = ""
    qos: str = ""

    @property
    def indexes(self) -> str:
        return f"0-{self.size - 1}" + (f"%{self.parallel}" if self.parallel > 0 else "")
