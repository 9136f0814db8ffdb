"""The Prometheus text format 0.0.4 of a scrape's metric families, byte for byte as prometheus_client's
`generate_latest` writes it (test_rest_exposition compares the two), at a fraction of its cost: a label pair
or a value seen before in the scrape is not escaped or formatted again (an RSE's name and each RSE state
come back in thousands of samples), and a collector may write its samples straight into the text (Writer)
instead of building a prometheus_client object per sample."""
from __future__ import annotations

from typing import Iterable, Iterator

from prometheus_client.core import Metric
from prometheus_client.exposition import generate_latest
from prometheus_client.registry import Collector
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


class Writer:
    """One scrape's text, family by family: `family` writes a gauge's or counter's HELP and TYPE lines and
    returns the name its samples carry, `sample` writes one sample with its label pairs (from `pair`, in label
    name order, as generate_latest sorts them)."""

    def __init__(self) -> None:
        self.out: list[str] = []
        self._pairs: dict[tuple[str, str], str] = {}
        self._values: dict[float | str, str] = {}

    def family(self, name: str, documentation: str, kind: str = "gauge") -> str:
        name += SUFFIX[kind]
        doc = documentation.replace("\\", r"\\").replace("\n", r"\n")
        self.out.append(f"# HELP {name} {doc}\n# TYPE {name} {kind}\n")
        return name

    def pair(self, label: str, value: str) -> str:
        """`label="value"`, escaped."""
        pair = self._pairs.get((label, value))
        if pair is None:
            pair = self._pairs[(label, value)] = f'{label}="{escape_label(value)}"'
        return pair

    def sample(self, name: str, value: float, *pairs: str) -> None:
        key = value or str(value)  # 0.0 == -0.0 but they are written apart
        text = self._values.get(key)
        if text is None:
            text = self._values[key] = floatToGoString(value)
        self.out.append(f"{name}{{{','.join(pairs)}}} {text}\n" if pairs else f"{name} {text}\n")

    def families(self, families: Iterable[Metric]) -> None:
        """prometheus_client families, as generate_latest writes them."""
        for family in families:
            suffix = SUFFIX.get(family.type)
            name = family.name + (suffix or "")
            if suffix is None or any(s.name != name or s.timestamp is not None for s in family.samples):
                self.out.append(generate_latest(Families(family)).decode())  # as prometheus_client writes it
                continue
            self.family(family.name, family.documentation, family.type)
            for s in family.samples:
                self.sample(name, s.value, *(self.pair(*item) for item in sorted(s.labels.items())))

    def text(self) -> str:
        return "".join(self.out)


def text(families: Iterable[Metric]) -> str:
    """Every family's HELP, TYPE and samples, in order."""
    writer = Writer()
    writer.families(families)
    return writer.text()
