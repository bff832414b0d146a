"""The node's topology in the base's vocabulary: where each GPU and RDMA NIC sits, and how far apart
two of them are.

Distance, nearest first: **NVLink** (more links nearer; on NVSwitch machines every GPU pair is
linked through the switches with as many links as the lesser of the two GPUs has) < the same
**PCIe switch** < the same **NUMA node** < the same **CPU socket** < across sockets (**system**).
``Link.cost`` turns a distance into one integer so that a set's total pairwise distance can be
summed and compared; the levels never overlap (any NVLink is nearer than any PCIe switch).

Discovery (NVML for GPU↔GPU links, sysfs for the PCI hierarchy, NUMA nodes, sockets and NICs)
publishes a ``Topology`` to the node state's topology topic; the allocator, the HTTP and gRPC
APIs, ``runtimekit topo`` and the metrics read it. Units: link counts; ``rate_gbps`` in Gb/s.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Literal, Protocol

from runtimekit.state.refs import GpuRef

Level = Literal["nvlink", "pcie_switch", "numa", "socket", "system"]
LEVELS: tuple[Level, ...] = ("nvlink", "pcie_switch", "numa", "socket", "system")

# Cost of each level; an NVLink pair costs NVLINK_COST less one per link (at most MAX_COUNTED_LINKS),
# so it stays below the PCIe switch's cost whatever its link count.
LEVEL_COST: Mapping[Level, int] = MappingProxyType({"nvlink": 40, "pcie_switch": 50, "numa": 60, "socket": 70, "system": 80})
MAX_COUNTED_LINKS = 36


@dataclass(frozen=True, slots=True)
class Link:
    """How near two devices are: the nearest ``level`` they share, and for NVLink the link count."""

    level: Level
    nvlinks: int = 0

    @property
    def cost(self) -> int:
        """The distance as one integer (lower is nearer): LEVEL_COST, less the NVLinks counted."""
        base = LEVEL_COST[self.level]
        return base - min(self.nvlinks, MAX_COUNTED_LINKS) if self.level == "nvlink" else base


@dataclass(frozen=True, slots=True)
class GpuPlace:
    """Where one GPU sits. ``pcie_switches``: the upstream ports of the PCIe switches above it,
    nearest the root first (PCI addresses, ``runtimekit.state.refs`` spelling); empty when it hangs
    off a root port. ``nvlinks``: peer GPU index -> links between them (direct or through NVSwitch).
    ``pcie_root``: its PCIe root complex as sysfs names the host bridge ("pci0000:15",
    ``runtimekit.host.pcie_root``; Kubernetes' resource.kubernetes.io/pcieRoot); "" when unknown."""

    ref: GpuRef
    numa_node: int | None = None
    socket: int | None = None
    pcie_switches: tuple[str, ...] = ()
    nvlinks: Mapping[int, int] = field(default_factory=lambda: MappingProxyType({}))
    nvswitch: bool = False  # its NVLinks end at NVSwitches
    pcie_root: str = ""


@dataclass(frozen=True, slots=True)
class NicPlace:
    """Where one RDMA NIC sits (``/sys/class/infiniband/<name>``), and the device nodes a container
    needs to use it (``/dev/infiniband/uverbsN``, ...). ``pcie_root`` as ``GpuPlace``'s."""

    name: str
    pci: str
    numa_node: int | None = None
    socket: int | None = None
    pcie_switches: tuple[str, ...] = ()
    rate_gbps: int = 0
    device_nodes: tuple[str, ...] = ()
    pcie_root: str = ""


@dataclass(frozen=True, slots=True)
class Topology:
    """The topology topic: every GPU and NIC with its place, and the distance between every pair of
    GPUs (``gpu_links[(i, j)]``, i < j, by GPU index) and between every GPU and NIC
    (``nic_links[(gpu index, nic name)]``). ``errors``: what discovery could not read, in words."""

    gpus: tuple[GpuPlace, ...] = ()
    nics: tuple[NicPlace, ...] = ()
    gpu_links: Mapping[tuple[int, int], Link] = field(default_factory=lambda: MappingProxyType({}))
    nic_links: Mapping[tuple[int, str], Link] = field(default_factory=lambda: MappingProxyType({}))
    discovered_at: float = 0.0
    errors: tuple[str, ...] = ()

    def link(self, a: int, b: int) -> Link:
        """The distance between GPUs ``a`` and ``b`` (indices; KeyError for an unknown pair)."""
        return self.gpu_links[(a, b) if a < b else (b, a)]

    def nic_links_in_order(self) -> list[tuple[tuple[int, str], Link]]:
        """``nic_links`` by GPU index, then by the NIC's position in ``nics`` (a name not in
        ``nics`` after those that are): the one order the APIs list them in."""
        position = {nic.name: n for n, nic in enumerate(self.nics)}
        return sorted(self.nic_links.items(), key=lambda item: (item[0][0], position.get(item[0][1], len(position)), item[0][1]))


@dataclass(frozen=True, slots=True)
class Allocation:
    """The chosen GPUs (indices, ascending), their NICs (same order; ``""``: none, or NICs not
    asked for) and Σ ``Link.cost`` over the chosen pairs."""

    gpus: tuple[int, ...]
    nics: tuple[str, ...]
    cost: int


class AllocationError(ValueError):
    """A request that cannot be answered; ``field`` names the argument, the message the rule."""

    def __init__(self, field: str, rule: str) -> None:
        super().__init__(f"{field}: {rule}")
        self.field = field


class Allocator(Protocol):
    """The allocator as the API reaches it (``runtimekit.topology.allocator.allocate``, handed in by
    the composition root): the best ``count`` GPUs of ``free`` that include ``required``, with NICs."""

    def __call__(self, topology: Topology, free: Iterable[int], count: int, *, required: Iterable[int] = (),
                 with_nics: bool = False, free_nics: Iterable[str] | None = None) -> Allocation: ...
