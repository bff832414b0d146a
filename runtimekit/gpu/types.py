"""Immutable snapshots of what NVML reported: the contract between the NVML layer and everyone else.

Every value is in base units (bytes, seconds, watts, joules, celsius, hertz, ratios 0..1) and was
converted at the NVML boundary (``runtimekit.gpu.reader``). A reading the device cannot give is an
``Unavailable`` value, never 0 or -1: consumers omit the sample (see ``is_available``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeAlias, TypeVar

from typing_extensions import TypeIs

if TYPE_CHECKING:  # runtimekit.state imports this module: a runtime import would be circular
    from runtimekit.state.refs import MigRef

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Unavailable:
    """A reading NVML could not give.

    ``reason`` is one of ``not_supported`` (NVML_ERROR_NOT_SUPPORTED), ``no_permission``,
    ``function_not_found`` (the driver lacks the symbol), ``gpu_lost`` or ``error`` (any other
    NVML error; ``detail`` names it).
    """

    reason: str
    detail: str = ""

    def __bool__(self) -> bool:
        return False


NOT_SUPPORTED = Unavailable("not_supported")
#: The reasons that are real errors: "not supported" and "function not found" are facts about the
#: device or the driver, not failures ("gpu_lost" is the lost-card path's own).
REAL_ERRORS = ("error", "no_permission")


def prefer(sampled: Reading[T] | None, fallback: Reading[T]) -> Reading[T]:
    """This cycle's reading, or ``fallback`` (the value read at discovery) when this cycle could
    not read it (Unavailable) or has no such reading (None)."""
    return sampled if sampled is not None and is_available(sampled) else fallback


def failed(value: object) -> bool:
    """True for a reading that failed with a real NVML error (``REAL_ERRORS``), not a fact such as
    "not supported"."""
    return isinstance(value, Unavailable) and value.reason in REAL_ERRORS

#: The architectures ``GpuIdentity.architecture`` names (NVML nvmlDeviceGetArchitecture,
#: NVML_DEVICE_ARCH_*, in lower case: ``runtimekit.gpu.reader.ARCHITECTURES``); a value NVML adds
#: later reads "arch<N>".
ARCHITECTURE_NAMES = ("kepler", "maxwell", "pascal", "volta", "turing", "ampere", "ada", "hopper", "blackwell")

Reading: TypeAlias = T | Unavailable  # a reading, or why there is none


def is_available(value: T | Unavailable) -> TypeIs[T]:
    """True when ``value`` is a real reading (not an ``Unavailable``); a type guard, so that after
    ``if is_available(x)`` the checker knows ``x`` is the reading itself."""
    return not isinstance(value, Unavailable)


@dataclass(frozen=True, slots=True)
class GpuIdentity:
    """Static identity of one physical GPU, read once when the device is discovered."""

    uuid: Reading[str]  # "GPU-…"; Unavailable when the driver could not say (no placeholder is made up)
    name: Reading[str]
    pci_bus_id: Reading[str]  # domain:bus:device.function, the one spelling of runtimekit.state.refs (0000:05:00.0)
    serial: Reading[str]
    vbios_version: Reading[str]
    board_part_number: Reading[str]
    architecture: Reading[str]  # one of ARCHITECTURE_NAMES ("ampere", "hopper"), else "arch<N>"
    cuda_compute_capability: Reading[str]  # "9.0"


@dataclass(frozen=True, slots=True)
class GpuLimits:
    """Values that change rarely (read at discovery and refreshed on a slow cadence)."""

    memory_total_bytes: Reading[int]
    bar1_total_bytes: Reading[int]
    sm_clock_max_hertz: Reading[float]
    memory_clock_max_hertz: Reading[float]
    graphics_clock_max_hertz: Reading[float]
    temperature_slowdown_celsius: Reading[float]
    temperature_shutdown_celsius: Reading[float]
    temperature_gpu_max_celsius: Reading[float]  # max operating temperature of the GPU
    temperature_memory_max_celsius: Reading[float]  # max operating temperature of the HBM
    pcie_max_generation: Reading[int]  # the system-limited maximum (nvmlDeviceGetMaxPcieLinkGeneration)
    pcie_max_width: Reading[int]  # lanes
    nvlink_count: Reading[int]  # links the device has (NVML_FI_DEV_NVLINK_LINK_COUNT)
    # The InfoROM passed its checksum (nvmlDeviceValidateInforom succeeded); False when NVML answered
    # NVML_ERROR_CORRUPTED_INFOROM. The InfoROM holds the ECC and row-remap records and the config.
    inforom_valid: Reading[bool] = NOT_SUPPORTED


@dataclass(frozen=True, slots=True)
class Utilization:
    """Busy ratios 0..1 over NVML's last sample period."""

    gpu: Reading[float]  # a kernel was running (nvmlDeviceGetUtilizationRates.gpu / 100)
    memory: Reading[float]  # memory controller busy (… .memory / 100)
    encoder: Reading[float]
    decoder: Reading[float]


