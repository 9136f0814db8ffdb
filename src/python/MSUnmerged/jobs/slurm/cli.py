"""The Slurm command line (sbatch, squeue, sacct, scancel), run through the Shell."""
from __future__ import annotations

import shlex
from typing import Iterable

from MSUnmerged.jobs.backend import BackendError
from MSUnmerged.jobs.slurm.shell import Shell, cli_error
from MSUnmerged.jobs.slurm.states import SlurmRecord
from MSUnmerged.jobs.slurm.transport import NAME_PREFIX, ArraySpec
from MSUnmerged.worker.ids import ARRAY_LOG_NAME


class CliTransport:
    """sbatch / squeue / sacct / scancel, run through the Shell (locally or on a login node)."""

    FORMAT = "%i|%j|%T|%r"

    def __init__(self, shell: Shell, sacct: str) -> None:
        self.shell = shell
        self.sacct = sacct

    def ping(self) -> None:
        result = self.shell.run("scontrol ping", check=False)
        out = result.stdout.decode(errors="replace").strip()
        if "DOWN" in out or (result.returncode == 0 and "UP" not in out):
            # "Slurmctld(primary) at <host> is DOWN": scontrol ran, the controller did not answer it.
            raise BackendError("unreachable", f"slurmctld does not answer `scontrol ping`: {out or 'no answer'}")
        if result.returncode != 0:
            raise cli_error("scontrol ping", result)

    def submit(self, script: str, spec: ArraySpec) -> str:
        args = ["sbatch", "--parsable", f"--job-name={spec.name}", f"--array={spec.indexes}",
                f"--time={spec.time_limit_min}", f"--mem={spec.memory_mb}", "--ntasks=1", "--cpus-per-task=1",
                "--no-requeue", "--export=NONE", f"--chdir={spec.directory}",
                f"--output={spec.directory}/{ARRAY_LOG_NAME}"]
        args += [f"--{k}={v}" for k, v in (("partition", spec.partition), ("account", spec.account),
                                           ("qos", spec.qos)) if v]
        out = self.shell.run(shlex.join(args), stdin=script.encode()).stdout.decode().strip()
        array_id = out.split(";")[0]
        if not array_id.isdigit():
            raise BackendError("bad_answer", f"sbatch answered {out!r}")
        return array_id

    def _squeue(self, selector: str) -> list[SlurmRecord]:
        result = self.shell.run(f"squeue -h -r -t all {selector} -o {shlex.quote(self.FORMAT)}", check=False)
        if result.returncode != 0:
            if b"Invalid job id" in result.stderr:  # every id asked for was purged
                return []
            raise cli_error("squeue", result)
        records = []
        for line in result.stdout.decode().splitlines():
            parts = line.split("|")
            if len(parts) != 4:
                raise BackendError("bad_answer", f"squeue line {line!r}")
            batch_id, name, state, reason = parts
            records.append(SlurmRecord(batch_id, name, state, reason))
        return records

    def query(self, array_ids: Iterable[str]) -> list[SlurmRecord]:
        ids = sorted(set(array_ids))
        return self._squeue(f"-j {','.join(ids)}") if ids else []

    def ours(self) -> list[SlurmRecord]:
        return [r for r in self._squeue("--me") if r.name.startswith(NAME_PREFIX)]

    def accounting(self, raw_ids: Iterable[str]) -> dict[str, SlurmRecord]:
        ids = sorted(set(raw_ids))
        if not ids or not self.sacct:
            return {}
        line = f"{self.sacct} -n -P -X -j {','.join(ids)} -o JobIDRaw,JobName,State"
        out = self.shell.run(line).stdout.decode()  # sacct -c also warns on stderr about array fields
        found = {}
        for row in out.splitlines():
            parts = row.split("|")
            if len(parts) == 3 and parts[0] in ids:
                found[parts[0]] = SlurmRecord("", parts[1], parts[2])
        return found

    def cancel(self, batch_id: str) -> None:
        result = self.shell.run(f"scancel {shlex.quote(batch_id)}", check=False)
        if result.returncode != 0 and b"Invalid job id" not in result.stderr \
                and b"already completing or completed" not in result.stderr:
            raise cli_error("scancel", result)
