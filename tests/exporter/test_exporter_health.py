"""The health collector: one 0/1 series per state, active faults, counters, absent before evaluation."""

from __future__ import annotations

import subprocess

from exporter_factories import make_health, make_snapshot, make_state, samples, uuid_for, value
from prometheus_client import generate_latest

from runtimekit.exporter.collectors._common import SAMPLED
from runtimekit.exporter.collectors.health import STATES, HealthCollector
from runtimekit.exporter.registry import COLLECTORS, build_registry

G0 = {"gpu": "0", "uuid": uuid_for(0)}
G1 = {"gpu": "1", "uuid": uuid_for(1)}


def collect(health=None):
    state = make_state(make_snapshot())
    if health is not None:
        state.publish_health(health)
    return list(HealthCollector().collect(state.view()))


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
    xid79 = {**G1, "fault": "xid_79", "severity": "critical", "action": "reboot_node", "class": ""}
    thermal = {**G1, "fault": "thermal_slowdown", "severity": "warning", "action": "none", "class": ""}
    assert active == {
        ("runtimekit_gpu_fault_active", tuple(sorted(xid79.items()))): 1.0,
        ("runtimekit_gpu_fault_active", tuple(sorted(thermal.items()))): 1.0,
    }
    assert value(families, "runtimekit_gpu_fault_events_total", **G1, fault="thermal_slowdown", severity="warning") == 2
    assert value(families, "runtimekit_gpu_fault_events_total", **G1, fault="xid_79") == 1
    assert value(families, "runtimekit_health_transitions_total", **G1, **{"from": "healthy", "to": "unhealthy"}) == 1
    assert value(families, "runtimekit_node_fault_active", fault="gpu_count_low", severity="critical",
                 action="reboot_node") == 1
    assert value(families, "runtimekit_node_fault_events_total", fault="gpu_count_low") == 1
    assert value(families, "runtimekit_health_evaluation_seconds") == 0.0015



def test_event_counters_do_not_say_they_are_sampled():
    """Counts of events kept across restarts (like the XID counter), not readings taken on the interval."""
    documentation = {f.name: f.documentation for f in collect(make_health())}
    for name in ("runtimekit_gpu_fault_events", "runtimekit_health_transitions", "runtimekit_node_fault_events"):
        assert "kept across agent restarts" in documentation[name] and SAMPLED not in documentation[name]
    assert SAMPLED in documentation["runtimekit_gpu_health"]

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


def test_promtool_is_silent(tmp_path, require_tool):
    promtool = require_tool("promtool")
    state = make_state(make_snapshot())
    state.publish_health(make_health())
    text = generate_latest(build_registry(state, {name: name == "health" for name in COLLECTORS}))
    result = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, timeout=30)
    assert (result.returncode, result.stdout, result.stderr) == (0, b"", b"")


def test_active_faults_carry_the_policys_action_and_class():
    """The alert rules route on action and class (alerts/runtimekit.rules.yml)."""
    from dataclasses import replace

    from runtimekit.healthcheck.policy import default_policy

    policy = default_policy()
    contained = policy.fault("ecc_contained")
    fault = replace(make_health().gpus[1].faults[0], fault="ecc_contained", severity=contained.severity,
                    action=contained.action, fault_class=contained.fault_class, schedulable=True)
    failed = replace(make_health().faults[0], fault="health_check_failed", severity="warning", action="none",
                     fault_class="agent")
    health = make_health()
    health = replace(health, gpus=(health.gpus[0], replace(health.gpus[1], state="suspect", faults=(fault,))),
                     faults=(failed,))
    families = collect(health)
    assert value(families, "runtimekit_gpu_fault_active", **G1, fault="ecc_contained", severity="warning",
                 action="drain_and_reset_gpu", **{"class": "memory"}) == 1
    assert value(families, "runtimekit_node_fault_active", fault="health_check_failed", severity="warning",
                 action="none", **{"class": "agent"}) == 1


def test_a_replaced_gpu_leaves_one_health_series_set():
    """GPU 1 is lost (sticky), then its board is replaced: a new UUID at index 1. One series set."""
    from runtimekit.healthcheck.machine import MachineInput, MachineState, node_health, step
    from runtimekit.healthcheck.policy import default_policy

    lost = default_policy().finding(1, uuid_for(1), "gpu_lost", "XID 79")
    gpus = ((0, uuid_for(0)), (1, uuid_for(1)))
    machine = step(MachineState(), MachineInput(now=1.0, findings=(lost,), gpus=gpus, inventory=True)).state
    replaced = ((0, uuid_for(0)), (1, "GPU-replacement"))
    machine = step(machine, MachineInput(now=2.0, gpus=replaced, inventory=True)).state
    families = collect(node_health(machine, 2.0))
    series = [labels for name, labels in samples(families) if name == "runtimekit_gpu_health"]
    per_index = {}
    for labels in series:
        d = dict(labels)
        per_index.setdefault(d["gpu"], set()).add(d["uuid"])
    assert per_index == {"0": {uuid_for(0)}, "1": {"GPU-replacement"}}
    assert len(series) == 2 * len(STATES)
