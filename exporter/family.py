"""A light metric family: what the collectors build on every render, and the renderer writes directly.

prometheus_client's ``GaugeMetricFamily.add_metric`` makes a label dict and a ``Sample`` per series;
with 512 GPU processes that is over 5,000 of each per render. A ``Family`` keeps rows of (label
values, value) instead: the renderer turns a row into text with the label text it cached for those
values, and ``to_metric()`` gives prometheus_client's family, equal sample for sample, for its own
tools (``generate_latest``) and for tests. Names follow prometheus_client's rules exactly: a
counter's ``_total`` is stripped from the family name and written on its samples; a unit is
appended to the name when missing.
"""

from __future__ import annotations

from collections.abc import Sequence

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.samples import Sample

GAUGE, COUNTER = "gauge", "counter"


class Family:
    """A gauge or counter family with rows of (label values, value); see the module docstring."""

    __slots__ = ("name", "type", "documentation", "unit", "labelnames", "rows")

    def __init__(self, kind: str, name: str, documentation: str, labelnames: Sequence[str], unit: str = "") -> None:
        if kind not in (GAUGE, COUNTER):
            raise ValueError(f"family {name}: kind must be gauge or counter, got {kind!r}")
        if kind == COUNTER and name.endswith("_total"):
            name = name[:-6]
        if unit and not name.endswith("_" + unit):
            name += "_" + unit
        self.name = name
        self.type = kind
        self.documentation = documentation
        self.unit = unit
        self.labelnames = tuple(labelnames)
        self.rows: list[tuple[tuple[str, ...], float]] = []

    @property
    def sample_name(self) -> str:
        return self.name + "_total" if self.type == COUNTER else self.name

    def add_metric(self, labels: Sequence[str], value: float) -> None:
        """One series: its label values in ``labelnames`` order, and its value. A negative zero is
        kept as zero (``+ 0.0``): equal rows must print alike, as the renderer reuses their lines."""
        self.rows.append((labels if type(labels) is tuple else tuple(labels), float(value) + 0.0))

    @property
    def samples(self) -> list[Sample]:
        """The rows as prometheus_client samples (for tests and ``to_metric``; the renderer reads rows)."""
        name = self.sample_name
        return [Sample(name, dict(zip(self.labelnames, values, strict=True)), value) for values, value in self.rows]

    def to_metric(self) -> Metric:
        """prometheus_client's family with the same samples."""
        cls = CounterMetricFamily if self.type == COUNTER else GaugeMetricFamily
        metric = cls(self.name, self.documentation, labels=list(self.labelnames), unit=self.unit)
        for values, value in self.rows:
            metric.add_metric(list(values), value)
        return metric
