"""Where each GPU sits: the topology facts ``NodeReader`` does not collect, read once on demand.

``read_topology(session, index, nvlink_count)`` answers, for one GPU: its PCI device and
subsystem ids, its NUMA node and ideal CPU affinity, the NVLink version, and for every NVLink the
kind of device at the far end and that device's PCI bus id. It is not part of the sampling cycle
(these facts do not change while the driver is loaded): ``runtimekit sim record`` uses it, and the
slicer's topology discovery can. Every call goes through ``NvmlSession.call`` so the usual error
policy applies (not supported → ``Unavailable("not_supported")``, GPU lost → ``GpuLostError``).

Blocking: call it from an executor thread, never from the event loop.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pynvml

from runtimekit.gpu.convert import bus_id
from runtimekit.gpu.nvml import NvmlSession
from runtimekit.gpu.types import Reading, Unavailable, is_available

__all__ = ["GpuTopology", "NvLinkPeer", "read_topology", "NVLINK_GENERATIONS", "CPU_SET_WORDS"]

#: 64-bit words asked of nvmlDeviceGetCpuAffinity: room for 4096 CPUs.
CPU_SET_WORDS = 64

#: NVML_NVLINK_DEVICE_TYPE_* -> name.
REMOTE_TYPES = {
    pynvml.NVML_NVLINK_DEVICE_TYPE_GPU: "gpu",
    pynvml.NVML_NVLINK_DEVICE_TYPE_IBMNPU: "ibmnpu",
    pynvml.NVML_NVLINK_DEVICE_TYPE_SWITCH: "switch",
    pynvml.NVML_NVLINK_DEVICE_TYPE_UNKNOWN: "unknown",
}

#: nvmlNvlinkVersion_t (what nvmlDeviceGetNvLinkVersion answers) -> NVLink generation.
#: The value is an enum, not the generation: an A100 answers 5 (NVLINK_VERSION_3_1), an H100 6
#: (NVLINK_VERSION_4_0). See the NVML reference, nvmlNvlinkVersion_t.
NVLINK_GENERATIONS = {1: 1, 2: 2, 3: 2, 4: 3, 5: 3, 6: 4, 7: 5, 8: 6}


@dataclass(frozen=True, slots=True)
class NvLinkPeer:
    """The far end of one NVLink."""

    link: int
    remote_type: Reading[str]  # "switch", "gpu", "ibmnpu" or "unknown"
    remote_pci_bus_id: Reading[str]  # "0000:05:00.0", the one spelling (runtimekit.state.refs)


@dataclass(frozen=True, slots=True)
class GpuTopology:
    """Placement facts of one GPU (nvmlDeviceGetPciInfo, NumaNodeId, CpuAffinity, NvLink*)."""

    index: int
    pci_device_id: Reading[int]  # device << 16 | vendor, e.g. 0x233010DE
    pci_subsystem_id: Reading[int]
    numa_node: Reading[int]  # NVML answers -1 where the platform has no NUMA: read as not supported
    cpu_affinity: Reading[tuple[int, ...]]  # ids of the CPUs closest to the GPU, ascending
    nvlink_version: Reading[int]  # the raw nvmlNvlinkVersion_t of link 0 (see NVLINK_GENERATIONS)
    nvlinks: tuple[NvLinkPeer, ...]

    @property
    def nvlink_generation(self) -> Reading[int]:
        """NVLink generation (4 for H100) decoded from ``nvlink_version``."""
        version = self.nvlink_version
        if not is_available(version):
            return version
        return NVLINK_GENERATIONS.get(int(version), Unavailable("error", f"unknown nvmlNvlinkVersion_t {version}"))


def _bus_id(pci: Any) -> Reading[str]:
    return bus_id(pci.busId)


def _cpus(words: Any) -> tuple[int, ...]:
    return tuple(w * 64 + bit for w, word in enumerate(words) for bit in range(64) if int(word) >> bit & 1)


def read_topology(session: NvmlSession, index: int, nvlink_count: int) -> GpuTopology | Unavailable:
    """Topology of GPU ``index`` with ``nvlink_count`` links (from ``GpuLimits.nvlink_count``).

    Returns ``Unavailable`` when the GPU has no handle; raises ``GpuLostError`` for a lost GPU.
    The session must be initialised (``session.init()``).
    """
    call = session.call
    handle = call("nvmlDeviceGetHandleByIndex", index)
    if not is_available(handle):
        return handle
    pci = call("nvmlDeviceGetPciInfo", handle)
    numa = call("nvmlDeviceGetNumaNodeId", handle)
    if is_available(numa) and int(numa) < 0:
        numa = Unavailable("not_supported", "nvmlDeviceGetNumaNodeId: -1")
    affinity = call("nvmlDeviceGetCpuAffinity", handle, CPU_SET_WORDS)
    affinity = _cpus(affinity) if is_available(affinity) else affinity
    if is_available(affinity) and not affinity:
        affinity = Unavailable("not_supported", "nvmlDeviceGetCpuAffinity: empty set")
    peers = []
    for link in range(nvlink_count):
        kind = call("nvmlDeviceGetNvLinkRemoteDeviceType", handle, link)
        remote = call("nvmlDeviceGetNvLinkRemotePciInfo", handle, link)
        peers.append(
            NvLinkPeer(
                link=link,
                remote_type=REMOTE_TYPES.get(int(kind), "unknown") if is_available(kind) else kind,
                remote_pci_bus_id=_bus_id(remote) if is_available(remote) else remote,
            )
        )
    version = call("nvmlDeviceGetNvLinkVersion", handle, 0) if nvlink_count else Unavailable("not_supported")
    return GpuTopology(
        index=index,
        pci_device_id=int(pci.pciDeviceId) if is_available(pci) else pci,
        pci_subsystem_id=int(pci.pciSubSystemId) if is_available(pci) else pci,
        numa_node=int(numa) if is_available(numa) else numa,
        cpu_affinity=affinity,
        nvlink_version=int(version) if is_available(version) else version,
        nvlinks=tuple(peers),
    )
