"""Per-GPU faults through NodeReader: a lost GPU (gpu-lost, XID 79) and a driver error on one GPU
leave the other GPUs complete, and the GPU reads again once the fault is cleared."""

from __future__ import annotations

import logging

import pytest

from runtimekit.gpu.types import GpuSnapshot, Unavailable, is_available

READING_GROUPS = ("utilization", "memory", "thermal", "power", "clocks", "pcie", "ecc", "retired_pages", "remapped_rows", "modes")


def assert_complete(gpu: GpuSnapshot, links: int = 18) -> None:
    """A healthy simulated H100: every group read, no errors, every link."""
    assert not gpu.lost
    assert gpu.errors == ()
    for group in READING_GROUPS:
        assert getattr(gpu, group) is not None, group
    assert gpu.power.draw_watts > 0 and gpu.memory.total_bytes > 0
    assert len(gpu.nvlinks) == links
    assert is_available(gpu.uuid) and gpu.uuid.startswith("GPU-")


def assert_no_readings(gpu: GpuSnapshot) -> None:
    for group in READING_GROUPS:
        assert getattr(gpu, group) is None, group
    assert (gpu.nvlinks, gpu.processes) == ((), ())


LOST = [
    pytest.param({3: ("gpu-lost", {})}, id="gpu-lost-3"),
    pytest.param({5: ("xid", {"xid": 79})}, id="xid79-5"),
    pytest.param({3: ("gpu-lost", {}), 5: ("xid", {"xid": 79})}, id="both"),
]


@pytest.mark.parametrize("faults", LOST)
def test_lost_gpu_has_no_readings_and_the_others_are_complete(make_node, make_reader, clock, caplog, faults):
    node = make_node("dgx-h100", load="training")
    node.set_process_count(16)
    reader = make_reader()
    before = reader.sample()
    assert all(not gpu.lost for gpu in before.gpus)

    for index, (kind, params) in faults.items():
        node.inject(index, kind, **params)
    for _ in range(2):  # stays lost, and is logged once
        clock.advance(1.0)
        snapshot = reader.sample()
        assert snapshot.nvml_up and snapshot.device_count == 8 and len(snapshot.gpus) == 8
        for gpu in snapshot.gpus:
            if gpu.index in faults:
                assert gpu.lost is True
                assert_no_readings(gpu)
                assert gpu.identity == before.gpus[gpu.index].identity  # still known by its uuid
                assert gpu.errors and "GPU_IS_LOST" in gpu.errors[0][1]
            else:
                assert_complete(gpu)
                assert gpu.processes
    lost_logs = [r for r in caplog.records if r.levelno == logging.ERROR and "is lost" in r.getMessage()]
    assert len(lost_logs) == len(faults)

    for index, (kind, _) in faults.items():
        assert node.clear(index, kind) == 1
    clock.advance(1.0)
    after = reader.sample()
    for gpu in after.gpus:
        assert_complete(gpu)
        assert gpu.identity == before.gpus[gpu.index].identity


def test_gpu_lost_before_discovery_is_discovered_once_back(make_node, make_reader, clock):
    node = make_node("dgx-h100")
    node.inject(3, "gpu-lost")
    reader = make_reader()
    snapshot = reader.sample()
    gpu = snapshot.gpus[3]
    assert gpu.lost is True
    assert_no_readings(gpu)
    for other in snapshot.gpus:
        if other.index != 3:
            assert_complete(other)

    node.clear(3)
    clock.advance(1.0)
    gpu = reader.sample().gpus[3]
    assert_complete(gpu)
    assert gpu.uuid == node.gpu(3).uuid


@pytest.mark.parametrize(
    ("error", "reason", "code_name"),
    [
        ("unknown", "error", "NVML_ERROR_UNKNOWN"),
        ("timeout", "error", "NVML_ERROR_TIMEOUT"),
        ("no-permission", "no_permission", "NVML_ERROR_NO_PERMISSION"),
    ],
)
def test_driver_error_on_one_gpu(make_node, make_reader, clock, error, reason, code_name):
    node = make_node("dgx-h100", load="training")
    reader = make_reader()
    reader.sample()
    node.inject(2, "driver-error", error=error)
    clock.advance(1.0)
    snapshot = reader.sample()
    assert snapshot.nvml_up
    for gpu in snapshot.gpus:
        if gpu.index != 2:
            assert_complete(gpu)
            continue
        assert not gpu.lost
        assert gpu.uuid == node.gpu(2).uuid  # identity was read before the fault
        for group in READING_GROUPS:
            for name in getattr(gpu, group).__slots__:
                value = getattr(getattr(gpu, group), name)
                assert isinstance(value, Unavailable) and value.reason == reason, (group, name, value)
        assert gpu.power.draw_watts == Unavailable(reason, f"nvmlDeviceGetPowerUsage: {code_name}")
        for link in gpu.nvlinks:
            assert link.tx_bytes.reason == link.crc_data_errors.reason == reason
        listed = dict(gpu.errors)
        assert listed["utilization.gpu"] == f"nvmlDeviceGetUtilizationRates: {code_name}"
        assert listed["power.draw_watts"] == f"nvmlDeviceGetPowerUsage: {code_name}"
        assert len(gpu.errors) >= 30

    node.clear(2, "driver-error")
    clock.advance(1.0)
    assert_complete(reader.sample().gpus[2])


def test_identity_failed_at_discovery_is_read_again(make_node, make_reader, clock):
    node = make_node("dgx-h100")
    node.inject(2, "driver-error", error="unknown")
    reader = make_reader()
    first = reader.sample().gpus[2]
    assert not is_available(first.uuid)  # no made-up identity: the reading says why it is missing
    assert first.uuid.reason == "error"
    node.clear(2)
    clock.advance(1.0)
    gpu = reader.sample().gpus[2]
    assert gpu.uuid == node.gpu(2).uuid
    assert gpu.identity.name == "NVIDIA H100 80GB HBM3"
    assert gpu.limits.nvlink_count == 18
