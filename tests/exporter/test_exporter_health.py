"""The health collector: one 0/1 series per state, active faults, counters, absent before evaluation."""

from __future__ import annotations

import subprocess

from exporter_factories import make_health, make_snapshot, make_state, samples, uuid_for, value
from prometheus_client import generate_latest

from runtimekit.exporter.collectors.health import STATES, HealthCollector
from runtimekit.exporter.registry import COLLECTORS, build_registry

G0 = {"gpu": "0", "uuid": uuid_for(0)}
G1 = {"gpu": "1", "uuid": uuid_for(1)}


def collect(health=None):
    state = make_state(make_snapshot())
    if health is not None:
        state.publish_health(health)
    return list(HealthCollector(state).collect())


def test_absent_before_the_first_evaluation():
    assert collect() == []


def test_states_are_one_series_per_state():
    families = collect(make_health())
    for state in STATES:
        assert value(families, "runtimekit_gpu_health", **G0, state=state) == (1.0 if state == "healthy" else 0.0)
        assert value(families, "runtimekit_gpu_health", **G1, state=state) == (1.0 if state == "unhealthy" else 0.0)
        assert value(families, "runtimekit_node_health", state=state) == (1.0 if state == "unhealthy" else 0.0)


def test_states_match_the_health_checker_vocabulary():
    from runtimekit.healthcheck.types import STATES as CHECKER_STATES

    assert STATES == CHECKER_STATES


def test_active_faults_events_and_transitions():
    families = collect(make_health())
    all_samples = samples(families)
    active = {k: v for k, v in all_samples.items() if k[0] == "runtimekit_gpu_fault_active"}
    assert active == {
        ("runtimekit_gpu_fault_active", tuple(sorted({**G1, "fault": "xid_79", "severity": "critical"}.items()))): 1.0,
        ("runtimekit_gpu_fault_active", tuple(sorted({**G1, "fault": "thermal_slowdown", "severity": "warning"}.items()))): 1.0,
    }
    assert value(families, "runtimekit_gpu_fault_events_total", **G1, fault="thermal_slowdown", severity="warning") == 2
    assert value(families, "runtimekit_gpu_fault_events_total", **G1, fault="xid_79") == 1
    assert value(families, "runtimekit_health_transitions_total", **G1, **{"from": "healthy", "to": "unhealthy"}) == 1
    assert value(families, "runtimekit_node_fault_active", fault="gpu_count_low", severity="critical") == 1
    assert value(families, "runtimekit_node_fault_events_total", fault="gpu_count_low") == 1
    assert value(families, "runtimekit_health_evaluation_seconds") == 0.0015


def test_a_cleared_fault_leaves_the_exposition():
    health = make_health()
    from dataclasses import replace

    healed = replace(health, gpus=tuple(replace(g, state="healthy", faults=()) for g in health.gpus), faults=())
    families = collect(healed)
    assert not [k for k in samples(families) if k[0] in ("runtimekit_gpu_fault_active", "runtimekit_node_fault_active")]
    assert value(families, "runtimekit_gpu_fault_events_total", **G1, fault="xid_79") == 1  # counters stay


def test_registered_as_health_and_on_by_default():
    assert COLLECTORS["health"].enabled_by_default
    state = make_state(make_snapshot())
    state.publish_health(make_health())
    text = generate_latest(build_registry(state, timer=lambda: 0.0)).decode()
    assert 'runtimekit_collector_success{collector="health"} 1.0' in text
    assert "# TYPE runtimekit_gpu_fault_events_total counter" in text
    assert 'runtimekit_health_evaluation_seconds 0.0015' in text
    assert "runtimekit_gpu_health" not in generate_latest(build_registry(state, {"health": False})).decode()


def test_promtool_is_silent(tmp_path):
    import shutil

    promtool = shutil.which("promtool") or "/usr/bin/promtool"
    state = make_state(make_snapshot())
    state.publish_health(make_health())
    text = generate_latest(build_registry(state, {name: name == "health" for name in COLLECTORS}))
    result = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, timeout=30)
    assert (result.returncode, result.stdout, result.stderr) == (0, b"", b"")
