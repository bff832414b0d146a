"""Reads GPUs through NVML into immutable snapshots, converting to base units at the boundary.

``NodeReader.sample()`` is one sampling cycle: blocking, for an executor thread. Identity is read
once per device at discovery; limits (max clocks, thresholds, link maxima) on a slow cadence;
everything else every cycle. A re-read of identity or limits keeps the last good value of each
field that failed to read (and reads it again next cycle), so a failing GPU keeps them. A GPU
that answers NVML_ERROR_GPU_IS_LOST is reported lost and the others are read as usual.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import pynvml

from runtimekit.gpu import fields
from runtimekit.gpu.convert import MHZ, MILLI, bus_id
from runtimekit.gpu.convert import map_reading as _map
from runtimekit.gpu.convert import nvml_text as _text
from runtimekit.gpu.errors import LinkErrorCounts, read_ecc, read_nvlinks, read_remapped_rows, read_retired_pages
from runtimekit.gpu.mig_devices import MigDeviceReader
from runtimekit.gpu.nvml import GpuLostError, NvmlInitError, NvmlSession, Variant, memory_v2_args
from runtimekit.gpu.processes import read_processes
from runtimekit.gpu.reader_records import complete, failed_readings, keep_good, limits_read_at, unreadable_snapshot
from runtimekit.gpu.types import (
    NOT_SUPPORTED,
    Clocks,
    DriverInfo,
    GpuIdentity,
    GpuLimits,
    GpuProcess,
    GpuSnapshot,
    Memory,
    Modes,
    NodeSnapshot,
    Pcie,
    Power,
    Reading,
    Thermal,
    Unavailable,
    Utilization,
    is_available,
)

log = logging.getLogger(__name__)


ARCHITECTURES = {
    pynvml.NVML_DEVICE_ARCH_KEPLER: "kepler",
    pynvml.NVML_DEVICE_ARCH_MAXWELL: "maxwell",
    pynvml.NVML_DEVICE_ARCH_PASCAL: "pascal",
    pynvml.NVML_DEVICE_ARCH_VOLTA: "volta",
    pynvml.NVML_DEVICE_ARCH_TURING: "turing",
    pynvml.NVML_DEVICE_ARCH_AMPERE: "ampere",
    pynvml.NVML_DEVICE_ARCH_ADA: "ada",
    pynvml.NVML_DEVICE_ARCH_HOPPER: "hopper",
    pynvml.NVML_DEVICE_ARCH_BLACKWELL: "blackwell",
}

COMPUTE_MODES = {
    pynvml.NVML_COMPUTEMODE_DEFAULT: "default",
    pynvml.NVML_COMPUTEMODE_EXCLUSIVE_THREAD: "exclusive_thread",
    pynvml.NVML_COMPUTEMODE_PROHIBITED: "prohibited",
    pynvml.NVML_COMPUTEMODE_EXCLUSIVE_PROCESS: "exclusive_process",
}

TEMPERATURE = (
    Variant("nvmlDeviceGetTemperatureV", lambda h: ((h, pynvml.NVML_TEMPERATURE_GPU), {})),
    Variant("nvmlDeviceGetTemperature", lambda h: ((h, pynvml.NVML_TEMPERATURE_GPU), {})),
)
CLOCK_EVENT_REASONS = (
    Variant("nvmlDeviceGetCurrentClocksEventReasons"),
    Variant("nvmlDeviceGetCurrentClocksThrottleReasons"),
)
MEMORY_INFO = (
    Variant("nvmlDeviceGetMemoryInfo", memory_v2_args),
    Variant("nvmlDeviceGetMemoryInfo"),
)
CUDA_DRIVER_VERSION = (
    Variant("nvmlSystemGetCudaDriverVersion_v2"),
    Variant("nvmlSystemGetCudaDriverVersion"),
)


@dataclass(slots=True)
class Device:
    """A discovered GPU: its handle and what rarely changes."""

    index: int
    handle: Any
    identity: GpuIdentity
    limits: GpuLimits
    limits_read_at: float  # Unix seconds of the last complete limits read (-inf: none yet)
    lost: bool = False
    processes: dict[tuple[Any, ...], GpuProcess] = field(default_factory=dict)  # read_processes' ``known``
    link_errors: LinkErrorCounts | None = None  # read_nvlinks' ``last``


class NodeReader:
    """Samples every GPU of the node; keeps device handles between cycles."""

    def __init__(
        self,
        session: NvmlSession | None = None,
        *,
        limits_refresh_seconds: float = 60.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.session = session or NvmlSession()
        self.limits_refresh_seconds = limits_refresh_seconds
        self.clock = clock
        self._devices: dict[int, Device] = {}
        self._driver: DriverInfo | None = None
        self._mig = MigDeviceReader(self.session)

    # -- one cycle -----------------------------------------------------------------------------

    def sample(self) -> NodeSnapshot:
        """One sampling cycle. Never raises for NVML trouble: it is reported in the snapshot."""
        started_wall = self.clock()
        started = time.perf_counter()
        try:
            self.session.init()
        except NvmlInitError as error:
            self._devices.clear()
            self._driver = None
            return NodeSnapshot(started_wall, time.perf_counter() - started, False, str(error), None, 0, ())
        if self._driver is None:
            self._driver = self._read_driver()
        count = self.session.call("nvmlDeviceGetCount")
        if not is_available(count):
            return NodeSnapshot(
                started_wall, time.perf_counter() - started, False, f"device count: {count.detail or count.reason}",
                self._driver, 0, (),
            )
        gpus = tuple(self._sample_gpu(index, started_wall) for index in range(count))
        return NodeSnapshot(started_wall, time.perf_counter() - started, True, "", self._driver, count, gpus)

    def close(self) -> None:
        self._devices.clear()
        self.session.shutdown()

    # -- discovery -----------------------------------------------------------------------------

    def _read_driver(self) -> DriverInfo:
        cuda = self.session.call_versioned("nvmlSystemGetCudaDriverVersion", CUDA_DRIVER_VERSION)
        return DriverInfo(
            driver_version=_map(self.session.call("nvmlSystemGetDriverVersion"), _text),
            cuda_driver_version=_map(cuda, lambda v: f"{v // 1000}.{v % 1000 // 10}"),
            nvml_version=_map(self.session.call("nvmlSystemGetNVMLVersion"), _text),
        )

    def _device(self, index: int, now: float) -> Device | Unavailable:
        device = self._devices.get(index)
        if device is None:
            handle = self.session.call("nvmlDeviceGetHandleByIndex", index)
            if not is_available(handle):
                return handle
            limits = self._read_limits(handle)
            device = Device(index, handle, self._read_identity(handle), limits, limits_read_at(limits, now))
            self._devices[index] = device
            log.info("GPU %d discovered: %s %s", index, device.identity.name, device.identity.uuid)
        else:
            if not complete(device.identity):
                device.identity = keep_good(device.identity, self._read_identity(device.handle))
            if now - device.limits_read_at >= self.limits_refresh_seconds:
                self._refresh_limits(device, now)
        return device

    def _refresh_limits(self, device: Device, now: float) -> None:
        """Read the limits again, keeping the last good value of each field that failed this time.

        ``limits_read_at`` moves only on a complete read, so a failed field is read again next
        cycle (``now``: Unix seconds of this cycle); GPU lost raises before anything is replaced.
        """
        fresh = self._read_limits(device.handle)
        device.limits = keep_good(device.limits, fresh)
        device.limits_read_at = limits_read_at(fresh, now, device.limits_read_at)

    def _read_identity(self, handle: Any) -> GpuIdentity:
        call = self.session.call
        uuid = call("nvmlDeviceGetUUID", handle)
        pci = call("nvmlDeviceGetPciInfo", handle)
        capability = call("nvmlDeviceGetCudaComputeCapability", handle)
        return GpuIdentity(
            uuid=_map(uuid, _text),
            name=_map(call("nvmlDeviceGetName", handle), _text),
            pci_bus_id=_map(pci, lambda p: bus_id(p.busId)),
            serial=_map(call("nvmlDeviceGetSerial", handle), _text),
            vbios_version=_map(call("nvmlDeviceGetVbiosVersion", handle), _text),
            board_part_number=_map(call("nvmlDeviceGetBoardPartNumber", handle), _text),
            architecture=_map(call("nvmlDeviceGetArchitecture", handle), lambda a: ARCHITECTURES.get(a, f"arch{a}")),
            cuda_compute_capability=_map(capability, lambda c: f"{c[0]}.{c[1]}"),
        )

    def _read_limits(self, handle: Any) -> GpuLimits:
        call = self.session.call
        memory = self.session.call_versioned("nvmlDeviceGetMemoryInfo", MEMORY_INFO, handle)
        bar1 = call("nvmlDeviceGetBAR1MemoryInfo", handle)
        link_count = call("nvmlDeviceGetFieldValues", handle, [fields.NVLINK_LINK_COUNT])
        link_count = _map(link_count, lambda answers: fields.parse(answers).get(fields.NVLINK_LINK_COUNT))

        def threshold(kind: int) -> Reading[float]:
            return _map(call("nvmlDeviceGetTemperatureThreshold", handle, kind), float)

        def max_clock(kind: int) -> Reading[float]:
            return _map(call("nvmlDeviceGetMaxClockInfo", handle, kind), lambda mhz: mhz * MHZ)

        return GpuLimits(
            memory_total_bytes=_map(memory, lambda m: int(m.total)),
            bar1_total_bytes=_map(bar1, lambda b: int(b.bar1Total)),
            sm_clock_max_hertz=max_clock(pynvml.NVML_CLOCK_SM),
            memory_clock_max_hertz=max_clock(pynvml.NVML_CLOCK_MEM),
            graphics_clock_max_hertz=max_clock(pynvml.NVML_CLOCK_GRAPHICS),
            temperature_slowdown_celsius=threshold(pynvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN),
            temperature_shutdown_celsius=threshold(pynvml.NVML_TEMPERATURE_THRESHOLD_SHUTDOWN),
            temperature_gpu_max_celsius=threshold(pynvml.NVML_TEMPERATURE_THRESHOLD_GPU_MAX),
            temperature_memory_max_celsius=threshold(pynvml.NVML_TEMPERATURE_THRESHOLD_MEM_MAX),
            pcie_max_generation=call("nvmlDeviceGetMaxPcieLinkGeneration", handle),
            pcie_max_width=call("nvmlDeviceGetMaxPcieLinkWidth", handle),
            nvlink_count=_map(link_count, int),
            inforom_valid=_inforom_valid(call("nvmlDeviceValidateInforom", handle)),
        )

    # -- per cycle -----------------------------------------------------------------------------

    def _sample_gpu(self, index: int, now: float) -> GpuSnapshot:
        try:
            device = self._device(index, now)
            if isinstance(device, Unavailable):
                return unreadable_snapshot(index, now, device)
            snapshot = self._read_dynamic(device, now)
        except GpuLostError as lost:
            return self._lost(index, now, str(lost))
        if device.lost:
            log.warning("GPU %d (%s) answers NVML again", index, device.identity.uuid)
            device.lost = False
        return snapshot

    def _lost(self, index: int, now: float, where: str) -> GpuSnapshot:
        device = self._devices.get(index)
        if device is not None and not device.lost:
            log.error("GPU %d (%s) is lost: NVML answered GPU_IS_LOST in %s", index, device.identity.uuid, where)
        if device is None:
            return unreadable_snapshot(index, now, Unavailable("gpu_lost", where), lost=True)
        device.lost = True
        return GpuSnapshot(
            index, device.identity, device.limits, now, True,
            None, None, None, None, None, None, None, None, None, (), None, (), (("device", "NVML_ERROR_GPU_IS_LOST"),),
        )

    def _read_dynamic(self, device: Device, now: float) -> GpuSnapshot:
        call = self.session.call
        handle = device.handle
        batch = call("nvmlDeviceGetFieldValues", handle, fields.request(_count(device.limits.nvlink_count)))
        values = fields.answers(batch)

        rates = call("nvmlDeviceGetUtilizationRates", handle)
        utilization = Utilization(
            gpu=_map(rates, lambda r: r.gpu / 100.0),
            memory=_map(rates, lambda r: r.memory / 100.0),
            encoder=_map(call("nvmlDeviceGetEncoderUtilization", handle), lambda u: u[0] / 100.0),
            decoder=_map(call("nvmlDeviceGetDecoderUtilization", handle), lambda u: u[0] / 100.0),
        )
        memory_info = self.session.call_versioned("nvmlDeviceGetMemoryInfo", MEMORY_INFO, handle)
        bar1 = call("nvmlDeviceGetBAR1MemoryInfo", handle)
        memory = Memory(
            total_bytes=_map(memory_info, lambda m: int(m.total)),
            used_bytes=_map(memory_info, lambda m: int(m.used)),
            free_bytes=_map(memory_info, lambda m: int(m.free)),
            reserved_bytes=_map(memory_info, _reserved),
            bar1_total_bytes=_map(bar1, lambda b: int(b.bar1Total)),
            bar1_used_bytes=_map(bar1, lambda b: int(b.bar1Used)),
            bar1_free_bytes=_map(bar1, lambda b: int(b.bar1Free)),
        )
        thermal = Thermal(
            gpu_celsius=_map(self.session.call_versioned("nvmlDeviceGetTemperature", TEMPERATURE, handle), float),
            memory_celsius=_map(values.get(fields.MEMORY_TEMP), float),
            fan_speed_ratio=_map(call("nvmlDeviceGetFanSpeed", handle), lambda pct: pct / 100.0),
        )
        power = Power(
            draw_watts=_map(call("nvmlDeviceGetPowerUsage", handle), lambda mw: mw * MILLI),
            limit_watts=_map(call("nvmlDeviceGetEnforcedPowerLimit", handle), lambda mw: mw * MILLI),
            energy_joules=_map(call("nvmlDeviceGetTotalEnergyConsumption", handle), lambda mj: mj * MILLI),
        )
        clocks = Clocks(
            sm_hertz=_map(call("nvmlDeviceGetClockInfo", handle, pynvml.NVML_CLOCK_SM), lambda mhz: mhz * MHZ),
            memory_hertz=_map(call("nvmlDeviceGetClockInfo", handle, pynvml.NVML_CLOCK_MEM), lambda mhz: mhz * MHZ),
            graphics_hertz=_map(call("nvmlDeviceGetClockInfo", handle, pynvml.NVML_CLOCK_GRAPHICS), lambda mhz: mhz * MHZ),
            event_reasons=_map(self.session.call_versioned("nvmlDeviceGetCurrentClocksEventReasons", CLOCK_EVENT_REASONS, handle), int),
            performance_state=_map(call("nvmlDeviceGetPerformanceState", handle), _performance_state),
        )
        pcie = Pcie(
            generation=call("nvmlDeviceGetCurrPcieLinkGeneration", handle),
            width=call("nvmlDeviceGetCurrPcieLinkWidth", handle),
            tx_bytes=_map(values.get(fields.PCIE_TX_BYTES), int),
            rx_bytes=_map(values.get(fields.PCIE_RX_BYTES), int),
            replay_count=call("nvmlDeviceGetPcieReplayCounter", handle),
        )
        processes, process_failure = read_processes(self.session, handle, now, device.processes)
        modes = self._read_modes(handle)
        nvlinks, device.link_errors = read_nvlinks(
            self.session, handle, _count(device.limits.nvlink_count), values, device.link_errors, now)
        mig_devices, mig_failure = self._mig.read(device.index, handle, device.identity, modes.mig_mode_current)
        snapshot = GpuSnapshot(
            index=device.index,
            identity=device.identity,
            limits=device.limits,
            sampled_at=now,
            lost=False,
            utilization=utilization,
            memory=memory,
            thermal=thermal,
            power=power,
            clocks=clocks,
            pcie=pcie,
            ecc=read_ecc(self.session, handle),
            retired_pages=read_retired_pages(self.session, handle),
            remapped_rows=read_remapped_rows(self.session, handle),
            nvlinks=nvlinks,
            modes=modes,
            processes=processes,
            recovery_action=_map(values.get(fields.RECOVERY_ACTION), _recovery_action),
            mig_devices=mig_devices,
        )
        return replace(snapshot, errors=failed_readings(snapshot, ("processes", process_failure), ("mig_devices", mig_failure)))

    def _read_modes(self, handle: Any) -> Modes:
        call = self.session.call
        mig = call("nvmlDeviceGetMigMode", handle)
        return Modes(
            compute_mode=_map(call("nvmlDeviceGetComputeMode", handle), lambda m: COMPUTE_MODES.get(m, f"mode{m}")),
            persistence_mode=_map(call("nvmlDeviceGetPersistenceMode", handle), bool),
            mig_mode_current=_map(mig, lambda m: bool(m[0])),
            mig_mode_pending=_map(mig, lambda m: bool(m[1])),
        )


def _performance_state(value: int) -> Reading[int]:
    """A P-state, 0 (max performance) .. 15 (min) (NVML_PSTATE_0..15). NVML_PSTATE_UNKNOWN (32), the
    driver's "cannot tell" (nvidia-smi: Unknown), is not supported; any other value an error."""
    if value == pynvml.NVML_PSTATE_UNKNOWN:
        return Unavailable("not_supported", "nvmlDeviceGetPerformanceState: NVML_PSTATE_UNKNOWN")
    return int(value) if value in range(16) else Unavailable("error", f"nvmlDeviceGetPerformanceState: unknown nvmlPstates_t {value}")


def _inforom_valid(answer: None | Unavailable) -> Reading[bool]:
    """nvmlDeviceValidateInforom answers nothing when the InfoROM's checksum holds, and
    NVML_ERROR_CORRUPTED_INFOROM when it does not: a reading, not a failed call."""
    if isinstance(answer, Unavailable):
        return False if (answer.detail or "").endswith("NVML_ERROR_CORRUPTED_INFOROM") else answer
    return True


def _recovery_action(value: float | int) -> str:
    return fields.RECOVERY_ACTIONS.get(int(value), f"action{int(value)}")


def _reserved(memory: Any) -> Reading[int]:
    """``reserved`` exists only in the v2 memory struct (nvmlDeviceGetMemoryInfo_v2)."""
    return int(memory.reserved) if hasattr(memory, "reserved") else NOT_SUPPORTED


def _count(value: Reading[int]) -> int:
    return int(value) if is_available(value) else 0
