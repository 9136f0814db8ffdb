"""Session fixture: a real single-node Slurm 22.05 cluster on 127.0.0.1 (test/scripts/slurm-cluster.sh).

The cluster is machine-wide (fixed ports, state in <tmp>/msunmerged-shared/slurm): the sessions on the
machine share it, the first one starts it and the last one stops it by PID (servers.shared_server).
"""
from __future__ import annotations

import os
import subprocess
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator


from MSUnmerged.config import SlurmConfig
from servers import machine_wide_fixture, run_script, server_dir, shared_dir, shared_server


@dataclass
class SlurmCluster:
    conf: Path
    node: str
    partition: str
    rest_url: str
    directory: Path  # this session's own files (tokens)
    env: dict[str, str] = field(default_factory=dict)

    @property
    def command_prefix(self) -> str:
        """Runs the service's Slurm commands here, against this cluster's configuration."""
        return f"env SLURM_CONF={self.conf} sh -c"

    def run(self, *argv: str) -> str:
        return subprocess.run(list(argv), check=True, capture_output=True, text=True, env=self.env,
                              timeout=60).stdout

    def token_file(self, user: str = "root", lifespan_s: int = 7200) -> Path:
        """A fresh JWT for `user`, as `scontrol token` prints it (SLURM_JWT=...)."""
        path = self.directory / f"token-{user}"
        path.write_text(self.run("scontrol", "token", f"username={user}", f"lifespan={lifespan_s}"))
        path.chmod(0o600)
        return path

    def settings(self, transport: str, work_dir: Path, **overrides: object) -> SlurmConfig:
        cfg = SlurmConfig(transport=transport, command_prefix=self.command_prefix, work_dir=str(work_dir),
                          partition=self.partition, sacct="sacct -c", timeout_s=60.0)
        if transport == "rest":
            cfg.rest_url, cfg.user, cfg.token_file = self.rest_url, "root", str(self.token_file())
        for key, value in overrides.items():
            setattr(cfg, key, value)
        return cfg

    def node_state(self) -> str:
        return self.run("sinfo", "-h", "-N", "-n", self.node, "-o", "%T").strip()

    def resume_node(self, timeout_s: float = 60.0) -> None:
        """Bring the node back after a test took it down, and wait until it takes jobs again."""
        if not self.node_state().startswith(("idle", "mixed", "allocated")):
            subprocess.run(["scontrol", "update", f"nodename={self.node}", "state=resume"], env=self.env,
                           capture_output=True, timeout=60)
        deadline = time.monotonic() + timeout_s
        while not self.node_state().startswith(("idle", "mixed", "allocated")):
            if time.monotonic() > deadline:
                raise TimeoutError(f"node {self.node} is {self.node_state()} after {timeout_s} s")
            time.sleep(0.5)


@contextmanager
def using_cluster() -> Iterator[SlurmCluster]:
    """The machine's cluster: installed (once) and started by its first user, stopped by PID by its last."""
    env = {"SLURM_TEST_DIR": str(shared_dir("slurm"))}

    def cluster(command: str) -> SlurmCluster:
        out = run_script("slurm-cluster.sh", command, env=env)
        info = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
        return SlurmCluster(conf=Path(info["SLURM_CONF"]), node=info["SLURM_NODE"],
                            partition=info["SLURM_PARTITION"], rest_url=info["SLURM_REST_URL"],
                            directory=server_dir("slurm"), env={**os.environ, "SLURM_CONF": info["SLURM_CONF"]})

    with shared_server("slurm", lambda: cluster("start"), lambda: cluster("info"),
                       lambda: run_script("slurm-cluster.sh", "stop", env=env)) as found:
        yield found


@machine_wide_fixture
def slurm_cluster() -> Iterator[SlurmCluster]:
    """munged, slurmctld, slurmd and slurmrestd, shared with the other sessions on the machine."""
    with using_cluster() as cluster:
        yield cluster
