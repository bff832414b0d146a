"""The distance between two placed devices: the one rule every reader of the topology shares.

Nearest first (``runtimekit.state.topology.LEVELS``):

1. **nvlink** — two GPUs with NVLinks between them (direct, or through the NVSwitch fabric), with
   their link count;
2. **pcie_switch** — the two share ANY PCIe switch (a common upstream port below the root port):
   a peer-to-peer transfer between them never crosses the root complex (NVML's
   ``NVML_TOPOLOGY_SINGLE`` / ``NVML_TOPOLOGY_MULTIPLE``; ``nvidia-smi topo -m``'s PIX / PXB);
3. **numa** — the same NUMA node (equal, known ``numa_node``);
4. **socket** — the same CPU socket (equal, known ``socket``), across NUMA nodes;
5. **system** — anything else: across sockets, or a place discovery could not read.

A NUMA node or socket that is unknown (None) never matches, so a device discovery could not place
is far from everything rather than near by accident.
"""

from __future__ import annotations

from collections.abc import Mapping

from runtimekit.state.topology import GpuPlace, Link, NicPlace, Topology

__all__ = ["links_between", "nearest_gpus", "nvlinks_between", "nvswitch_peers", "pcie_link"]


def nvlinks_between(a: GpuPlace, b: GpuPlace) -> int:
    """NVLinks between GPUs ``a`` and ``b``: the larger of the counts each one's ``nvlinks``
    gives for the other (a link read from one end exists even when the other end's read failed)."""
    return max(a.nvlinks.get(b.ref.index, 0), b.nvlinks.get(a.ref.index, 0))


def nvswitch_peers(switch_links: Mapping[int, int]) -> dict[int, dict[int, int]]:
    """GPU index -> {peer index: NVLinks between them through the NVSwitch fabric}, from each GPU's
    count of links that end at NVSwitches: as many as the lesser of the two counts
    (``nvidia-smi topo -m``'s NV18 between every pair of a DGX H100). Pairs with none are left out."""
    return {gpu: {peer: min(links, theirs) for peer, theirs in switch_links.items() if peer != gpu and min(links, theirs) > 0}
            for gpu, links in switch_links.items()}


def links_between(a: GpuPlace | NicPlace, b: GpuPlace | NicPlace) -> Link:
    """The nearest level ``a`` and ``b`` share (the rule above); symmetric."""
    if isinstance(a, GpuPlace) and isinstance(b, GpuPlace):
        links = nvlinks_between(a, b)
        if links > 0:
            return Link("nvlink", links)
    return pcie_link(a, b)


def pcie_link(a: GpuPlace | NicPlace, b: GpuPlace | NicPlace) -> Link:
    """The nearest level ``a`` and ``b`` share on the PCIe side, NVLinks ignored: a shared PCIe
    switch, NUMA node, socket, else system (rules 2-5 above); symmetric. The allocator's tie-break
    reads it where every pair is NVLinked alike (NVSwitch machines)."""
    if set(a.pcie_switches) & set(b.pcie_switches):
        return Link("pcie_switch")
    if a.numa_node is not None and a.numa_node == b.numa_node:
        return Link("numa")
    if a.socket is not None and a.socket == b.socket:
        return Link("socket")
    return Link("system")


def nearest_gpus(topology: Topology, nic: str) -> tuple[int, ...]:
    """The GPUs nearest NIC ``nic`` (least ``nic_links`` cost), by index; () for a NIC with no GPU."""
    costs = {gpu: link.cost for (gpu, name), link in topology.nic_links.items() if name == nic}
    least = min(costs.values(), default=None)
    return tuple(sorted(gpu for gpu, cost in costs.items() if cost == least))
