"""What the benchmarks read of a process from /proc (standard library only: also imported by the child processes
that time an older checkout's code)."""
from __future__ import annotations

import os
from pathlib import Path


def cpu_s(pid: int | str) -> float:
    """CPU seconds (user + system) a process used so far; this process: os.times."""
    if int(pid) == os.getpid():
        t = os.times()
        return t.user + t.system
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