@dataclass(frozen=True, slots=True)
class Memory:
    """Framebuffer and BAR1 memory in bytes (nvmlDeviceGetMemoryInfo_v2, nvmlDeviceGetBAR1MemoryInfo)."""

    total_bytes: Reading[int]
    used_bytes: Reading[int]
    free_bytes: Reading[int]
    reserved_bytes: Reading[int]  # held by the driver and firmware
    bar1_total_bytes: Reading[int]
    bar1_used_bytes: Reading[int]
    bar1_free_bytes: Reading[int]


@dataclass(frozen=True, slots=True)
class Thermal:
    gpu_celsius: Reading[float]
    memory_celsius: Reading[float]  # HBM (NVML_FI_DEV_MEMORY_TEMP)
    fan_speed_ratio: Reading[float]  # 0..1 of the maximum; not supported on passively cooled SXM boards


@dataclass(frozen=True, slots=True)
class Power:
    draw_watts: Reading[float]  # nvmlDeviceGetPowerUsage, mW -> W
    limit_watts: Reading[float]  # nvmlDeviceGetEnforcedPowerLimit, mW -> W
    energy_joules: Reading[float]  # nvmlDeviceGetTotalEnergyConsumption, mJ -> J, since driver load


@dataclass(frozen=True, slots=True)
class Clocks:
    sm_hertz: Reading[float]
    memory_hertz: Reading[float]
    graphics_hertz: Reading[float]
    event_reasons: Reading[int]  # bitmask of nvmlClocksEventReason* (throttle reasons)
    performance_state: Reading[int]  # P-state 0 (max) .. 15 (min)


@dataclass(frozen=True, slots=True)
class Pcie:
    generation: Reading[int]  # current link generation
    width: Reading[int]  # current link width, lanes
    tx_bytes: Reading[int]  # counter since driver load (NVML_FI_DEV_PCIE_COUNT_TX_BYTES)
    rx_bytes: Reading[int]
    replay_count: Reading[int]  # counter (nvmlDeviceGetPcieReplayCounter)


@dataclass(frozen=True, slots=True)
class Ecc:
    """ECC error counts (nvmlDeviceGetTotalEccErrors): volatile since driver load, aggregate for life."""

    enabled: Reading[bool]
    corrected_volatile: Reading[int]
    uncorrected_volatile: Reading[int]
    corrected_aggregate: Reading[int]
    uncorrected_aggregate: Reading[int]


@dataclass(frozen=True, slots=True)
class RetiredPages:
    """Dynamic page retirement (pre-Ampere; not supported where row remapping replaced it)."""

    single_bit_ecc: Reading[int]
    double_bit_ecc: Reading[int]
    pending: Reading[bool]


