"""What attribution publishes: who each GPU process and each allocated device belongs to.

Immutable records, refreshed on the attribution's own cadence (never per scrape) and joined by
the exporter with the sampler's ``NodeSnapshot`` (NVML's view: pids, memory, utilization).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING

from runtimekit.gpu.types import NOT_SUPPORTED, Reading

if TYPE_CHECKING:  # runtimekit.state imports this module: a runtime import would be circular
    from runtimekit.state.refs import MigRef

SOURCES = ("kubelet", "cri", "procfs")  # kubelet pod-resources, the CRI runtime, /proc


@dataclass(frozen=True, slots=True)
class Owner:
    """The Kubernetes owner of a container; empty strings where a source could not tell."""

    namespace: str = ""
    pod: str = ""
    container: str = ""
    pod_uid: str = ""
    container_id: str = ""

    @property
    def known(self) -> bool:
        return bool(self.pod)


HOST = Owner()  # a process outside any Kubernetes container (or one no source could place)


@dataclass(frozen=True, slots=True)
class ProcessFacts:
    """A GPU process as the host sees it (psutil over ``/proc``), with its owner."""

    pid: int
    name: str
    cmdline: tuple[str, ...]
    cpu_seconds: float  # user + system since the process started
    resident_bytes: int
    owner: Owner


@dataclass(frozen=True, slots=True)
class DeviceAllocation:
    """One device the kubelet allocated to a container (pod-resources ``List``).

    ``device_id`` is what the device plugin advertised: a GPU UUID, a MIG device UUID, or a
    shared replica such as ``GPU-…::3`` (time-slicing); ``gpu_uuid`` is the physical GPU's UUID
    derived from it: for a MIG device its parent's, found through the sampled MIG devices, None
    while no sampled MIG device has that UUID. ``mig`` is that MIG device (None for other ids).
    """

    owner: Owner
    resource_name: str
    device_id: str
    gpu_uuid: str | None
    gpu_index: int | None  # None when the GPU is not on this node's snapshot
    mig: MigRef | None = None


@dataclass(frozen=True, slots=True)
class AttributedProcess:
    """One process on one GPU: NVML's view joined with the host's and its owner.

    ``host`` is None when /proc could not tell (the process ended, or no host PID namespace).
    """

    gpu_index: int
    gpu_uuid: Reading[str]  # as the sample has it (Unavailable when the driver could not say)
    pid: int
    used_memory_bytes: Reading[int]
    sm_utilization: Reading[float]
    memory_utilization: Reading[float]
    encoder_utilization: Reading[float]
    decoder_utilization: Reading[float]
    gpu_instance_id: Reading[int]
    compute_instance_id: Reading[int]
    host: ProcessFacts | None
    owner: Owner


@dataclass(frozen=True, slots=True)
class PodGpuUsage:
    """What one container does on one GPU (on a GPU in MIG mode: in one MIG instance), summed over
    all its processes there (never capped)."""

    owner: Owner
    gpu_index: int
    gpu_uuid: Reading[str]
    used_memory_bytes: Reading[int]  # Unavailable when NVML gave no process memory (e.g. some MIG setups)
    sm_utilization: Reading[float]  # sum of its processes' SM ratios: its share of the GPU (not supported in MIG)
    processes: int
    gpu_instance_id: Reading[int] = NOT_SUPPORTED  # the MIG instance (NVML's ids); not supported on a whole GPU
    compute_instance_id: Reading[int] = NOT_SUPPORTED


@dataclass(frozen=True, slots=True)
class SourceStatus:
    up: bool
    error: str = ""  # why the source is down, for the log and /api
    last_success: float | None = None  # unix seconds


@dataclass(frozen=True, slots=True)
class AttributionSnapshot:
    """One attribution pass, made after each sampling cycle.

    ``processes`` is capped per GPU (``dropped_total`` counts, per GPU, the process rows the cap
    has left out since the agent started); ``pods`` always covers every process.
    """

    refreshed_at: float  # unix seconds
    processes: tuple[AttributedProcess, ...] = ()
    pods: tuple[PodGpuUsage, ...] = ()
    allocations: tuple[DeviceAllocation, ...] = ()
    sources: Mapping[str, SourceStatus] = field(default_factory=lambda: MappingProxyType({}))
    # UIDs of the live pods: those with a ready sandbox (the CRI runtime's ListPodSandbox, refreshed
    # every attribution.cri_refresh_seconds). A crash-looping pod keeps its ready sandbox between
    # restarts; the kubelet stops the sandbox of a pod that finished for good (Succeeded, Failed),
    # though it keeps its exited containers until the pod is deleted. None while the runtime's
    # answer is unknown or too old. The slicer reclaims a pod's slices only when this is known and
    # lacks the pod.
    pod_uids: frozenset[str] | None = None
    dropped_total: Mapping[tuple[int, Reading[str]], int] = field(default_factory=lambda: MappingProxyType({}))

    def held_whole(self) -> dict[str, tuple[Owner, ...]]:
        """The GPUs the kubelet allocated to a container whole or as a time-slicing replica
        ("GPU-…::2"): by GPU UUID, every owner (replicas of one GPU go to several pods). Not a MIG
        device (a MIG card stays the slicer's to partition). Empty while the kubelet source is
        down (``kubelet_known``): what it last said may be stale."""
        held: dict[str, tuple[Owner, ...]] = {}
        if not self.kubelet_known:
            return held
        for allocation in self.allocations:
            if allocation.mig is None and allocation.gpu_uuid is not None:
                held[allocation.gpu_uuid] = (*held.get(allocation.gpu_uuid, ()), allocation.owner)
        return held

    @property
    def kubelet_known(self) -> bool:
        """Whether ``allocations`` are the kubelet's current answer (its pod-resources source is up)."""
        kubelet = self.sources.get("kubelet")
        return kubelet is not None and kubelet.up
