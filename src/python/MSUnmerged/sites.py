"""The CMS site of an RSE: one rule for the jobs (their site and +DESIRED_Sites) and the batch backend they go to."""
from __future__ import annotations

import re
from typing import Any, Mapping, Optional, Protocol

from MSUnmerged.config import JobsConfig
from MSUnmerged.ledger.retry import LedgerError

NO_SITE = "no_site"  # the reason recorded on an RSE whose site is not known
# CMS site names are T<tier>_<country>_<name> (the name may hold '_': T2_UK_London_Brunel);
# RSE names are the site name, or it plus a storage suffix (T1_US_FNAL_Disk).
_SITE_RE = re.compile(r"^(T[0-3]_[A-Z]{2}_\w+?)(?:_(?:Disk|Tape|Test|Temp))?$", re.IGNORECASE)


class RSEAttributes(Protocol):
    """Where an RSE's attributes are read (Rucio; the offline sources' file)."""

    def rse_attributes(self, rse: str) -> Mapping[str, Any]:
        """The RSE's attributes; SourceError when they cannot be read."""


def site_from_rse(rse: str) -> Optional[str]:
    """T1_US_FNAL_Disk -> T1_US_FNAL, T2_UK_London_Brunel -> itself; None when not CMS-like."""
    m = _SITE_RE.match(rse)
    return m.group(1) if m else None


def resolve_site(jobs: JobsConfig, rse: str, attributes: Optional[RSEAttributes] = None) -> str:
    """The RSE's site: `jobs.sites.<rse>.site`; else, where `jobs.site_attribute` is set, that attribute of the
    RSE (an attribute source that cannot answer raises its SourceError: no job goes to a guessed site); else
    the site its name holds. None of these: LedgerError no_site, and nothing is submitted for the RSE."""
    site = jobs.for_rse(rse).site
    if not site and jobs.site_attribute and attributes is not None:
        site = str(attributes.rse_attributes(rse).get(jobs.site_attribute) or "")
    site = site or site_from_rse(rse) or ""
    if not site:
        where = f"or its '{jobs.site_attribute}' attribute in Rucio" if jobs.site_attribute else \
            "(or jobs.site_attribute and that attribute in Rucio)"
        raise LedgerError(NO_SITE, f"no site for RSE {rse}: set jobs.sites.{rse}.site {where}")
    return site


# WMCore's partitions of ms-unmerged (data/status?rse_type=..., MSManager.status): t1, t2t3 (outside the US),
# t2t3us; the chart's values files use the same names.
RSE_TYPES = ("t1", "t2t3", "t2t3us")


def tier_of(rse: str) -> str:
    """T0, T1, T2 or T3 from the RSE's name; "other" when it is not CMS-like."""
    site = site_from_rse(rse)
    return site[:2].upper() if site else "other"


def rse_type(rse: str) -> str:
    """The RSE's WMCore partition from its name (T1 -> t1; T2/T3 in the US -> t2t3us, elsewhere t2t3); "" else."""
    site = site_from_rse(rse)
    if not site:
        return ""
    tier = site[:2].upper()
    if tier == "T1":
        return "t1"
    if tier in ("T2", "T3"):
        return "t2t3us" if site[3:5].upper() == "US" else "t2t3"
    return ""
