"""File-by-file checks of an end-to-end run: storage, ledger and REST against each file's expected fate."""
from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass, field

from MSUnmerged.ledger import Ledger
from e2e.e2e_layout_kit import ABSENT, DELETE, DENY, EXCLUDE, PROTECT, STALE, Layout
from e2e.e2e_service_kit import rest_files
from e2e.e2e_world_kit import World


@dataclass
class Tally:
    checked: int = 0
    by_fate: dict[str, int] = field(default_factory=dict)
    lost: list[str] = field(default_factory=list)  # a file that should exist and does not
    unexplained: list[str] = field(default_factory=list)  # deletable, still there, no reason recorded


def check_rse(world: World, lay: Layout, tally: Tally, use_rest: bool = True,
              deny_ok: bool = False) -> dict[str, str]:
    """Storage, ledger and REST against the expected fates; returns LFN -> ledger state (or '')."""
    ledger = world.files(lay.rse)
    rest = rest_files(world, lay.rse) if use_rest else ledger
    states = {}
    for lfn, fate in lay.fates.items():
        exists = world.storage(lay.rse, lfn).exists()
        rec = ledger.get(lfn)
        state = rec["state"] if rec else ""
        states[lfn] = state
        tally.checked += 1
        tally.by_fate[fate] = tally.by_fate.get(fate, 0) + 1
        if use_rest:
            assert (rest.get(lfn) or {}).get("state", "") == state, (lfn, rest.get(lfn), state)
        if fate in (PROTECT, EXCLUDE, STALE):
            if not exists:
                tally.lost.append(f"{lay.rse}:{lfn}")
            assert state in ("", "skipped_protected"), (lay.rse, lfn, fate, rec)
        elif fate == ABSENT:
            assert not exists, (lfn, rec)
            if lfn in lay.dump and ledger:  # found missing, or not tried (e.g. the storage refused the others) with a reason
                assert state == "missing" or (state in ("failed", "unknown") and rec.get("error_class")), (lfn, rec)
        elif fate == DELETE:
            assert not exists, (lay.rse, lfn, rec)
            assert state in ("deleted", "missing"), (lay.rse, lfn, rec)
        elif fate == DENY:
            if exists:
                if not (rec and rec.get("state") in ("failed", "unknown") and (rec.get("error_class")
                                                                               or rec.get("error"))):
                    tally.unexplained.append(f"{lay.rse}:{lfn}")
            else:
                assert state in ("deleted", "missing"), (lfn, rec)
    return states


def deletions_per_lfn(world: World, rse_prefix: str = "T2_XE_") -> dict[str, int]:
    """How many worker reports acted on each (RSE, generation, LFN) (outcome deleted or missing):
    more than one means two jobs went for the same file of the same dump."""
    counts: dict[str, int] = {}
    reports = world.dir / "state" / "reports"
    if not reports.exists():
        return counts
    for path in reports.rglob("*.jsonl"):
        rse = path.parent.name
        if not rse.startswith(rse_prefix):
            continue
        m = re.search(r"_(\d+\.\d+)_[^_]+\.jsonl$", path.name)
        gen = m.group(1) if m else path.name
        for line in path.read_text(errors="replace").splitlines():
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if isinstance(rec, dict) and rec.get("outcome") in ("deleted", "missing") and "lfn" in rec:
                key = f"{rse}|{gen}|{rec['lfn']}"
                counts[key] = counts.get(key, 0) + 1
    return counts


def files_in_two_live_jobs(world: World) -> list[str]:
    """LFNs whose ledger record points at a job while another job document also lists it."""
    db = world.db()
    seen = Counter((d["rse"], d["gen"], d["lfn"]) for d in Ledger(db).reads.file_records())
    return [str(k) for k, n in seen.items() if n > 1]
