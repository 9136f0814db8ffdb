"""The end-to-end scenarios' RSEs: every file known in advance with its expected fate."""
from __future__ import annotations

from dataclasses import dataclass, field

# Files' expected fates.
DELETE, PROTECT, EXCLUDE, ABSENT, DENY, STALE = "delete", "protect", "exclude", "absent", "deny", "stale"


@dataclass
class Layout:
    """One RSE's files: LFN -> expected fate, the protected bases, and which LFNs ConMon lists."""

    rse: str
    site: str
    fates: dict[str, str] = field(default_factory=dict)
    protected: list[str] = field(default_factory=list)
    dump: list[str] = field(default_factory=list)
    end_time: float = 0.0


def make_layout(rse: str, site: str, tag: str, datasets: int = 6, files: int = 20, absent: int = 3) -> Layout:
    """Datasets of `files` files under run-number directories; dataset 0 protected at its base, dataset 1
    one run-number level deep (the rest of it deletable), one log area (excluded), `absent` dump lines not
    on storage. Deterministic: the same arguments give the same LFNs."""
    lay = Layout(rse, site)
    for d in range(datasets):
        base = f"/store/unmerged/Run2024{tag}/Prim{d}/AOD/PromptReco-v{d + 1}"
        deep = f"{base}/000/380/001"
        if d == 0:
            lay.protected.append(base)
        if d == 1:
            lay.protected.append(deep)
        for k in range(files):
            lfn = f"{base}/000/380/{k % 3:03d}/f{k:04d}.root"
            fate = PROTECT if d == 0 or (d == 1 and lfn.startswith(deep + "/")) else DELETE
            lay.fates[lfn] = fate
    for k in range(4):
        lay.fates[f"/store/unmerged/logs/prod/2024/11/WMAgent/{tag}/log{k}.tar.gz"] = EXCLUDE
    for k in range(absent):
        lay.fates[f"/store/unmerged/Run2024{tag}/Prim9/AOD/PromptReco-v9/000/380/000/gone{k}.root"] = ABSENT
    lay.dump = sorted(lay.fates)
    return lay
