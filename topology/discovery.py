"""Discovery: where every GPU and RDMA NIC of the node sits, and how far apart each pair is.

``discover(session, snapshot, sys_root, now)`` reads, once (the topology component calls it at
start and again when the sampled GPUs change, never per request):

- **NVLinks** from NVML (``runtimekit.gpu.topology.read_topology``: the kind of device at the far
  end of each link, and its PCI bus id). A link whose far end is a GPU counts for that peer; on
  NVSwitch systems every link ends at a switch, so every two NVSwitch-connected GPUs are linked
  through the fabric with as many links as the lesser of the two has (``nvidia-smi topo -m``'s
  NV18 between every pair of a DGX H100). A link the sample shows inactive is not counted.
- **The PCI hierarchy** from sysfs under ``sys_root`` (``runtimekit.host``): the PCIe switches
  above each device (upstream ports, root first), its PCIe root complex (the host bridge
  "pci0000:15" its sysfs path starts at), its NUMA node (sysfs ``numa_node``), and the CPU socket
  of that NUMA node (the ``physical_package_id`` of the node's first CPU).
- **RDMA NICs** from ``class/infiniband`` with their PCI function's place, port 1 rate, and the
  device nodes a container needs (``/dev/infiniband/uverbsN`` for each
  ``class/infiniband_verbs/uverbsN`` whose ``ibdev`` names the NIC, and ``/dev/infiniband/rdma_cm``
  where the host has it: ``class/misc/rdma_cm``).

Every pair's distance is ``distance.links_between``. What cannot be read (a missing file, an
OSError, bytes that are not UTF-8) is said in ``Topology.errors`` (in words, one entry per device
and fact, naming the file) and that fact left unknown; one unreadable GPU, NIC, verbs device or
NUMA node never costs the others, nor fails the whole discovery.

Blocking (NVML and file reads): call it from an executor thread, never from the event loop.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from itertools import combinations
from pathlib import Path
from types import MappingProxyType

from runtimekit.gpu.nvml import GpuLostError, NvmlSession
from runtimekit.gpu.refs import gpu_ref
from runtimekit.gpu.topology import read_topology
from runtimekit.gpu.types import GpuSnapshot, NodeSnapshot, Unavailable, is_available
from runtimekit.host import (
    device_numa_node,
    device_pcie_root,
    device_switches,
    numa_nodes,
    parse_cpulist,
    pci_device_dir,
    rdma_nics,
    read_fact,
)
from runtimekit.state.distance import links_between, nvswitch_peers
from runtimekit.state.topology import GpuPlace, Link, NicPlace, Topology

__all__ = ["discover", "numa_sockets"]

#: Where a container finds a NIC's verbs device node: ``/dev/infiniband/uverbsN``.
DEV_INFINIBAND = "/dev/infiniband"


def numa_sockets(sys_root: str, errors: list[str]) -> dict[int, int]:
    """NUMA node id -> CPU socket (``physical_package_id`` of the node's first CPU), for the NUMA
    nodes with CPUs that sysfs describes. Node by node: one whose CPUs or socket cannot be read is
    left out and said in ``errors``."""
    out = {}
    for node in numa_nodes(sys_root, errors):
        try:
            first = min(parse_cpulist(node.cpus))
        except ValueError:
            errors.append(f"NUMA node {node.id}: its cpulist {node.cpus!r} is not a CPU list; its socket is unknown")
            continue
        package = Path(sys_root) / f"devices/system/cpu/cpu{first}/topology/physical_package_id"
        text = read_fact(package, str, "", f"NUMA node {node.id}", errors)
        if text.isdigit():
            out[node.id] = int(text)
        elif not text:
            errors.append(f"NUMA node {node.id}: {package} is missing or empty; its socket is unknown")
        else:
            errors.append(f"NUMA node {node.id}: {package} reads {text!r}, not a socket number; its socket is unknown")
    return out


@dataclass
class _NvLinkEnds:
    """Where one GPU's counted links end: peer GPU index -> links, and links to NVSwitches."""

    peers: dict[int, int] = field(default_factory=dict)
    switch: int = 0


def _nvlink_ends(session: NvmlSession, gpu: GpuSnapshot, by_bus: Mapping[str, int], errors: list[str]) -> _NvLinkEnds:
    ends = _NvLinkEnds()
    count = gpu.limits.nvlink_count
    if not is_available(count) or count <= 0:
        return ends
    if gpu.lost:
        errors.append(f"GPU {gpu.index}: lost; its NVLinks were not read")
        return ends
    try:
        topology = read_topology(session, gpu.index, count)
    except GpuLostError:
        errors.append(f"GPU {gpu.index}: lost while its NVLinks were read")
        return ends
    if isinstance(topology, Unavailable):
        errors.append(f"GPU {gpu.index}: NVLinks unreadable ({topology.reason} {topology.detail})".rstrip())
        return ends
    active = {link.link: link.active for link in gpu.nvlinks}
    for peer in topology.nvlinks:
        state = active.get(peer.link)
        if state is False:  # down in the latest sample; unknown counts (the read said where it ends)
            continue
        kind, remote = peer.remote_type, peer.remote_pci_bus_id
        if kind == "switch":
            ends.switch += 1
        elif kind == "gpu" and is_available(remote) and remote in by_bus:
            ends.peers[by_bus[remote]] = ends.peers.get(by_bus[remote], 0) + 1
        elif kind == "gpu" or (state is True and not is_available(kind)):
            errors.append(f"GPU {gpu.index}: NVLink {peer.link} ends at a device discovery cannot place ({kind}, {remote})")
    return ends


@dataclass(frozen=True)
class _PciPlace:
    """Where a PCI function sits, as sysfs says: the PCIe switches above it, its PCIe root complex
    ("" unknown) and its NUMA node (None unknown)."""

    switches: tuple[str, ...] = ()
    root: str = ""
    numa: int | None = None


def _place(bus_id: str, what: str, sys_root: str, errors: list[str]) -> _PciPlace:
    """The place of PCI function ``bus_id`` from sysfs; each fact that cannot be read (OSError,
    bytes that are not UTF-8, a path below no host bridge) is said in ``errors`` and left unknown."""
    try:
        device = pci_device_dir(bus_id, sys_root)  # resolved once; every fact is read from it
        if device is None:
            errors.append(f"{what}: PCI function {bus_id} is not in {sys_root}/bus/pci/devices")
            return _PciPlace()
        switches = tuple(device_switches(device))
        root = device_pcie_root(device, sys_root)
    except (OSError, ValueError, RuntimeError) as error:  # RuntimeError: a symlink loop (Python < 3.13)
        errors.append(f"{what}: reading its sysfs entry failed: {error}")
        return _PciPlace()
    if root is None:
        errors.append(f"{what}: its sysfs entry {device} is below no PCIe host bridge (devices/pci<domain>:<bus>); "
                      "its PCIe root is unknown")
    try:
        return _PciPlace(switches, root or "", device_numa_node(device))
    except (OSError, ValueError) as error:
        errors.append(f"{what}: reading its numa_node failed: {error}")
        return _PciPlace(switches, root or "")


def _gpu_places(session: NvmlSession, gpus: tuple[GpuSnapshot, ...], sys_root: str, sockets: Mapping[int, int],
                errors: list[str]) -> tuple[GpuPlace, ...]:
    refs = [gpu_ref(gpu) for gpu in gpus]
    by_bus = {str(ref.pci): ref.index for ref in refs if ref.pci is not None}
    ends = {gpu.index: _nvlink_ends(session, gpu, by_bus, errors) for gpu in gpus}
    fabric = nvswitch_peers({index: end.switch for index, end in ends.items()})
    places = []
    for gpu, ref in zip(gpus, refs, strict=True):
        mine = ends[gpu.index]
        nvlinks = dict(mine.peers)
        for other, through in fabric[gpu.index].items():
            nvlinks[other] = nvlinks.get(other, 0) + through
        place = _PciPlace()
        if ref.pci is None:
            errors.append(f"GPU {gpu.index}: no PCI address; its PCIe place is unknown")
        else:
            place = _place(str(ref.pci), f"GPU {gpu.index}", sys_root, errors)
        numa = place.numa
        places.append(GpuPlace(ref, numa, sockets.get(numa) if numa is not None else None, place.switches,
                               MappingProxyType(nvlinks), nvswitch=mine.switch > 0, pcie_root=place.root))
    return tuple(places)


def _natural(name: str) -> tuple[str | int, ...]:
    """Sort key: "mlx5_2" before "mlx5_10"."""
    return tuple(int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name))


