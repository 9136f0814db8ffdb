"""A real HTCondor pool (Debian trixie minicondor in a chroot) on 127.0.0.1:9618, for the whole session.

test/scripts/condor-pool.sh builds and starts it; this fixture waits until the pool can run a job (a schedd
ad AND a slot ad in the collector) and stops it by PID at the end. The slot advertises
GLIDEIN_CMSSite = T2_XX_Condor and gives its jobs SITECONFIG_PATH=/srv/siteconf (paths inside the chroot),
as a CMS glidein would. The pool is machine-wide (fixed port): the sessions on the machine share it, the
first one starts it and the last one stops it (servers.shared_server); its chroot is built once under
test/.servers/condor/.
"""
from __future__ import annotations

import os
import subprocess
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator


from servers import built_dir, machine_wide_fixture, run_script, shared_server

POOL = "127.0.0.1:9618"
SITE = "T2_XX_Condor"
JOB_UID = 2000  # the 'submitter' account that jobs run as


@dataclass
class CondorPool:
    root: Path  # the chroot
    pool: str = POOL
    site: str = SITE

    def token_dir(self, user: str) -> Path:
        """A token directory holding an IDTOKEN for user@localpool (created once)."""
        return Path(run_script("condor-pool.sh", "token", user).strip().splitlines()[-1])

    def run(self, *argv: str, timeout: float = 60) -> str:
        """Run a command inside the chroot (condor_q, condor_status, ...)."""
        # The backend sets CONDOR_CONFIG=/dev/null for this process; the pool's tools need their own config.
        env = {k: v for k, v in os.environ.items() if k != "CONDOR_CONFIG"}
        return subprocess.run(["chroot", str(self.root), *argv], capture_output=True, text=True, check=True,
                              timeout=timeout, env=env).stdout

    def inside(self, path: str) -> Path:
        """The host path of a path inside the pool's chroot."""
        return self.root / path.lstrip("/")


def wait_ready(pool: CondorPool, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        try:
            schedds = pool.run("condor_status", "-schedd", "-af", "Name", timeout=20).split()
            slots = [n for n in pool.run("condor_status", "-af", "Name", timeout=20).split() if "slot" in n]
            if schedds and slots:
                return
            last = f"schedds={schedds} slots={slots}"
        except subprocess.SubprocessError as exc:
            last = str(exc)
        time.sleep(1)
    raise TimeoutError(f"HTCondor pool not ready after {timeout} s: {last}")


def _start() -> CondorPool:
    """Start the pool unless it runs (the script does nothing then) and wait until it can run a job."""
    run_script("condor-pool.sh", "start", timeout=1800)
    pool = CondorPool(root=built_dir("condor") / "root")
    wait_ready(pool)
    return pool


@contextmanager
def using_pool() -> Iterator[CondorPool]:
    """The machine's pool: started by its first user, stopped by PID by its last."""
    with shared_server("condor", _start, _start, lambda: run_script("condor-pool.sh", "stop", timeout=120)) as pool:
        yield pool


@machine_wide_fixture
def condor_pool() -> Iterator[CondorPool]:
    with using_pool() as pool:
        yield pool
