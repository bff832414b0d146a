"""Health records' lifecycle (retired GPUs), detector state persisted with the verdict, and the
memory-leak detector's bounded state."""

from __future__ import annotations

import json

from health_factories import T0, GiB, MiB, make_gpu, make_input, make_snapshot, with_

from runtimekit.gpu.types import GpuProcess
from runtimekit.healthcheck.detectors.memory_leak import BUCKETS, memory_leak
from runtimekit.healthcheck.machine import MachineInput, MachineState, node_health, step
from runtimekit.healthcheck.store import HealthStore
from runtimekit.healthcheck.types import CLEARS_ON_REBOOT, CRITICAL, HEALTHY, REBOOT_NODE, Finding

OLD, NEW = "GPU-old", "GPU-new"


def lost(uuid: str, index: int = 3) -> Finding:
    return Finding(index, uuid, "gpu_lost", CRITICAL, REBOOT_NODE, "XID 79", CLEARS_ON_REBOOT)


def test_a_replaced_gpu_leaves_one_health_series_set() -> None:
    """GPU 3 is lost (sticky until a reboot); its board is replaced: a new UUID at index 3."""
    state = step(MachineState(), MachineInput(now=1.0, findings=(lost(OLD),), gpus=((3, OLD),), inventory=True)).state
    assert node_health(state, 1.0).gpus[0].state == "unhealthy"
    result = step(state, MachineInput(now=2.0, gpus=((3, NEW),), inventory=True))
    gpus = node_health(result.state, 2.0).gpus
    assert [(g.index, g.uuid, g.state) for g in gpus] == [(3, NEW, HEALTHY)]
    assert result.retired == ((3, OLD, f"GPU {NEW} now holds index 3 (the board was replaced)"),)
    assert result.state.gpus[OLD].retired


def test_absent_gpus_retire_once_healthy_or_at_a_new_boot_only_with_a_full_inventory() -> None:
    state = step(MachineState(), MachineInput(now=1.0, findings=(lost(OLD, 5),), gpus=((5, OLD),))).state
    state = step(state, MachineInput(now=2.0, gpus=((0, "GPU-0"),), inventory=True)).state
    assert not state.gpus[OLD].retired  # unhealthy, no reboot, its index free: kept (still a fault)
    kept = step(state, MachineInput(now=3.0, gpus=(), sampled=False, boot_id_changed=True)).state
    assert not kept.gpus[OLD].retired  # no inventory (NVML down, XID-only): absence proves nothing
    state = step(state, MachineInput(now=3.0, gpus=((0, "GPU-0"),), boot_id_changed=True, inventory=True)).state
    assert state.gpus[OLD].retired and [g.uuid for g in node_health(state, 3.0).gpus] == ["GPU-0"]
    healthy = step(MachineState(), MachineInput(now=1.0, gpus=((1, "GPU-1"),), inventory=True)).state
    healthy = step(healthy, MachineInput(now=2.0, gpus=(), inventory=True)).state
    assert healthy.gpus["GPU-1"].retired
    back = step(healthy, MachineInput(now=3.0, gpus=((1, "GPU-1"),), inventory=True)).state
    assert not back.gpus["GPU-1"].retired and len(node_health(back, 3.0).gpus) == 1


def test_retired_records_and_detector_states_are_persisted(tmp_path) -> None:
    boot = tmp_path / "boot_id"
    boot.write_text("boot-a\n")
    clock = [100.0]
    store = HealthStore(tmp_path / "state", boot_id_path=str(boot), clock=lambda: clock[0])
    state = step(MachineState(), MachineInput(now=1.0, findings=(lost(OLD),), gpus=((3, OLD),), inventory=True)).state
    state = step(state, MachineInput(now=2.0, gpus=((3, NEW),), inventory=True)).state
    ecc = {"base": {NEW: ["uncorrected_volatile", 1]}, "pending": {}, "explained": {}}
    assert store.save(state, 8, {"ecc": ecc, "thermal_power": {"at": 1.0}})
    assert not store.save(state, 8, {"ecc": ecc, "thermal_power": {"at": 2.0}})  # churn only: not yet due
    assert store.save(state, 8, {"ecc": {**ecc, "base": {NEW: ["uncorrected_volatile", 2]}}, "thermal_power": {"at": 2.0}})
    clock[0] += 61
    assert store.save(state, 8, {"ecc": {**ecc, "base": {NEW: ["uncorrected_volatile", 2]}}, "thermal_power": {"at": 3.0}})
    loaded = HealthStore(tmp_path / "state", boot_id_path=str(boot)).load()
    assert loaded.state == state and loaded.state.gpus[OLD].retired
    assert loaded.detectors["ecc"]["base"] == {NEW: ["uncorrected_volatile", 2]}
    assert loaded.detectors["thermal_power"] == {"at": 3.0}
    doc = json.loads((tmp_path / "state" / "health.json").read_text())
    assert [g["retired"] for g in doc["gpus"]] == [False, True]


def _steady(at: float, processes: int):
    procs = tuple(GpuProcess(pid=1000 + n, used_memory_bytes=1 * GiB + n * MiB, kind="compute") for n in range(processes))
    return make_snapshot(with_(make_gpu(0, at=at, processes=procs), "memory", used_bytes=80 * GiB - 1))


def _size(state) -> int:
    """Values carried: every number and key in the state (JSON text length would vary with digits)."""
    def count(value) -> int:
        if isinstance(value, dict):
            return sum(1 + count(v) for v in value.values())
        if isinstance(value, (list, tuple)):
            return sum(count(v) for v in value)
        return 1
    return count(state)


def test_memory_leak_state_does_not_grow_with_evaluations() -> None:
    """The state carried between evaluations is bounded for a steady set of processes (1 s samples,
    600 s window): the same size after 700 and after 2000 evaluations, at most BUCKETS + 1 per process."""
    state = None
    sizes = {}
    for n in range(2000):
        state, _ = memory_leak(state, make_input(_steady(T0 + n, 8)))
        if n in (699, 1999):
            sizes[n] = _size(state)
    assert sizes[699] == sizes[1999]
    assert all(len(history) <= BUCKETS + 1 for history in state["procs"][make_gpu(0).uuid].values())


def test_memory_leak_state_is_linear_in_processes() -> None:
    sizes = []
    for processes in (16, 64):
        state = None
        for n in range(700):
            state, _ = memory_leak(state, make_input(_steady(T0 + n, processes)))
        sizes.append(_size(state))
    assert sizes[1] < 4.5 * sizes[0]
