"""The health state machine, by tables: every path, hysteresis, flapping, sticky faults, node verdict."""

from __future__ import annotations

import pytest

from runtimekit.healthcheck.machine import MachineInput, MachineState, node_health, step, strongest_action
from runtimekit.healthcheck.types import (
    ACTIONS,
    CLEARS_ON_REBOOT,
    CLEARS_ON_RESET,
    CLEARS_WHEN_CLEAN,
    CRITICAL,
    DRAIN_AND_RESET_GPU,
    HEALTHY,
    INFO,
    NONE,
    REBOOT_NODE,
    RECOVERING,
    RESTART_APPLICATION,
    SUSPECT,
    UNHEALTHY,
    WARNING,
    Finding,
)

U0, U1 = "GPU-0", "GPU-1"
GPUS = ((0, U0), (1, U1))
N = 3  # clean samples to clear
LATE = 9999.0  # a reset after every evaluation here: it clears whatever it clears


def f(fault="ecc", severity=CRITICAL, clears=CLEARS_WHEN_CLEAN, uuid=U0, index=0, action=DRAIN_AND_RESET_GPU,
      instance=None) -> Finding:
    return Finding(index, uuid, fault, severity, action, f"{fault} seen", clears, instance)


def run(samples, *, start=None, clean=N):
    """Step through ``samples`` (each a tuple of findings, or a dict of MachineInput fields);
    returns (final state, [GPU 0 state after each step], all transitions)."""
    state = start or MachineState()
    seen, transitions = [], []
    for t, sample in enumerate(samples):
        fields = sample if isinstance(sample, dict) else {"findings": tuple(sample)}
        result = step(state, MachineInput(now=1000.0 + t, gpus=GPUS, clean_samples=clean, **fields))
        state = result.state
        transitions.extend(result.transitions)
        seen.append(state.gpus[U0].state)
    return state, seen, transitions


CRIT, WARN, INFO_F = (f(),), (f(severity=WARNING, action=NONE),), (f(severity=INFO, action=NONE),)
CLEAN = ()

PATHS = {
    "nothing stays healthy": ([CLEAN, CLEAN], [HEALTHY, HEALTHY]),
    "critical: unhealthy at once": ([CRIT], [UNHEALTHY]),
    "warning: suspect": ([WARN], [SUSPECT]),
    "info changes nothing": ([INFO_F, INFO_F], [HEALTHY, HEALTHY]),
    "critical clears through recovering": ([CRIT, CLEAN, CLEAN, CLEAN], [UNHEALTHY, RECOVERING, RECOVERING, HEALTHY]),
    "warning clears through recovering": ([WARN, CLEAN, CLEAN, CLEAN], [SUSPECT, RECOVERING, RECOVERING, HEALTHY]),
    "suspect then critical": ([WARN, CRIT], [SUSPECT, UNHEALTHY]),
    "signal back while recovering": ([CRIT, CLEAN, CRIT, CLEAN, CLEAN, CLEAN],
                                     [UNHEALTHY, RECOVERING, UNHEALTHY, RECOVERING, RECOVERING, HEALTHY]),
    "critical to warning: suspect": ([CRIT, WARN], [UNHEALTHY, SUSPECT]),
    "sticky on reset survives clean samples": ([(f(clears=CLEARS_ON_RESET),)] + [CLEAN] * 10, [UNHEALTHY] * 11),
    "sticky on reboot survives clean samples": ([(f(clears=CLEARS_ON_REBOOT),)] + [CLEAN] * 10, [UNHEALTHY] * 11),
    "reset clears reset-sticky": ([(f(clears=CLEARS_ON_RESET),), CLEAN, {"resets": {U0: LATE}}],
                                  [UNHEALTHY, UNHEALTHY, HEALTHY]),
    "reset of another GPU clears nothing": ([(f(clears=CLEARS_ON_RESET),), {"resets": {U1: LATE}}],
                                            [UNHEALTHY, UNHEALTHY]),
    "reset does not clear reboot-sticky": ([(f(clears=CLEARS_ON_REBOOT),), {"resets": {U0: LATE}}],
                                           [UNHEALTHY, UNHEALTHY]),
    "boot id change clears both sticky kinds": (
        [(f("a", clears=CLEARS_ON_RESET), f("b", clears=CLEARS_ON_REBOOT)), {"boot_id_changed": True}],
        [UNHEALTHY, HEALTHY]),
    "still signalled after the reset: back at once": (
        [(f(clears=CLEARS_ON_RESET),), {"resets": {U0: LATE}, "findings": (f(clears=CLEARS_ON_RESET),)}],
        [UNHEALTHY, UNHEALTHY]),
    "event-only evaluations never count as clean": (
        [CRIT, {"sampled": False}, {"sampled": False}, {"sampled": False}, CLEAN],
        [UNHEALTHY, UNHEALTHY, UNHEALTHY, UNHEALTHY, RECOVERING]),
    "an event refreshes a clearing fault": ([CRIT, CLEAN, {"sampled": False, "findings": CRIT}],
                                            [UNHEALTHY, RECOVERING, UNHEALTHY]),
    "sticky critical with clearing warning stays unhealthy": (
        [(f("x", clears=CLEARS_ON_RESET), f("w", WARNING)), CLEAN, CLEAN, CLEAN], [UNHEALTHY] * 4),
    "clearing critical with current warning is suspect": ([(f("c"), f("w", WARNING)), (f("w", WARNING),)],
                                                          [UNHEALTHY, SUSPECT]),
}