@dataclass(frozen=True, slots=True)
class RemappedRows:
    """Row remapping (Ampere and later, nvmlDeviceGetRemappedRows)."""

    correctable: Reading[int]
    uncorrectable: Reading[int]
    pending: Reading[bool]  # a remap waits for a GPU reset to take effect
    failure: Reading[bool]  # a remap ever failed


@dataclass(frozen=True, slots=True)
class NvLink:
    """One NVLink of a GPU; error counters from nvmlDeviceGetNvLinkErrorCounter, bytes from field values."""

    link: int
    active: Reading[bool]
    crc_flit_errors: Reading[int]
    crc_data_errors: Reading[int]
    replay_errors: Reading[int]
    recovery_errors: Reading[int]
    tx_bytes: Reading[int]  # data payload counter (NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, KiB -> bytes)
    rx_bytes: Reading[int]


@dataclass(frozen=True, slots=True)
class Modes:
    compute_mode: Reading[str]  # "default", "exclusive_thread", "prohibited", "exclusive_process"
    persistence_mode: Reading[bool]
    mig_mode_current: Reading[bool]
    mig_mode_pending: Reading[bool]


@dataclass(frozen=True, slots=True)
class GpuProcess:
    """A process with a context on a GPU (nvmlDeviceGet{Compute,Graphics}RunningProcesses)."""

    pid: int  # host PID namespace: NVML is PID-namespace unaware
    used_memory_bytes: Reading[int]
    kind: str  # "compute" or "graphics"
    gpu_instance_id: Reading[int] = field(default=NOT_SUPPORTED)
    compute_instance_id: Reading[int] = field(default=NOT_SUPPORTED)
    # Busy ratios 0..1 over the last second (nvmlDeviceGetProcessUtilization, % -> ratio); 0 for a
    # process with no sample in that second; Unavailable where NVML cannot tell (e.g. MIG).
    sm_utilization: Reading[float] = field(default=NOT_SUPPORTED)
    memory_utilization: Reading[float] = field(default=NOT_SUPPORTED)
    encoder_utilization: Reading[float] = field(default=NOT_SUPPORTED)
    decoder_utilization: Reading[float] = field(default=NOT_SUPPORTED)


@dataclass(frozen=True, slots=True)
class MigDevice:
    """One MIG device of a GPU in MIG mode: a compute instance inside a GPU instance.

    Found through nvmlDeviceGetMigDeviceHandleByIndex on the parent. ``ref`` names it (parent GPU,
    GPU and compute instance ids from nvmlDeviceGetGpuInstanceId / ComputeInstanceId, its "MIG-…"
    UUID from nvmlDeviceGetUUID on the MIG handle). The profile is its GPU instance's
    (nvmlGpuInstanceGetInfo profileId -> nvmlDeviceGetGpuInstanceProfileInfoByIdV). Memory is
    nvmlDeviceGetMemoryInfo on the MIG handle: the GPU instance's, shared by its compute instances.
    There is no utilization: NVML cannot attribute it to a MIG device (MIG User Guide), so none
    is read and none is exported.
    """

    ref: MigRef
    index: int  # position in nvmlDeviceGetMigDeviceHandleByIndex
    profile: Reading[str]  # GPU instance profile name, "3g.40gb"
    profile_id: Reading[int]  # GPU instance profile id (19, 20, 15, 14, 9, 5, 0)
    placement_start: Reading[int]  # first memory slice of the GPU instance (0..7)
    compute_slices: Reading[int]  # the GPU instance's compute slices (of 7 on A100/H100/H200)
    multiprocessors: Reading[int]  # SMs of the GPU instance's profile
    memory_total_bytes: Reading[int]
    memory_used_bytes: Reading[int]

    @property
    def uuid(self) -> str:
        return self.ref.uuid

    @property
    def gpu_instance_id(self) -> int:
        return self.ref.gpu_instance_id

    @property
    def compute_instance_id(self) -> int:
        return self.ref.compute_instance_id