def _device_nodes(sys_root: str, errors: list[str]) -> dict[str, tuple[str, ...]]:
    """NIC name -> its device nodes: ``/dev/infiniband/uverbsN`` of each
    ``class/infiniband_verbs/uverbsN`` whose ``ibdev`` names it, then ``/dev/infiniband/rdma_cm``
    when the host has the RDMA connection manager's device (``class/misc/rdma_cm``: the rdma_ucm
    module is loaded). An ``ibdev`` that cannot be read is said in ``errors``."""
    found: dict[str, list[str]] = {}
    for verbs in sorted((Path(sys_root) / "class/infiniband_verbs").glob("uverbs*")):
        nic = read_fact(verbs / "ibdev", str, "", f"verbs device {verbs.name}", errors)
        if nic:
            found.setdefault(nic, []).append(f"{DEV_INFINIBAND}/{verbs.name}")
    cm = [f"{DEV_INFINIBAND}/rdma_cm"] if (Path(sys_root) / "class/misc/rdma_cm").exists() else []
    return {nic: (*nodes, *cm) for nic, nodes in found.items()}


def _nic_places(sys_root: str, sockets: Mapping[int, int], errors: list[str]) -> tuple[NicPlace, ...]:
    try:
        found = rdma_nics(sys_root, errors)
    except OSError as error:
        errors.append(f"RDMA NICs: reading {sys_root}/class/infiniband failed: {error}")
        return ()
    try:
        nodes = _device_nodes(sys_root, errors) if found else {}
    except OSError as error:
        errors.append(f"RDMA NICs: reading {sys_root}/class/infiniband_verbs failed: {error}")
        nodes = {}
    places = []
    for nic in sorted(found, key=lambda nic: _natural(nic.name)):
        place = _place(nic.pci_bus_id, f"NIC {nic.name}", sys_root, errors)
        numa = place.numa if place.numa is not None else nic.numa_node
        places.append(NicPlace(nic.name, nic.pci_bus_id, numa, sockets.get(numa) if numa is not None else None,
                               place.switches, nic.rate_gbps, nodes.get(nic.name, ()), place.root))
    return tuple(places)


def discover(session: NvmlSession, snapshot: NodeSnapshot, sys_root: str, now: float) -> Topology:
    """The topology of the GPUs in ``snapshot`` and the NICs under ``sys_root``, discovered at
    ``now`` (unix seconds). ``session`` must be initialised (the sampler's). Blocking."""
    errors: list[str] = []
    try:
        sockets = numa_sockets(sys_root, errors)
    except OSError as error:
        errors.append(f"NUMA nodes and sockets: reading {sys_root}/devices/system failed: {error}")
        sockets = {}
    gpus = _gpu_places(session, tuple(sorted(snapshot.gpus, key=lambda gpu: gpu.index)), sys_root, sockets, errors)
    nics = _nic_places(sys_root, sockets, errors)
    gpu_links: dict[tuple[int, int], Link] = {
        (a.ref.index, b.ref.index): links_between(a, b) for a, b in combinations(gpus, 2)
    }
    nic_links = {(gpu.ref.index, nic.name): links_between(gpu, nic) for gpu in gpus for nic in nics}
    return Topology(gpus, nics, MappingProxyType(gpu_links), MappingProxyType(nic_links), now, tuple(errors))
