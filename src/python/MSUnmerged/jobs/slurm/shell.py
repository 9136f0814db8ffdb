"""Shell command lines through slurm.command_prefix (e.g. `ssh login.hpc`), and their failures as BackendError."""
from __future__ import annotations

import shlex
import subprocess
from typing import Optional

from MSUnmerged.jobs.backend import BackendError

class Shell:
    """Runs shell command lines through the configured prefix (e.g. `ssh login.hpc`), or locally with `sh -c`."""

    def __init__(self, prefix: str, timeout_s: float) -> None:
        self.prefix = shlex.split(prefix) or ["sh", "-c"]
        self.timeout_s = timeout_s

    def run(self, line: str, stdin: bytes = b"", check: bool = True) -> subprocess.CompletedProcess:
        try:
            result = subprocess.run([*self.prefix, line], input=stdin, capture_output=True, timeout=self.timeout_s)
        except subprocess.TimeoutExpired:
            raise BackendError("timeout", f"no answer after {self.timeout_s} s: {line[:200]}") from None
        except OSError as exc:
            raise BackendError("unreachable", f"cannot run {self.prefix[0]}: {exc}") from None
        if check and result.returncode != 0:
            raise cli_error(line, result)
        return result

    def write(self, path: str, data: bytes) -> None:
        d = shlex.quote(path.rsplit("/", 1)[0])
        self.run(f"mkdir -p {d} && cat > {shlex.quote(path)}.tmp && mv -f {shlex.quote(path)}.tmp {shlex.quote(path)}",
                 stdin=data)

    def read(self, path: str) -> Optional[bytes]:
        p = shlex.quote(path)
        result = self.run(f"if [ -f {p} ]; then cat {p}; else exit 3; fi", check=False)
        if result.returncode == 3:
            return None
        if result.returncode != 0:
            raise cli_error(f"cat {path}", result)
        return result.stdout


def cli_error(line: str, result: subprocess.CompletedProcess) -> BackendError:
    # Some commands (scontrol ping) say what is wrong on stdout only.
    err = (result.stderr or result.stdout or b"").decode(errors="replace").strip() or "no message"
    low = err.lower()
    if "permission denied" in low and ("publickey" in low or "password" in low):
        kind = "auth_refused"
    elif any(s in low for s in ("unable to contact slurm controller", "connection refused", "could not resolve",
                                "no route to host", "connection timed out", "zero bytes were transmitted")):
        kind = "unreachable"
    elif line.startswith("sbatch"):
        kind = "submit_failed"
    else:
        kind = "bad_answer"
    return BackendError(kind, f"{line.split(' ', 1)[0]} exited {result.returncode}: {err[-500:]}")
