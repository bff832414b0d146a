"""The collector table, configuration errors, and the shared timing/isolation wrapper."""

from __future__ import annotations

import logging

import pytest
from exporter_factories import make_snapshot, make_state, names, value
from prometheus_client import generate_latest

from runtimekit.exporter.collectors.self import SelfCollector
from runtimekit.exporter.registry import (
    COLLECTOR_NAMES,
    COLLECTORS,
    ViewCollector,
    build_collector_set,
    build_registry,
    enabled_collectors,
)
from runtimekit.exporter.timing import CollectorSet


def test_defaults_and_overrides():
    assert enabled_collectors() == tuple(n for n, s in COLLECTORS.items() if s.enabled_by_default)
    assert "nvlink" not in enabled_collectors({"nvlink": False})
    assert set(COLLECTOR_NAMES) >= {"self", "info", "utilization", "memory", "thermal", "power", "clocks",
                                     "pcie", "ecc", "remap", "nvlink", "xid", "modes"}
    for spec in COLLECTORS.values():
        assert spec.description and "\n" not in spec.description


def test_unknown_collector_names_it_and_the_allowed_ones():
    with pytest.raises(ValueError) as err:
        enabled_collectors({"nvlnk": True})
    assert "'nvlnk'" in str(err.value)
    for name in COLLECTOR_NAMES:
        assert name in str(err.value)


def test_non_boolean_switch_is_rejected():
    with pytest.raises(ValueError, match="ecc"):
        enabled_collectors({"ecc": "yes"})


def test_logs_enabled_collectors(caplog):
    with caplog.at_level(logging.INFO, logger="runtimekit.exporter"):
        build_registry(make_state(), {"nvlink": False, "xid": False})
    line = next(r.getMessage() for r in caplog.records if r.getMessage().startswith("enabled collectors: "))
    assert "nvlink" not in line and "xid" not in line and "info" in line


def test_disabled_collector_has_no_series():
    registry = build_registry(make_state(make_snapshot()), {"nvlink": False})
    text = generate_latest(registry).decode()
    assert "runtimekit_gpu_nvlink" not in text
    assert 'runtimekit_collector_success{collector="nvlink"}' not in text
    assert 'runtimekit_collector_success{collector="memory"} 1.0' in text


class Boom:
    def __init__(self):
        self.fail = True

    def collect(self, view):
        from prometheus_client.core import GaugeMetricFamily

        g = GaugeMetricFamily("runtimekit_boom_partial", "half-built")
        g.add_metric([], 1)
        yield g
        if self.fail:
            raise RuntimeError("boom")
        yield GaugeMetricFamily("runtimekit_boom_rest", "rest", value=2)


def test_failing_collector_costs_only_its_own_series(caplog):
    state = make_state(make_snapshot())
    boom = Boom()
    ticks = iter(range(1000))
    cs = CollectorSet({"memory": COLLECTORS["memory"].factory(), "boom": boom, "self": SelfCollector()},
                      timer=lambda: float(next(ticks)))
    with caplog.at_level(logging.INFO, logger="runtimekit.exporter"):
        for _ in range(3):
            fams = list(cs.collect(state.view()))
            assert value(fams, "runtimekit_collector_success", collector="boom") == 0.0
            assert value(fams, "runtimekit_collector_success", collector="memory") == 1.0
            assert value(fams, "runtimekit_collector_duration_seconds", collector="boom") == 1.0
            assert "runtimekit_boom_partial" not in names(fams)  # a half-built output is dropped whole
            assert "runtimekit_gpu_memory_used_bytes" in names(fams)
            assert "runtimekit_nvml_up" in names(fams)
        failures = [r for r in caplog.records if "collector boom failed" in r.getMessage()]
        assert len(failures) == 1 and failures[0].exc_info  # once per transition, with the traceback
        boom.fail = False
        fams = list(cs.collect(state.view()))
        fams = list(cs.collect(state.view()))
    assert value(fams, "runtimekit_collector_success", collector="boom") == 1.0
    assert {"runtimekit_boom_partial", "runtimekit_boom_rest"} <= names(fams)
    assert [r.getMessage() for r in caplog.records].count("collector boom recovered") == 1


def test_failing_collector_does_not_break_generate_latest():
    state = make_state(make_snapshot())
    from prometheus_client import CollectorRegistry

    registry = CollectorRegistry()
    registry.register(ViewCollector(state, CollectorSet({"boom": Boom(), "info": COLLECTORS["info"].factory()})))
    text = generate_latest(registry).decode()
    assert 'runtimekit_collector_success{collector="boom"} 0.0' in text
    assert "runtimekit_gpu_info{" in text


def test_collector_set_renders_one_view_and_build_registry_follows_the_state():
    state = make_state(make_snapshot())
    collectors = build_collector_set({"nvlink": False}, timer=lambda: 0.0)
    assert "nvlink" not in collectors.names and "memory" in collectors.names
    old = state.view()
    from exporter_factories import make_gpu

    from runtimekit.state import SamplerStats

    registry = build_registry(state, timer=lambda: 0.0)
    state.publish_snapshot(make_snapshot((make_gpu(0),)), SamplerStats(cycles_total=8))
    assert value(list(collectors.collect(old)), "runtimekit_samples_total") == 7  # the view it was given
    assert 'runtimekit_samples_total 8.0' in generate_latest(registry).decode()  # the state's latest view