@dataclass(frozen=True, slots=True)
class GpuSnapshot:
    """Everything sampled from one GPU at one moment.

    ``lost`` is True once NVML answered GPU_IS_LOST for this device; the other fields then hold
    what could still be read (usually nothing). ``errors`` lists (reading name, NVML error) for
    readings that failed with a real error — "not supported" and "function not found" are facts
    of the device, not errors, and are not listed — for the self-metrics and logs.
    """

    index: int
    identity: GpuIdentity
    limits: GpuLimits
    sampled_at: float  # unix seconds
    lost: bool
    utilization: Utilization | None
    memory: Memory | None
    thermal: Thermal | None
    power: Power | None
    clocks: Clocks | None
    pcie: Pcie | None
    ecc: Ecc | None
    retired_pages: RetiredPages | None
    remapped_rows: RemappedRows | None
    nvlinks: tuple[NvLink, ...]
    modes: Modes | None
    processes: tuple[GpuProcess, ...]
    errors: tuple[tuple[str, str], ...] = ()
    # The recovery the driver asks for ("none", "gpu_reset", "node_reboot", "drain_p2p",
    # "drain_and_reset", ...; NVML_FI_DEV_GET_GPU_RECOVERY_ACTION, set with XID 154); R570+ drivers.
    recovery_action: Reading[str] = NOT_SUPPORTED
    # The MIG devices, by NVML index, of a GPU in MIG mode (``modes.mig_mode_current``); () otherwise.
    mig_devices: tuple[MigDevice, ...] = ()

    @property
    def uuid(self) -> Reading[str]:
        return self.identity.uuid

    @property
    def mig_enabled(self) -> bool:
        """True when MIG mode is in effect (the current mode, not a pending one)."""
        return self.modes is not None and self.modes.mig_mode_current is True

    @property
    def memory_total_bytes(self) -> Reading[int]:
        """The framebuffer's size in bytes: this cycle's nvmlDeviceGetMemoryInfo_v2 total, or the
        size read at discovery (``GpuLimits.memory_total_bytes``) when this cycle could not read it."""
        return prefer(self.memory.total_bytes if self.memory is not None else None, self.limits.memory_total_bytes)

    @property
    def bar1_total_bytes(self) -> Reading[int]:
        """The BAR1 aperture's size in bytes, this cycle's or, when it could not read it, discovery's."""
        return prefer(self.memory.bar1_total_bytes if self.memory is not None else None, self.limits.bar1_total_bytes)

    def mig_device(self, gpu_instance_id: Reading[int], compute_instance_id: Reading[int]) -> MigDevice | None:
        """The MIG device of these instance ids (a process's, an XID's), None when there is none."""
        return next(
            (d for d in self.mig_devices
             if d.gpu_instance_id == gpu_instance_id and d.compute_instance_id == compute_instance_id),
            None,
        )


@dataclass(frozen=True, slots=True)
class XidEvent:
    """One XID the driver reported through nvmlEventSetWait."""

    gpu_index: int
    uuid: str
    xid: int
    received_at: float  # unix seconds, when the agent's event thread got it
    gpu_instance_id: int | None = None
    compute_instance_id: int | None = None


@dataclass(frozen=True, slots=True)
class DriverInfo:
    driver_version: Reading[str]
    cuda_driver_version: Reading[str]  # "12.4"
    nvml_version: Reading[str]


@dataclass(frozen=True, slots=True)
class NodeSnapshot:
    """One sampling cycle of the whole node.

    ``nvml_up`` is False when NVML could not be initialised (``nvml_error`` says why); ``gpus``
    is then empty. ``device_count`` is what nvmlDeviceGetCount answered.
    """

    sampled_at: float  # unix seconds at the start of the cycle
    duration_seconds: float  # wall time the cycle took
    nvml_up: bool
    nvml_error: str
    driver: DriverInfo | None
    device_count: int
    gpus: tuple[GpuSnapshot, ...]
