"""The metrics text: exposition.text writes what prometheus_client's generate_latest writes, byte for byte,
for the families a scrape yields and for awkward label values, values and help texts."""
from __future__ import annotations

import math

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, InfoMetricFamily, \
    Metric
from prometheus_client.exposition import generate_latest

from MSUnmerged.rest.exposition import Families, escape_label, text

AWKWARD = ("T2_CH_CERN", 'a "quoted" name', "back\\slash", "new\nline", "Zürich ✓", "", "\\n literally")
VALUES = (0, 1, 0.0, 1.0, -0.0, 0.1, 2 / 3, 1234567.0, 1e-09, 12345678901234.0, 1.7e308, math.inf, -math.inf,
          math.nan, -5, True)


def families() -> list[Metric]:
    state = GaugeMetricFamily("msunmerged_rse_state", "1 for the RSE's current state, 0 for the others.",
                              labels=["rse", "state"])
    for i, rse in enumerate(AWKWARD):
        for known in ("clean", "guarded", rse):
            state.add_metric([rse, known], float(known == "clean" or i % 2))
    values = GaugeMetricFamily("msunmerged_values", "Help with a back\\slash\nand a new line.", labels=["z", "a"])
    for i, value in enumerate(VALUES):
        values.add_metric([AWKWARD[i % len(AWKWARD)], str(value)], value)
    failures = CounterMetricFamily("msunmerged_cycle_failures", "Failures.", labels=["source", "reason"])
    failures.add_metric(["rucio", "rucio_unavailable"], 3)
    created = CounterMetricFamily("msunmerged_restarts", "With a created time.", labels=["db"], created=1700000000.5)
    created.add_metric(["embedded"], 2, created=1700000000.5)
    histogram = HistogramMetricFamily("msunmerged_seconds", "A histogram.", buckets=[("1.0", 2), ("+Inf", 3)],
                                      sum_value=4.5)
    info = InfoMetricFamily("msunmerged_build", "An info.", value={"version": '0."1"'})
    timestamped = GaugeMetricFamily("msunmerged_stamped", "A sample with a time stamp.", labels=["rse"])
    timestamped.add_metric(["X"], 1.0, timestamp=1700000000.25)
    return [state, values, GaugeMetricFamily("msunmerged_up", "Unlabelled.", value=1.0),
            GaugeMetricFamily("msunmerged_empty", "No sample yet.", labels=["rse"]), failures, created, histogram,
            info, timestamped, CounterMetricFamily("msunmerged_plain", "Unlabelled counter.", value=7)]


def test_text_is_generate_latest_byte_for_byte() -> None:
    fams = families()
    assert text(fams) == generate_latest(Families(*fams)).decode()


def test_each_family_alone_and_label_cache_across_families() -> None:
    # The label cache lives for one call: a pair escaped for one family serves the next, never wrongly.
    for fam in families():
        assert text([fam]) == generate_latest(Families(fam)).decode()
    fams = families()
    assert text(fams[:2] + fams[:2]) == generate_latest(Families(*fams[:2])).decode() * 2


def test_escape_label() -> None:
    assert escape_label('a\\b"c\nd') == 'a\\\\b\\"c\\nd'
