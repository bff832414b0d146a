"""The fast renderer writes exactly what prometheus_client writes, in both formats."""

import pytest
from exporter_factories import make_full_attribution, make_gpu, make_health, make_lost_gpu, make_snapshot, make_state
from prometheus_client import generate_latest
from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics

from runtimekit.exporter import build_collector_set, build_registry
from runtimekit.exporter.family import Family
from runtimekit.exporter.render import OPENMETRICS, TEXT, Renderer, render

OPTIONS = {"process": {"cmdline": True}}


def full_state():
    state = make_state(make_snapshot((make_gpu(0), make_gpu(1, link_count=18), make_lost_gpu(2))),
                       xids={(2, "GPU-x", 79): 1})
    state.publish_attribution(make_full_attribution())
    state.publish_health(make_health())
    return state


def full_registry(state=None):
    return build_registry(state or full_state(), timer=lambda: 0.0, options=OPTIONS)


def test_text_equals_prometheus_client():
    registry = full_registry()
    assert render(registry.collect(), TEXT) == generate_latest(registry)


def test_openmetrics_equals_prometheus_client():
    registry = full_registry()
    assert render(registry.collect(), OPENMETRICS) == generate_openmetrics(registry)


@pytest.mark.parametrize("fmt, reference", [(TEXT, generate_latest), (OPENMETRICS, generate_openmetrics)])
def test_the_light_families_the_collectors_build_render_as_prometheus_client_writes_them(fmt, reference):
    """The served path renders our light Family rows directly; prometheus_client renders the same
    families converted to its own (``Family.to_metric``): the bytes are equal, twice over (the
    second render reuses the cached label text)."""
    state = full_state()
    registry = full_registry(state)
    families = build_collector_set(timer=lambda: 0.0, options=OPTIONS).collect(state.view())
    assert any(isinstance(family, Family) for family in families)
    renderer = Renderer(fmt)
    assert renderer.render(families) == reference(registry)
    assert renderer.render(families) == reference(registry)


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


@pytest.mark.parametrize("fmt, reference", [(TEXT, generate_latest), (OPENMETRICS, generate_openmetrics)])
def test_cached_label_text_stays_equal_to_prometheus_client_across_renders(fmt, reference):
    """A Renderer reuses the label text of the series of its last render: repeated renders, with
    series that appear, change value and vanish, still write exactly prometheus_client's bytes."""
    from exporter_factories import make_attribution, make_process

    from runtimekit.state import SamplerStats

    state = make_state(make_snapshot((make_gpu(0), make_gpu(1, link_count=18), make_lost_gpu(2))),
                       xids={(2, "GPU-x", 79): 1})
    state.publish_attribution(make_full_attribution())
    state.publish_health(make_health())
    registry = build_registry(state, timer=lambda: 0.0, options={"process": {"cmdline": True}})
    renderer = Renderer(fmt)
    for step in range(4):
        assert renderer.render(registry.collect()) == reference(registry), step
        if step == 0:  # new processes, one gone, other values
            rows = (make_process(4242, 0, used_memory_bytes=5), make_process(31337, 1), make_process(99, 0, host=None))
            state.publish_attribution(make_attribution(rows))
        elif step == 1:  # a GPU gone, another sample
            state.publish_snapshot(make_snapshot((make_gpu(0),)), SamplerStats(cycles_total=9))
        elif step == 2:  # back to the first label sets
            state.publish_attribution(make_full_attribution())


@pytest.mark.parametrize("fmt, reference", [(TEXT, generate_latest), (OPENMETRICS, generate_openmetrics)])
def test_reused_lines_follow_changed_values_new_series_and_churn(fmt, reference):
    """A Family row equal to one of the last render's reuses its whole line: across renders where
    values change (to zero and back, a negative zero among them), series appear and vanish, and
    label sets churn past the pruning of the label-text cache, every render still equals
    prometheus_client's for the same families."""
    from prometheus_client import CollectorRegistry

    renderer = Renderer(fmt)
    for step in range(12):
        family = Family("gauge", "runtimekit_test_bytes", "Churning series.", ["pid", "gpu"], unit="bytes")
        for pid in range(step * 20, step * 20 + 100):  # 20 new pids a step, 20 gone
            value = [0.0, -0.0, float(pid), float(pid * step)][(pid + step) % 4]
            family.add_metric([str(pid), str(pid % 8)], value)

        class One:
            def collect(self, family=family):
                yield family.to_metric()

        registry = CollectorRegistry()
        registry.register(One())
        assert renderer.render([family]) == reference(registry), step
    assert len(renderer._prefixes["runtimekit_test_bytes"]) <= 2 * 100 + 64  # label sets gone were pruned
