"""The Prometheus text format 0.0.4 of a scrape's metric families, byte for byte as prometheus_client's
`generate_latest` writes it (test_rest_exposition compares the two), at a fraction of its cost: a label pair
or a value seen before in the scrape is not escaped or formatted again (an RSE's name and each RSE state
come back in thousands of samples)."""
from __future__ import annotations

import math
from typing import Iterable, Iterator

from prometheus_client.core import Metric
from prometheus_client.exposition import generate_latest
from prometheus_client.registry import Collector, CollectorRegistry
from prometheus_client.utils import floatToGoString

# Sample names are the family's (a counter's with _total): other types and suffixes go through generate_latest.
SUFFIX = {"gauge": "", "counter": "_total"}


class Families(Collector):
    """Metric families already built, as a collector."""

    def __init__(self, *families: Metric) -> None:
        self.families = families

    def collect(self) -> Iterator[Metric]:
        yield from self.families


def escape_label(value: str) -> str:
    """A label value as the text format quotes it (backslash, newline, double quote escaped)."""
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def text(families: Iterable[Metric]) -> str:
    """Every family's HELP, TYPE and samples, in order."""
    out: list[str] = []
    pairs: dict[tuple[str, str], str] = {}
    values: dict[tuple[float, float], str] = {}  # keyed with the sign too: 0.0 == -0.0
    for family in families:
        suffix = SUFFIX.get(family.type)
        name = family.name + (suffix or "")
        if suffix is None or any(s.name != name or s.timestamp is not None for s in family.samples):
            out.append(generate_latest(Families(family)).decode())  # as prometheus_client writes it
            continue
        doc = family.documentation.replace("\\", r"\\").replace("\n", r"\n")
        out.append(f"# HELP {name} {doc}\n# TYPE {name} {family.type}\n")
        for sample in family.samples:
            labels = []
            for pair in sorted(sample.labels.items()):
                label = pairs.get(pair)
                if label is None:
                    label = pairs[pair] = f'{pair[0]}="{escape_label(pair[1])}"'
                labels.append(label)
            key = (sample.value, math.copysign(1.0, sample.value))
            value = values.get(key)
            if value is None:
                value = values[key] = floatToGoString(sample.value)
            out.append(f"{name}{{{','.join(labels)}}} {value}\n" if labels else f"{name} {value}\n")
    return "".join(out)