@pytest.mark.parametrize("samples, expected", PATHS.values(), ids=PATHS.keys())
def test_paths(samples, expected):
    assert run(samples)[1] == expected


@pytest.mark.parametrize("clean", [2, 3, 5, 10])
def test_flapping_faster_than_clean_samples_never_returns_to_healthy(clean):
    for period in range(1, clean):  # on for one sample, off for ``period`` samples, repeat
        samples = ([CRIT] + [CLEAN] * period) * 20
        _, seen, _ = run(samples, clean=clean)
        assert HEALTHY not in seen, (clean, period)
        assert seen.count(UNHEALTHY) == 20


def test_clean_samples_one_goes_straight_back():
    assert run([CRIT, CLEAN], clean=1)[1] == [UNHEALTHY, HEALTHY]


def test_transitions_are_returned_once_and_counted():
    state, _, transitions = run([CRIT, CRIT, CLEAN, CLEAN, CLEAN, CRIT])
    assert [(t.from_state, t.to_state) for t in transitions] == [
        (HEALTHY, UNHEALTHY), (UNHEALTHY, RECOVERING), (RECOVERING, HEALTHY), (HEALTHY, UNHEALTHY)]
    assert transitions[0].describe() == "GPU 0 (GPU-0) healthy → unhealthy: ecc: ecc seen"
    assert "cleared: ecc" in transitions[2].reason
    assert state.transitions_total == {(U0, HEALTHY, UNHEALTHY): 2, (U0, UNHEALTHY, RECOVERING): 1,
                                       (U0, RECOVERING, HEALTHY): 1}


def test_fault_events_count_activations_and_severity_changes_not_refreshes():
    state, _, _ = run([CRIT, CRIT, CRIT, CLEAN, WARN, CRIT])
    # CRIT active (1), refreshed twice, clearing, back at warning (1), then critical again (2)
    assert state.fault_events_total == {(U0, "ecc", CRITICAL): 2, (U0, "ecc", WARNING): 1}
    state, _, _ = run([CRIT, CLEAN, CLEAN, CLEAN, CRIT])  # cleared, then new
    assert state.fault_events_total == {(U0, "ecc", CRITICAL): 2}


