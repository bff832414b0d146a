"""A GPU that starts failing keeps the identity and limits read before (docs/simulator.md,
``driver-error``; docs/metrics.md, ``runtimekit_gpu_memory_total_bytes``).

The periodic limits re-read (``limits_refresh_seconds``) and the retry of an incomplete identity
keep, field by field, the last good value of every field that failed to read; a failed field is
read again next cycle, and a lost GPU keeps what was known of it.
"""

from __future__ import annotations

import pytest
from gpu_helpers import UNKNOWN, use_library

from runtimekit import sim
from runtimekit.gpu.types import GpuSnapshot, is_available

REFRESH_S = 5.0  # limits_refresh_seconds of these readers
FAILING = 2  # the GPU that starts failing


def limit_errors(gpu: GpuSnapshot) -> list[tuple[str, str]]:
    return [(name, why) for name, why in gpu.errors if name.startswith("limits.")]


def assert_limits_complete(gpu: GpuSnapshot) -> None:
    for name in gpu.limits.__slots__:
        assert is_available(getattr(gpu.limits, name)), name


@pytest.mark.parametrize("error", ["timeout", "unknown", "no-permission"])
def test_limits_survive_a_failing_refresh(make_node, make_reader, clock, error):
    node = make_node("dgx-h100", load="training")
    reader = make_reader(limits_refresh_seconds=REFRESH_S)
    before = reader.sample().gpus[FAILING]
    assert_limits_complete(before)

    node.inject(FAILING, "driver-error", error=error)
    for _ in range(3):  # the refresh that fails, then the retries of the next cycles
        clock.advance(REFRESH_S + 1.0)
        gpu = reader.sample().gpus[FAILING]
        assert gpu.memory is not None and not is_available(gpu.memory.total_bytes)  # readings do fail
        assert gpu.limits == before.limits
        assert gpu.identity == before.identity
        assert limit_errors(gpu) == []

    node.clear(FAILING, "driver-error")
    clock.advance(1.0)
    gpu = reader.sample().gpus[FAILING]
    assert gpu.errors == ()
    assert gpu.limits == before.limits


def test_a_field_that_failed_a_refresh_is_read_again_next_cycle(make_node, make_reader, patch_lib, clock):
    node = make_node("dgx-h100")
    lib = patch_lib(count=("nvmlDeviceGetMaxPcieLinkWidth",))
    reader = make_reader(limits_refresh_seconds=REFRESH_S)
    before = reader.sample().gpus[FAILING]
    calls = lib.calls["nvmlDeviceGetMaxPcieLinkWidth"]

    node.inject(FAILING, "driver-error", error="timeout")
    clock.advance(REFRESH_S)
    reader.sample()
    clock.advance(1.0)  # refresh not due: read again only because the last read failed
    reader.sample()
    assert lib.calls["nvmlDeviceGetMaxPcieLinkWidth"] - calls == 8 + 1  # all 8 refreshed, then GPU 2

    node.clear(FAILING, "driver-error")
    clock.advance(1.0)
    gpu = reader.sample().gpus[FAILING]  # this read is complete ...
    assert gpu.limits == before.limits
    calls = lib.calls["nvmlDeviceGetMaxPcieLinkWidth"]
    clock.advance(1.0)
    reader.sample()  # ... so the next cycle reads no limits
    assert lib.calls["nvmlDeviceGetMaxPcieLinkWidth"] == calls


def test_a_lost_gpu_keeps_identity_and_limits_read_before(make_node, make_reader, clock):
    node = make_node("dgx-h100")
    reader = make_reader(limits_refresh_seconds=REFRESH_S)
    before = reader.sample().gpus[FAILING]

    node.inject(FAILING, "driver-error", error="timeout")  # failing first: the refresh fails
    clock.advance(REFRESH_S + 1.0)
    reader.sample()
    node.inject(FAILING, "gpu-lost")  # then off the bus, with a refresh due
    clock.advance(REFRESH_S + 1.0)
    gpu = reader.sample().gpus[FAILING]
    assert gpu.lost
    assert gpu.identity == before.identity
    assert gpu.limits == before.limits


def test_identity_re_read_keeps_the_fields_read_before(make_node, make_reader, patch_lib, clock):
    node = make_node("dgx-h100")
    fake = sim.installed()
    patch_lib(errors={"nvmlDeviceGetUUID": UNKNOWN})  # discovery reads all but the uuid
    reader = make_reader(limits_refresh_seconds=REFRESH_S)
    first = reader.sample().gpus[FAILING]
    assert not is_available(first.uuid)
    assert first.identity.name == "NVIDIA H100 80GB HBM3"

    use_library(fake)
    node.inject(FAILING, "driver-error", error="timeout")  # the retry of the uuid fails, and all else
    clock.advance(1.0)
    gpu = reader.sample().gpus[FAILING]
    assert gpu.identity.name == "NVIDIA H100 80GB HBM3"
    assert gpu.identity.pci_bus_id == first.identity.pci_bus_id
    assert gpu.identity.serial == node.gpu(FAILING).serial
    assert not is_available(gpu.uuid)  # still unknown: read again next cycle

    node.clear(FAILING, "driver-error")
    clock.advance(1.0)
    gpu = reader.sample().gpus[FAILING]
    assert gpu.uuid == node.gpu(FAILING).uuid
    assert gpu.identity.name == "NVIDIA H100 80GB HBM3"
