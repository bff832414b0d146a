"""Where a scenario's GPUs and NICs sit: PCIe paths, host bridges, NUMA nodes, sockets, and the
NVML topology level between two GPUs.

One reading of the scenario (``scenario_pcie``) that the fake NVML library (``nvml.topology``)
and the sysfs tree (``sysfs``) share, so the two always agree, as NVML and sysfs do on a node.

NVML's levels (``nvmlGpuTopologyLevel_t``, nvml.h; ``nvidia-smi topo -m`` legend): INTERNAL (0,
the same board), SINGLE (10, PIX: both hang off one PCIe switch), MULTIPLE (20, PXB: several
switches, no host bridge), HOSTBRIDGE (30, PHB: through one host bridge), NODE (40: between host
bridges of one NUMA node), SYSTEM (50, SYS: across NUMA nodes, over the SMP interconnect, even
within one socket — as on a DGX A100 with NPS4). NVLink is not a PCIe level: NVML reports it
through P2P status and the NVLink calls.
"""

from __future__ import annotations

from .scenario_pcie import pci_paths
from .scenario_types import Scenario

__all__ = ["INTERNAL", "SINGLE", "MULTIPLE", "HOSTBRIDGE", "NODE", "SYSTEM", "LEVELS", "SimTopology"]

INTERNAL, SINGLE, MULTIPLE, HOSTBRIDGE, NODE, SYSTEM = 0, 10, 20, 30, 40, 50
#: Every nvmlGpuTopologyLevel_t value, nearest first.
LEVELS = (INTERNAL, SINGLE, MULTIPLE, HOSTBRIDGE, NODE, SYSTEM)


class SimTopology:
    """The topology facts of one scenario (bus ids in NVML's spelling, "00000000:18:00.0")."""

    def __init__(self, scenario: Scenario) -> None:
        self.scenario = scenario
        devices = [(g.pci_bus_id, g.pcie_switch) for g in scenario.gpus]
        devices += [(n.pci_bus_id.upper(), n.pcie_switch) for n in scenario.nics]
        #: bus id -> bridges from the root port down (root port, then upstream/downstream pairs).
        self.paths = pci_paths(scenario.pcie_switches, devices)
        self._socket = {n.id: n.socket for n in scenario.numa_nodes}

    def gpu_socket(self, gpu: int) -> int:
        """The CPU socket GPU ``gpu`` is on (that of its NUMA node)."""
        return self._socket[self.scenario.gpus[gpu].numa_node]

    def switches_above(self, bus_id: str) -> tuple[str, ...]:
        """Upstream-port bus ids of the PCIe switches above ``bus_id``, root first."""
        return self.paths[bus_id][1::2]

    def host_bridge(self, bus_id: str) -> str:
        """The host bridge above ``bus_id`` as sysfs names it: ``pci<dddd>:<bus of the root port>``."""
        domain, bus, _ = self.paths[bus_id][0].split(":")
        return f"pci{domain[-4:]}:{bus}".lower()

    def level(self, a: int, b: int) -> int:
        """nvmlDeviceGetTopologyCommonAncestor between GPUs ``a`` and ``b`` (a level of ``LEVELS``)."""
        if a == b:
            return INTERNAL
        ga, gb = self.scenario.gpus[a], self.scenario.gpus[b]
        above_a, above_b = self.switches_above(ga.pci_bus_id), self.switches_above(gb.pci_bus_id)
        if set(above_a) & set(above_b):
            return SINGLE if above_a[-1] == above_b[-1] else MULTIPLE
        if self.host_bridge(ga.pci_bus_id) == self.host_bridge(gb.pci_bus_id):
            return HOSTBRIDGE
        return NODE if ga.numa_node == gb.numa_node else SYSTEM
