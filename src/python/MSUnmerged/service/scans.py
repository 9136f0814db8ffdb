"""The cycle's one read of ConMon's `stats`, handed to its runs: the answer or its failure, and when it was read."""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any, Optional

from MSUnmerged.sources import Sources
from MSUnmerged.sources.errors import SourceError

log = logging.getLogger(__name__)

# How long a run may use the cycle's read instead of reading `stats` itself: service.stats_reuse_s. ConMon publishes
# a scan when it ends (an RSE's scan takes hours): a run that starts within it of the read sees at worst a scan
# ended meanwhile as not yet there, and takes it next cycle. Older, the run reads again: the dump it opens is always
# the latest, and a scan older than the dump trips the line-count guard instead of being worked.


@dataclass(frozen=True)
class StatsRead:
    """One read of ConMon's `stats` ({RSE: scan}) or the SourceError it ended in; `at`: time.monotonic() when it
    ended (the answer is ConMon's at that time; a failure after a long timeout is not already stale)."""

    at: float
    answer: dict[str, Any] = field(default_factory=dict)
    error: Optional[SourceError] = None

    @classmethod
    def read(cls, sources: Sources) -> "StatsRead":
        """Read `stats` now; a SourceError is kept, not raised. Any other error is no answer at all: the read is
        stale at once, so each run reads (and records its failure) itself, as without a cycle's read."""
        try:
            answer = sources.stats()
        except SourceError as exc:
            return cls(time.monotonic(), error=exc)
        except Exception:  # a bug must not cost the cycle its RSEs
            log.exception("ConMon stats: the cycle's read failed unexpectedly; each run reads for itself")
            return cls(float("-inf"))
        return cls(time.monotonic(), answer)

    def fresh(self, reuse_s: float) -> bool:
        """Young enough for a run to use instead of reading again (at most `reuse_s` old)."""
        return time.monotonic() - self.at <= reuse_s

    def scan(self, rse: str) -> Any:
        """The RSE's scan (None: ConMon has none); the read's failure raised as a SourceError of its own (the runs
        raise it in their threads at once), the same source and reason."""
        if self.error is not None:
            e = self.error
            raise SourceError(e.kind, e.message, e.source, e.status)
        return self.answer.get(rse)


def scan_of(sources: Sources, rse: str, handed: Optional[StatsRead], reuse_s: float) -> Any:
    """The RSE's ConMon scan for a run: from the cycle's read when at most `reuse_s` old, else read now (SourceError
    raised)."""
    if handed is not None and handed.fresh(reuse_s):
        return handed.scan(rse)
    return sources.stats().get(rse)
