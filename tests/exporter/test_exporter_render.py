"""The fast renderer writes exactly what prometheus_client writes, in both formats."""

import pytest
from exporter_factories import make_full_attribution, make_gpu, make_lost_gpu, make_snapshot, make_state
from prometheus_client import generate_latest
from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics

from runtimekit.exporter import build_registry
from runtimekit.exporter.render import OPENMETRICS, TEXT, render

SAMPLED_AT = 1_750_000_000.0


def full_registry():
    state = make_state(make_snapshot((make_gpu(0), make_gpu(1, link_count=18), make_lost_gpu(2))),
                       xids={(2, "GPU-x", 79): 1})
    state.publish_attribution(make_full_attribution())
    return build_registry(state, clock=lambda: SAMPLED_AT + 2, timer=lambda: 0.0,
                          options={"process": {"cmdline": True}})


def test_text_equals_prometheus_client():
    registry = full_registry()
    assert render(registry.collect(), TEXT) == generate_latest(registry)


def test_openmetrics_equals_prometheus_client():
    registry = full_registry()
    assert render(registry.collect(), OPENMETRICS) == generate_openmetrics(registry)


def test_awkward_label_values_and_help_are_escaped_the_same_way():
    family = GaugeMetricFamily("runtimekit_test_ratio", 'Help with "quotes", a \\ and\na newline.',
                               labels=["b", "a"], unit="ratio")
    family.add_metric(['quote " backslash \\ newline \n', "é"], 1e21)
    family.add_metric(["x", "y"], float("inf"))
    family.add_metric(["x", "z"], -0.0)

    class One:
        def collect(self):
            yield family

    from prometheus_client import CollectorRegistry
    registry = CollectorRegistry()
    registry.register(One())
    assert render(registry.collect(), TEXT) == generate_latest(registry)
    assert render(registry.collect(), OPENMETRICS) == generate_openmetrics(registry)


def test_unsupported_families_are_refused_not_misrendered():
    histogram = HistogramMetricFamily("runtimekit_test_seconds", "h", buckets=[("1.0", 1), ("+Inf", 2)], sum_value=3)
    with pytest.raises(ValueError, match="histogram"):
        render([histogram], TEXT)
