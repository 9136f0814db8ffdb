"""What `[jobs.sites.<RSE>]` changes for one RSE: its throttle, load limits, path filters and directory sweep.

One rule for every override: the RSE's own value when it sets one, else the service-wide one. Path filters
add up: the RSE's excludes join `planner.exclude`; its includes narrow `planner.include` further (a file must
be under both when both are set).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from MSUnmerged.config import Config, JobsConfig
from MSUnmerged.lfn import normalise_base


@dataclass(frozen=True)
class RSELimits:
    """The limits and filters in force for one RSE."""

    max_files_per_cycle: int  # 0: the whole plan in one cycle
    max_in_flight: int  # 0: no limit
    max_ops_per_s: float  # 0: unpaced
    look_before_delete: bool
    remove_empty_dirs: bool
    include: Optional[tuple[str, ...]]  # None: everything under /store/unmerged/; () nothing
    exclude: tuple[str, ...]

    def filters(self) -> dict[str, Any]:
        """The path filters as the plan summary and the job manifest carry them."""
        return {"include": None if self.include is None else list(self.include), "exclude": list(self.exclude)}


def _own(value: Any, service_wide: Any) -> Any:
    return service_wide if value is None else value


def intersect(first: list[str], second: list[str]) -> list[str]:
    """The prefixes covering exactly the paths both prefix lists cover (component-wise, as lfn.PrefixSet)."""
    a = {normalise_base(p).decode() for p in first}
    b = {normalise_base(p).decode() for p in second}

    def under(path: str, prefixes: set[str]) -> bool:
        return any(path == p or path.startswith(p.rstrip("/") + "/") for p in prefixes)
    return sorted({p for p in a if under(p, b)} | {p for p in b if under(p, a)})


def in_flight_cap(jobs: JobsConfig, rse: str) -> int:
    """The RSE's `max_in_flight` (0: no limit): what the batch backends and the service both keep."""
    return int(_own(jobs.for_rse(rse).max_in_flight, jobs.max_in_flight))


def limits_for(config: Config, rse: str) -> RSELimits:
    """The RSE's limits: `jobs.sites.<rse>` where it sets them, else the service-wide settings."""
    site, j, p = config.jobs.for_rse(rse), config.jobs, config.planner
    if p.include and site.include:
        include: Optional[list[str]] = intersect(p.include, site.include)
    else:
        include = p.include or site.include or None
    return RSELimits(
        max_files_per_cycle=_own(site.max_files_per_cycle, p.max_files_per_cycle),
        max_in_flight=in_flight_cap(j, rse),
        max_ops_per_s=_own(site.max_ops_per_s, j.max_ops_per_s),
        look_before_delete=_own(site.look_before_delete, j.look_before_delete),
        remove_empty_dirs=site.remove_empty_dirs,
        include=None if include is None else tuple(include),
        exclude=tuple(dict.fromkeys([*p.exclude, *site.exclude])))
