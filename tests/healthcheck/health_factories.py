"""Hand-built snapshots and inputs for the health-check tests: a healthy H100-like node, overridable.

A trimmed copy of tests/exporter/exporter_factories.py (test directories do not import each other
under pytest's prepend import mode), plus helpers to run a detector over a sequence of samples.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
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
    XidEvent,
)
from runtimekit.healthcheck.types import UNREAD, DetectorInput, Finding

GiB = 1024**3
MiB = 1024**2
MHZ = 1_000_000.0
T0 = 1_700_000_000.0  # 2023-11-14 22:13:20 UTC
STEP = 10.0  # sampler interval of the sequences below
LINKS = 4
NA = NOT_SUPPORTED
ERR = Unavailable("error", "NVML_ERROR_UNKNOWN")


def uuid_for(index: int) -> str:
    return f"GPU-0000000{index}-aaaa-bbbb-cccc-dddddddddddd"


def bus_for(index: int) -> str:
    return f"00000000:{0x18 + index:02X}:00.0"


def make_nvlink(link: int, **overrides: Any) -> NvLink:
    fields: dict[str, Any] = dict(
        link=link, active=True, crc_flit_errors=1, crc_data_errors=2, replay_errors=3, recovery_errors=0,
        tx_bytes=1024, rx_bytes=2048,
    )
    fields.update(overrides)
    return NvLink(**fields)


def make_gpu(index: int = 0, *, at: float = T0, link_count: int = LINKS, **overrides: Any) -> GpuSnapshot:
    """A healthy, busy Hopper GPU with one process; ``overrides`` replace GpuSnapshot fields."""
    fields: dict[str, Any] = dict(
        index=index,
        identity=GpuIdentity(
            uuid=uuid_for(index), name="NVIDIA H100 80GB HBM3", pci_bus_id=bus_for(index),
            serial=f"165432100{index}", vbios_version="96.00.74.00.01", board_part_number="692-2G520-0200-000",
            architecture="hopper", cuda_compute_capability="9.0",
        ),
        limits=GpuLimits(
            memory_total_bytes=80 * GiB, bar1_total_bytes=128 * GiB,
            sm_clock_max_hertz=1980 * MHZ, memory_clock_max_hertz=2619 * MHZ, graphics_clock_max_hertz=1980 * MHZ,
            temperature_slowdown_celsius=90.0, temperature_shutdown_celsius=92.0,
            temperature_gpu_max_celsius=87.0, temperature_memory_max_celsius=95.0,
            pcie_max_generation=5, pcie_max_width=16, nvlink_count=link_count,
        ),
        sampled_at=at,
        lost=False,
        utilization=Utilization(gpu=0.75, memory=0.5, encoder=0.0, decoder=0.0),
        memory=Memory(
            total_bytes=80 * GiB, used_bytes=10 * GiB, free_bytes=69 * GiB, reserved_bytes=1 * GiB,
            bar1_total_bytes=128 * GiB, bar1_used_bytes=1 * GiB, bar1_free_bytes=127 * GiB,
        ),
        thermal=Thermal(gpu_celsius=41.0, memory_celsius=38.0, fan_speed_ratio=NA),
        power=Power(draw_watts=312.5, limit_watts=700.0, energy_joules=123456.789),
        clocks=Clocks(sm_hertz=1755 * MHZ, memory_hertz=2619 * MHZ, graphics_hertz=1755 * MHZ,
                      event_reasons=0x4 | 0x20, performance_state=0),
        pcie=Pcie(generation=5, width=16, tx_bytes=1_000_000, rx_bytes=2_000_000, replay_count=0),
        ecc=Ecc(enabled=True, corrected_volatile=3, uncorrected_volatile=0, corrected_aggregate=10, uncorrected_aggregate=1),
        retired_pages=RetiredPages(single_bit_ecc=NA, double_bit_ecc=NA, pending=NA),
        remapped_rows=RemappedRows(correctable=2, uncorrectable=0, pending=False, failure=False),
        nvlinks=tuple(make_nvlink(i) for i in range(link_count)),
        modes=Modes(compute_mode="default", persistence_mode=True, mig_mode_current=False, mig_mode_pending=False),
        processes=(GpuProcess(pid=4242, used_memory_bytes=10 * GiB - 200 * MiB, kind="compute"),),
        errors=(),
    )
    fields.update(overrides)
    return GpuSnapshot(**fields)


def with_(gpu: GpuSnapshot, group: str, /, **changes: Any) -> GpuSnapshot:
    """``gpu`` with fields of one reading group changed: ``with_(g, "ecc", uncorrected_volatile=2)``."""
    return dataclasses.replace(gpu, **{group: dataclasses.replace(getattr(gpu, group), **changes)})


def links(gpu: GpuSnapshot, /, **changes: Any) -> GpuSnapshot:
    """``gpu`` with every NVLink changed; a callable value gets the link number."""
    return dataclasses.replace(gpu, nvlinks=tuple(
        dataclasses.replace(link, **{k: (v(link.link) if callable(v) else v) for k, v in changes.items()})
        for link in gpu.nvlinks
    ))


def make_lost_gpu(index: int = 0, *, at: float = T0) -> GpuSnapshot:
    return make_gpu(
        index, at=at, lost=True, utilization=None, memory=None, thermal=None, power=None, clocks=None, pcie=None,
        ecc=None, retired_pages=None, remapped_rows=None, nvlinks=(), modes=None, processes=(),
        errors=(("device", "NVML_ERROR_GPU_IS_LOST"),),
    )


def make_snapshot(*gpus: GpuSnapshot, at: float | None = None, **overrides: Any) -> NodeSnapshot:
    if not gpus:
        gpus = (make_gpu(0), make_gpu(1))
    fields: dict[str, Any] = dict(
        sampled_at=at if at is not None else gpus[0].sampled_at, duration_seconds=0.05, nvml_up=True, nvml_error="",
        driver=DriverInfo(driver_version="550.54.15", cuda_driver_version="12.4", nvml_version="12.550.54.15"),
        device_count=len(gpus), gpus=tuple(gpus),
    )
    fields.update(overrides)
    return NodeSnapshot(**fields)


def nvml_down(at: float = T0) -> NodeSnapshot:
    return make_snapshot(make_gpu(0, at=at), nvml_up=False, nvml_error="NVML_ERROR_DRIVER_NOT_LOADED",
                         driver=None, device_count=0, gpus=(), sampled_at=at)


def xid(code: int, gpu: int = 0, at: float = T0, **extra: Any) -> XidEvent:
    return XidEvent(gpu_index=gpu, uuid=uuid_for(gpu), xid=code, received_at=at, **extra)


def make_input(snapshot: NodeSnapshot | None, previous: NodeSnapshot | None = None, *,
               xids: Iterable[XidEvent] = (), expected_gpus: int | None = None, now: float | None = None,
               config: Mapping[str, Any] | None = None) -> DetectorInput:
    if now is None:
        now = snapshot.sampled_at if snapshot is not None else T0
    if expected_gpus is None:
        expected_gpus = len(snapshot.gpus) if snapshot is not None and snapshot.nvml_up else 2
    return DetectorInput(now=now, snapshot=snapshot, previous=previous, xids=tuple(xids),
                         expected_gpus=expected_gpus, config=dict(config or {}))


def run_sequence(detector: Any, snapshots: Iterable[NodeSnapshot], *, config: Mapping[str, Any] | None = None,
                 xids: Mapping[int, Iterable[XidEvent]] | None = None, expected_gpus: int | None = None,
                 state: Any = None) -> tuple[Any, list[list[Finding]]]:
    """Run ``detector`` over the snapshots in order (XIDs by sample number); findings per sample."""
    per_sample: list[list[Finding]] = []
    previous = None
    for number, snapshot in enumerate(snapshots):
        data = make_input(snapshot, previous, xids=(xids or {}).get(number, ()), expected_gpus=expected_gpus,
                          config=config)
        state, found = detector(state, data)
        per_sample.append(found)
        previous = snapshot
    return state, per_sample


def raised(found: Iterable[Finding]) -> list[Finding]:
    """The findings that raise a fault: not the marks (``Finding.hold``)."""
    return [f for f in found if not f.hold]


def faults(found: Iterable[Finding]) -> set[tuple[int | None, str]]:
    """(GPU index, fault) of each finding raised; None for a node-level one."""
    return {(f.gpu_index, f.fault) for f in raised(found)}


def marked(found: Iterable[Finding], hold: str = UNREAD) -> set[tuple[int | None, str]]:
    """(GPU index, fault) of each mark of kind ``hold`` (``Finding.hold``)."""
    return {(f.gpu_index, f.fault) for f in found if f.hold == hold}


def one(found: Iterable[Finding], fault: str, gpu: int | None = 0) -> Finding:
    """The one finding of ``fault`` on GPU ``gpu`` (None: the node) that raises it."""
    matches = [f for f in raised(found) if f.fault == fault and f.gpu_index == gpu]
    assert len(matches) == 1, f"{fault} on {'the node' if gpu is None else f'GPU {gpu}'}: {matches}"
    return matches[0]
