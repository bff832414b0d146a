"""Contained ECC (XID 94) end to end through the detectors and the state machine, in the order the
simulator's ``ecc-contained`` fault produces it; and the driver's recovery action (XID 154)."""

from __future__ import annotations

import dataclasses

import pytest
from health_factories import T0, make_gpu, make_input, make_snapshot, uuid_for, with_, xid

from runtimekit.gpu.types import GpuSnapshot, Reading, Unavailable
from runtimekit.healthcheck.detectors import run_detectors
from runtimekit.healthcheck.detectors.driver import driver
from runtimekit.healthcheck.machine import MachineInput, MachineState, node_health, step
from runtimekit.healthcheck.types import (
    CRITICAL,
    DRAIN_AND_RESET_GPU,
    REBOOT_NODE,
    REPLACE_NODE,
    SUSPECT,
    UNHEALTHY,
    WARNING,
)


def contained(at: float, errors: int, pending: bool) -> GpuSnapshot:
    """GPU 0 after ``errors`` contained errors: volatile and aggregate uncorrected counts grown, a remap pending."""
    gpu = with_(make_gpu(0, at=at), "ecc", uncorrected_volatile=errors, uncorrected_aggregate=1 + errors)
    return with_(gpu, "remapped_rows", pending=pending, uncorrectable=errors)


def run(steps):
    """steps: (now, snapshot or None for an XID-only evaluation, xids); returns the verdicts."""
    states: dict = {}
    machine = MachineState()
    previous = snapshot = None
    verdicts = []
    for now, new, xids in steps:
        sampled = new is not None
        if sampled:
            previous, snapshot = snapshot, new
        data = make_input(snapshot, previous if sampled else snapshot, xids=xids, now=now)
        states, findings = run_detectors(states, data)
        machine = step(machine, MachineInput(now=now, findings=tuple(findings), sampled=sampled,
                                             gpus=tuple((g.index, g.uuid) for g in snapshot.gpus))).state
        verdicts.append(node_health(machine, now))
    return verdicts


def assert_contained(verdict) -> None:
    gpu = verdict.gpus[0]
    assert gpu.state == SUSPECT and gpu.schedulable and gpu.action == DRAIN_AND_RESET_GPU
    assert {f.severity for f in gpu.faults} == {WARNING}
    assert {f.fault for f in gpu.faults} <= {"ecc_contained", "row_remap_pending"}
    assert all(f.action not in (REBOOT_NODE, REPLACE_NODE) for f in gpu.faults)


@pytest.mark.parametrize("xid_at", [T0 + 9.5, T0 + 11.0, T0 + 14.0], ids=["xid first", "xid 1 s late", "xid 4 s late"])
def test_xid_94_with_its_counters_and_remap_stays_one_warning(xid_at) -> None:
    steps = [(T0, make_snapshot(make_gpu(0, at=T0)), ())]
    event = [xid(94, at=xid_at)]
    if xid_at < T0 + 10:
        steps.append((xid_at, None, event))
        steps.append((T0 + 10, make_snapshot(contained(T0 + 10, 1, True)), ()))
    else:
        steps.append((T0 + 10, make_snapshot(contained(T0 + 10, 1, True)), ()))
        steps.append((xid_at, None, event))
    steps += [(T0 + 10 * i, make_snapshot(contained(T0 + 10 * i, 1, True)), ()) for i in range(2, 12)]
    verdicts = run(steps)
    for verdict in verdicts[2:]:
        assert_contained(verdict)
    assert {f.fault for f in verdicts[-1].gpus[0].faults} == {"ecc_contained", "row_remap_pending"}


def test_a_counter_jump_no_xid_explains_is_uncorrectable() -> None:
    steps = [(T0, make_snapshot(make_gpu(0, at=T0)), ())]
    steps += [(T0 + 10 * i, make_snapshot(contained(T0 + 10 * i, 2, False)), ()) for i in range(1, 4)]
    gpu = run(steps)[-1].gpus[0]
    assert gpu.state == UNHEALTHY and not gpu.schedulable
    assert [(f.fault, f.severity) for f in gpu.faults] == [("ecc_uncorrectable", CRITICAL)]


@pytest.mark.parametrize("code", [48, 95, 140])
def test_uncorrectable_xids_are_critical(code) -> None:
    verdicts = run([(T0, make_snapshot(make_gpu(0, at=T0)), [xid(code, at=T0)])])
    gpu = verdicts[-1].gpus[0]
    assert gpu.state == UNHEALTHY and not gpu.schedulable and gpu.action == DRAIN_AND_RESET_GPU


# --- XID 154 and the driver's recovery action -------------------------------------------------

def recovering(action: Reading[str], at: float = T0) -> GpuSnapshot:
    """GPU 0 with the driver's recovery action (NVML_FI_DEV_GET_GPU_RECOVERY_ACTION) set to ``action``."""
    return dataclasses.replace(make_gpu(0, at=at), recovery_action=action)


@pytest.mark.parametrize(
    ("action", "fault", "expected"),
    [
        ("node_reboot", "recovery_node_reboot", REBOOT_NODE),
        ("gpu_reset", "recovery_gpu_reset", DRAIN_AND_RESET_GPU),
        ("drain_and_reset", "recovery_drain_and_reset", DRAIN_AND_RESET_GPU),
        ("drain_p2p", "recovery_drain_p2p", DRAIN_AND_RESET_GPU),
    ],
)
def test_xid_154_uses_the_recovery_action_field(action, fault, expected) -> None:
    # XID 154 with a reset XID as companion: the field asks for more (a reboot) and wins.
    found = driver(None, make_input(make_snapshot(recovering(action)), xids=[xid(119), xid(154)]))[1]
    by_fault = {f.fault: f for f in found}
    assert by_fault[fault].action == expected and by_fault[fault].severity == CRITICAL
    assert by_fault["xid_154"].severity == "info" and "recovery-action field" in by_fault["xid_154"].evidence


def test_xid_154_follows_companions_when_the_field_is_unreadable() -> None:
    unreadable = recovering(Unavailable("not_supported"))
    found = driver(None, make_input(make_snapshot(unreadable), xids=[xid(119), xid(154)]))[1]
    assert {f.fault: f.severity for f in found} == {"xid_119": CRITICAL, "xid_154": CRITICAL}
    quiet = driver(None, make_input(make_snapshot(recovering("none"))))[1]
    assert quiet == [] and uuid_for(0)
