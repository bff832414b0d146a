"""Hand-built snapshots for the exporter tests: a healthy H100-like GPU, overridable per field."""

from __future__ import annotations

import dataclasses
from types import MappingProxyType
from typing import Any

from runtimekit.gpu.types import (
    NOT_SUPPORTED,
    Clocks,
    DriverInfo,
    Ecc,
    GpuIdentity,
    GpuLimits,
    GpuProcess,
    GpuSnapshot,
    Memory,
    Modes,
    NodeSnapshot,
    NvLink,
    Pcie,
    Power,
    RemappedRows,
    RetiredPages,
    Thermal,
    Unavailable,
    Utilization,
)
from runtimekit.state import NodeState, SamplerStats

GiB = 1024**3
MHZ = 1_000_000.0
SAMPLED_AT = 1_700_000_000.0


def uuid_for(index: int) -> str:
    return f"GPU-0000000{index}-aaaa-bbbb-cccc-dddddddddddd"


def make_nvlink(link: int, **overrides: Any) -> NvLink:
    fields: dict[str, Any] = dict(
        link=link, active=True, crc_flit_errors=1, crc_data_errors=2, replay_errors=3, recovery_errors=0,
        tx_bytes=1024 * (link + 1), rx_bytes=2048 * (link + 1),
    )
    fields.update(overrides)
    return NvLink(**fields)


def make_gpu(index: int = 0, *, link_count: int = 2, **overrides: Any) -> GpuSnapshot:
    """A healthy Hopper GPU; ``overrides`` replace top-level GpuSnapshot fields."""
    fields: dict[str, Any] = dict(
        index=index,
        identity=GpuIdentity(
            uuid=uuid_for(index), name="NVIDIA H100 80GB HBM3", pci_bus_id=f"00000000:{0x18 + index:02X}:00.0",
            serial=f"165432100{index}", vbios_version="96.00.74.00.01", board_part_number="692-2G520-0200-000",
            architecture="hopper", cuda_compute_capability="9.0",
        ),
        limits=GpuLimits(
            memory_total_bytes=80 * GiB, bar1_total_bytes=128 * GiB,
            sm_clock_max_hertz=1980 * MHZ, memory_clock_max_hertz=2619 * MHZ, graphics_clock_max_hertz=1980 * MHZ,
            temperature_slowdown_celsius=90.0, temperature_shutdown_celsius=92.0,
            temperature_gpu_max_celsius=87.0, temperature_memory_max_celsius=95.0,
            pcie_max_generation=5, pcie_max_width=16, nvlink_count=18,
        ),
        sampled_at=SAMPLED_AT,
        lost=False,
        utilization=Utilization(gpu=0.75, memory=0.5, encoder=0.0, decoder=0.0),
        memory=Memory(
            total_bytes=80 * GiB, used_bytes=10 * GiB, free_bytes=69 * GiB, reserved_bytes=1 * GiB,
            bar1_total_bytes=128 * GiB, bar1_used_bytes=1 * GiB, bar1_free_bytes=127 * GiB,
        ),
        thermal=Thermal(gpu_celsius=41.0, memory_celsius=38.0, fan_speed_ratio=NOT_SUPPORTED),
        power=Power(draw_watts=312.5, limit_watts=700.0, energy_joules=123456.789),
        clocks=Clocks(sm_hertz=1755 * MHZ, memory_hertz=2619 * MHZ, graphics_hertz=1755 * MHZ, event_reasons=0x4 | 0x20, performance_state=0),
        pcie=Pcie(generation=5, width=16, tx_bytes=1_000_000, rx_bytes=2_000_000, replay_count=0),
        ecc=Ecc(enabled=True, corrected_volatile=3, uncorrected_volatile=0, corrected_aggregate=10, uncorrected_aggregate=1),
        retired_pages=RetiredPages(single_bit_ecc=NOT_SUPPORTED, double_bit_ecc=NOT_SUPPORTED, pending=NOT_SUPPORTED),
        remapped_rows=RemappedRows(correctable=2, uncorrectable=0, pending=False, failure=False),
        nvlinks=tuple(make_nvlink(i) for i in range(link_count)),
        modes=Modes(compute_mode="default", persistence_mode=True, mig_mode_current=False, mig_mode_pending=False),
        processes=(GpuProcess(pid=4242, used_memory_bytes=9 * GiB, kind="compute"),),
        errors=(),
    )
    fields.update(overrides)
    return GpuSnapshot(**fields)


def make_lost_gpu(index: int = 0) -> GpuSnapshot:
    lost = Unavailable("gpu_lost")
    return make_gpu(
        index, lost=True, utilization=None, memory=None, thermal=None, power=None, clocks=None, pcie=None,
        ecc=None, retired_pages=None, remapped_rows=None, nvlinks=(), modes=None, processes=(),
        errors=(("memory", "GPU_IS_LOST"),),
        limits=GpuLimits(*([lost] * len(dataclasses.fields(GpuLimits)))),
    )


def make_snapshot(gpus: tuple[GpuSnapshot, ...] | None = None, **overrides: Any) -> NodeSnapshot:
    if gpus is None:
        gpus = (make_gpu(0), make_gpu(1))
    fields: dict[str, Any] = dict(
        sampled_at=SAMPLED_AT, duration_seconds=0.05, nvml_up=True, nvml_error="",
        driver=DriverInfo(driver_version="550.54.15", cuda_driver_version="12.4", nvml_version="12.550.54.15"),
        device_count=len(gpus), gpus=gpus,
    )
    fields.update(overrides)
    return NodeSnapshot(**fields)


def make_state(snapshot: NodeSnapshot | None = None, *, xids: dict | None = None) -> NodeState:
    state = NodeState()
    if snapshot is not None:
        state.publish_snapshot(snapshot, SamplerStats(cycles_total=7, failures_total=1, last_duration_seconds=0.05, last_cpu_seconds=0.01))
    if xids:
        state.xid_counts = MappingProxyType(dict(xids))
    return state


def samples(families) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """{(sample name, sorted labels): value} over the families a collector yielded."""
    out = {}
    for family in families:
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(families, name: str, **labels: str) -> float | None:
    """The value of the one sample ``name`` whose labels include ``labels`` (None if absent)."""
    found = [
        s.value for f in families for s in f.samples
        if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
    ]
    assert len(found) <= 1, f"{name}{labels} matched {len(found)} samples"
    return found[0] if found else None


def names(families) -> set[str]:
    return {s.name for f in families for s in f.samples}
