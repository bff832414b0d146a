"""The sysfs tree of a simulated node: PCI hierarchy, NUMA nodes, CPU sockets, RDMA NICs.

Written once (the machine's layout does not change while it runs) under ``<root>/sys`` by the
simulated host, laid out as Linux lays out a real node's ``/sys``, so ``runtimekit.host`` (and
any other sysfs reader) reads it unchanged. Sources: Linux ``Documentation/ABI/testing/sysfs-bus-pci``,
``Documentation/PCI/sysfs-pci.rst``, ``ABI/stable/sysfs-devices-node``,
``ABI/stable/sysfs-devices-system-cpu``, ``ABI/stable/sysfs-class-infiniband``.

- ``devices/pci<dddd:bb>/<root port>/<switch upstream port>/<downstream port>/.../<device>``: a
  directory per PCI function (bridges, GPUs, NICs; ``SimTopology.paths``), each with ``vendor``,
  ``device``, ``class`` and ``numa_node``;
- ``bus/pci/devices/<dddd:bb:dd.f>``: a relative link to each of them;
- ``devices/system/node/node<N>/cpulist``, ``devices/system/cpu/cpu<N>/topology/physical_package_id``
  (the socket of the NUMA node holding the CPU);
- ``class/infiniband/<nic>``: a link to ``<NIC's PCI function>/infiniband/<nic>``, which holds
  ``device`` (a link to the function), ``ports/1/rate`` ("400 Gb/sec (4X NDR)"), ``ports/1/state``
  and ``ports/1/link_layer``;
- ``class/infiniband_verbs/uverbs<N>``: likewise, with ``ibdev`` naming the NIC and ``dev``
  (major 231, minor 192 + N); ``N`` is the NIC's position in the scenario's ``nics`` (the
  container needs ``/dev/infiniband/uverbs<N>``);
- ``class/misc/rdma_cm``: a link to ``devices/virtual/misc/rdma_cm`` (``dev``: misc major 10, a
  dynamic minor), the RDMA connection manager's device (``/dev/infiniband/rdma_cm``, made by the
  rdma_ucm module), on scenarios with NICs only.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from runtimekit.host import format_cpulist, parse_cpulist
from runtimekit.state.refs import normal_pci

from .scenario_types import Scenario
from .topology import SimTopology

__all__ = ["write_sys_tree", "ib_rate_text"]

#: PCI class codes (PCI Code and ID Assignment spec): bridge, 3D controller, InfiniBand controller.
_CLASS_BRIDGE, _CLASS_GPU, _CLASS_IB = "0x060400", "0x030200", "0x020700"
_NVIDIA, _MELLANOX, _BRIDGE_VENDOR = "0x10de", "0x15b3", "0x1000"  # bridges: Broadcom/PLX switches
_CX_DEVICE = "0x1021"  # ConnectX-7
#: Port 1 rate word for a 4X link of this many Gb/s (``ibstat``/sysfs rate text).
_IB_SPEEDS = {100: "EDR", 200: "HDR", 400: "NDR", 800: "XDR"}
UVERBS_MAJOR, UVERBS_MINOR_BASE = 231, 192
#: rdma_cm is a misc device (major 10) with a dynamic minor; this one is as good as any.
MISC_MAJOR, RDMA_CM_MINOR = 10, 123


def ib_rate_text(gbps: int) -> str:
    """sysfs ``ports/1/rate`` of a 4X port: 400 -> "400 Gb/sec (4X NDR)"."""
    speed = _IB_SPEEDS.get(gbps)
    return f"{gbps} Gb/sec (4X {speed})" if speed else f"{gbps} Gb/sec (4X)"


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")


def _link(link: Path, target: Path) -> None:
    """A relative symlink ``link`` -> ``target`` (as sysfs's own links are relative)."""
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(os.path.relpath(target, link.parent))


def write_sys_tree(scenario: Scenario, sys_root: Path) -> None:
    """Write the sysfs tree of ``scenario`` under ``sys_root`` (replacing what is there)."""
    sys_root = Path(sys_root)
    if sys_root.exists():
        shutil.rmtree(sys_root)
    topo = SimTopology(scenario)
    numa_of = {g.pci_bus_id: g.numa_node for g in scenario.gpus}
    numa_of |= {n.pci_bus_id.upper(): n.numa_node for n in scenario.nics}
    kind = {g.pci_bus_id: (_NVIDIA, f"{g.model.pci_device_id >> 16:#06x}", _CLASS_GPU) for g in scenario.gpus}
    kind |= {n.pci_bus_id.upper(): (_MELLANOX, _CX_DEVICE, _CLASS_IB) for n in scenario.nics}
    dirs: dict[str, Path] = {}  # bus id -> its directory under devices/
    for bus_id in sorted(numa_of):
        bridges = topo.paths[bus_id]
        d = sys_root / "devices" / topo.host_bridge(bus_id)
        for hop in (*bridges, bus_id):
            d = d / normal_pci(hop)
            if hop not in dirs:
                dirs[hop] = d
                vendor, device, cls = kind.get(hop, (_BRIDGE_VENDOR, "0xc030", _CLASS_BRIDGE))
                for name, text in (("vendor", vendor), ("device", device), ("class", cls),
                                   ("numa_node", str(numa_of[bus_id]))):
                    _write(d / name, text)
                _link(sys_root / "bus/pci/devices" / normal_pci(hop), d)
    for n in scenario.numa_nodes:
        cpus = parse_cpulist(n.cpus)
        _write(sys_root / f"devices/system/node/node{n.id}/cpulist", format_cpulist(cpus))
        for cpu in cpus:
            _write(sys_root / f"devices/system/cpu/cpu{cpu}/topology/physical_package_id", str(n.socket))
    for i, nic in enumerate(scenario.nics):
        function = dirs[nic.pci_bus_id.upper()]
        ib = function / "infiniband" / nic.name
        _link(ib / "device", function)
        _write(ib / "ports/1/rate", ib_rate_text(nic.rate_gbps))
        _write(ib / "ports/1/state", "4: ACTIVE")
        _write(ib / "ports/1/link_layer", "InfiniBand")
        _link(sys_root / "class/infiniband" / nic.name, ib)
        verbs = function / "infiniband_verbs" / f"uverbs{i}"
        _link(verbs / "device", function)
        _write(verbs / "ibdev", nic.name)
        _write(verbs / "dev", f"{UVERBS_MAJOR}:{UVERBS_MINOR_BASE + i}")
        _link(sys_root / "class/infiniband_verbs" / f"uverbs{i}", verbs)
    if scenario.nics:
        rdma_cm = sys_root / "devices/virtual/misc/rdma_cm"
        _write(rdma_cm / "dev", f"{MISC_MAJOR}:{RDMA_CM_MINOR}")
        _link(sys_root / "class/misc/rdma_cm", rdma_cm)
