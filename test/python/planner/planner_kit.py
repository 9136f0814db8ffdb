"""Helpers shared by the planner tests: run a plan from lists and read its directory back."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Iterable, Optional

from MSUnmerged import planner
from MSUnmerged.config import Config


def chunked(lines: Iterable[bytes], per_chunk: int = 7) -> list[bytes]:
    """Lines into chunks of whole lines, small so that runs cross chunk borders."""
    lines = list(lines)
    return [b"".join(x + b"\n" for x in lines[i:i + per_chunk]) for i in range(0, len(lines), per_chunk)]


def permissive() -> Config:
    """Default configuration except the deletable-fraction guard, which small test trees trip."""
    config = Config()
    config.guards.max_delete_fraction = 1.0
    return config


def run_plan(tmp: Path, lines: Iterable[bytes], protected: list[str], config: Optional[Config] = None,
             stats: Optional[dict] = None, per_chunk: int = 7, **kwargs) -> planner.Plan:
    return planner.plan("T2_XX_Test", chunked(lines, per_chunk), protected, config or permissive(), tmp,
                        stats=stats, require_scan=stats is not None, **kwargs)


def planned_lfns(out: Path) -> list[bytes]:
    """Every LFN in the plan's job files, in job order."""
    found = []
    for job in sorted((out / "jobs").iterdir()):
        found += job.read_bytes().split(b"\n")[:-1]
    return found


def removable_dirs(out: Path) -> list[bytes]:
    return (out / "dirs.txt").read_bytes().split(b"\n")[:-1]


def summary(out: Path) -> dict:
    return json.loads((out / "summary.json").read_text())
