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


@dataclass(frozen=True)
class RseSeen:
    """One RSE as the checks found it at one moment: each file's expected fate then, whether storage held it, its
    ledger and REST records (a scenario observes now and asserts later)."""

    rse: str
    fates: dict[str, str]
    dump: frozenset[str]
    exists: dict[str, bool]
    ledger: dict[str, dict]
    rest: dict[str, dict]


def observe_rse(world: World, lay: Layout) -> RseSeen:
    """Storage, ledger and REST for every file of the layout, now."""
    return RseSeen(lay.rse, dict(lay.fates), frozenset(lay.dump),
                   {lfn: world.storage(lay.rse, lfn).exists() for lfn in lay.fates},
                   world.files(lay.rse), rest_files(world, lay.rse))


def check_rse(seen: RseSeen, tally: Tally) -> dict[str, str]:
    """Storage, ledger and REST against the expected fates; returns LFN -> ledger state (or '')."""
    ledger, rest = seen.ledger, seen.rest
    states = {}
    for lfn, fate in seen.fates.items():
        exists = seen.exists[lfn]
        rec = ledger.get(lfn)
        state = rec["state"] if rec else ""
        states[lfn] = state
        tally.checked += 1
        tally.by_fate[fate] = tally.by_fate.get(fate, 0) + 1
        assert (rest.get(lfn) or {}).get("state", "") == state, (lfn, rest.get(lfn), state)
        if fate in (PROTECT, EXCLUDE, STALE):
            if not exists:
                tally.lost.append(f"{seen.rse}:{lfn}")
            assert state in ("", "skipped_protected"), (seen.rse, lfn, fate, rec)
        elif fate == ABSENT:
            assert not exists, (lfn, rec)
            # Found missing, or not tried (e.g. the storage refused the others) with a reason.
            if lfn in seen.dump and ledger:
                assert state == "missing" or (state in ("failed", "unknown") and rec.get("error_class")), (lfn, rec)
        elif fate == DELETE:
            assert not exists, (seen.rse, lfn, rec)
            assert state in ("deleted", "missing"), (seen.rse, lfn, rec)
        elif fate == DENY:
            if exists:
                if not (rec and rec.get("state") in ("failed", "unknown") and (rec.get("error_class")
                                                                               or rec.get("error"))):
                    tally.unexplained.append(f"{seen.rse}:{lfn}")
            else:
                assert state in ("deleted", "missing"), (lfn, rec)
    return states


def checked(*seen: RseSeen) -> Tally:
    """check_rse over these observations, into one tally."""
    tally = Tally()
    for one in seen:
        check_rse(one, tally)
    return tally


def fate_counts(*seen: RseSeen) -> dict[str, int]:
    """How many files of each expected fate these observations hold (a scenario's figures)."""
    return dict(Counter(fate for one in seen for fate in one.fates.values()))


def batches_per_job(world: World, rse_prefix: str = "T2_XE_") -> dict[str, set[str]]:
    """Each job id of these RSEs -> the schedd records (cluster.proc) that carried it: more than one means the job
    was submitted twice."""
    batches: dict[str, set[str]] = {}
    for ad in world.our_condor_jobs(rse_prefix):
        batches.setdefault(ad["job"], set()).add(ad["batch"])
    return batches


def deleted_twice(world: World, rse_prefix: str = "T2_XE_") -> dict[str, int]:
    """The (RSE, generation, LFN) that more than one worker report acted on (outcome deleted or missing), with how
    many: two jobs went for the same file of the same dump."""
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
    return {k: n for k, n in counts.items() if n > 1}


def files_in_two_live_jobs(world: World) -> list[str]:
    """LFNs whose ledger record points at a job while another job document also lists it."""
    db = world.db()
    seen = Counter((d["rse"], d["gen"], d["lfn"]) for d in Ledger(db).reads.file_records())
    return [str(k) for k, n in seen.items() if n > 1]