def test_first_and_last_seen():
    state, _, _ = run([CRIT, CRIT, CLEAN])
    fault = state.gpus[U0].faults[0]
    assert (fault.first_seen, fault.last_seen, fault.clean_samples) == (1000.0, 1001.0, 1)
    assert not fault.current


def test_action_is_the_strongest_of_the_current_faults():
    findings = (f("a", WARNING, action=RESTART_APPLICATION), f("b", CRITICAL, action=DRAIN_AND_RESET_GPU),
                f("c", INFO, action=NONE))
    state, _, _ = run([findings])
    assert node_health(state, 0).gpus[0].action == DRAIN_AND_RESET_GPU
    state, _, _ = run([findings, (f("a", WARNING, action=RESTART_APPLICATION),)])  # b is clearing
    assert node_health(state, 0).gpus[0].action == RESTART_APPLICATION
    assert strongest_action(ACTIONS) == ACTIONS[-1] and strongest_action([]) == NONE


def test_node_is_the_worst_gpu_and_node_level_findings_count():
    state, _, _ = run([(f(severity=WARNING, uuid=U1, index=1, action=NONE),)])
    health = node_health(state, 5.0)
    assert (health.state, [g.state for g in health.gpus]) == (SUSPECT, [HEALTHY, SUSPECT])
    node_down = Finding(None, None, "nvml_down", CRITICAL, REBOOT_NODE, "nvmlInit failed", CLEARS_WHEN_CLEAN)
    state, _, transitions = run([(node_down,)])
    health = node_health(state, 5.0)
    assert (health.state, health.action) == (UNHEALTHY, REBOOT_NODE)
    assert [g.state for g in health.gpus] == [HEALTHY, HEALTHY]
    assert [fault.fault for fault in health.faults] == ["nvml_down"]
    assert transitions[0].describe().startswith("node healthy → unhealthy: nvml_down")
    assert state.fault_events_total == {} and state.node_fault_events_total == {("nvml_down", CRITICAL): 1}
    assert state.transitions_total == {}  # GPU transitions only


def test_recovering_is_worse_than_healthy_for_the_node():
    state, _, _ = run([CRIT, CLEAN])
    assert node_health(state, 0).state == RECOVERING


def test_mig_instances_are_separate_faults_and_the_gpu_takes_the_worst():
    findings = (f("xid_43", WARNING, instance=1, action=RESTART_APPLICATION), f("xid_43", CRITICAL, instance=2))
    state, seen, _ = run([findings, (findings[0],), (findings[0],), (findings[0],)])
    assert seen == [UNHEALTHY, SUSPECT, SUSPECT, SUSPECT]
    faults = state.gpus[U0].faults
    assert [(x.gpu_instance_id, x.severity) for x in faults] == [(1, WARNING)]


def test_duplicate_findings_keep_the_worse():
    state, seen, _ = run([(f(severity=WARNING), f(severity=CRITICAL), f(severity=INFO))])
    assert seen == [UNHEALTHY] and [x.severity for x in state.gpus[U0].faults] == [CRITICAL]


def test_a_gpu_that_leaves_the_snapshot_keeps_its_record():
    state, _, _ = run([(f(clears=CLEARS_ON_REBOOT),)])
    result = step(state, MachineInput(now=2000.0, gpus=((1, U1),), clean_samples=N))
    assert result.state.gpus[U0].state == UNHEALTHY


def test_since_moves_only_on_transitions():
    state, _, _ = run([CRIT, CRIT, CRIT])
    assert state.gpus[U0].since == 1000.0
    assert state.gpus[U1].since == 1000.0 and state.gpus[U1].state == HEALTHY


def test_finding_for_an_unknown_gpu_creates_its_record():
    result = step(MachineState(), MachineInput(now=1.0, findings=(f(uuid="GPU-9", index=9),)))
    assert result.state.gpus["GPU-9"].index == 9 and result.state.gpus["GPU-9"].state == UNHEALTHY
    assert [(i, u, x.fault) for i, u, x in result.new_faults] == [(9, "GPU-9", "ecc")]
