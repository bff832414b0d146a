"""A ``Topology`` from a scenario's data, without an agent, NVML or sysfs: what
``runtimekit topo allocate --scenario NAME`` allocates over.

The base never imports the simulator (tests/core/test_layering.py), so this module reads a
scenario through the ``ScenarioData`` protocol below, which ``runtimekit.sim.Scenario`` satisfies
as it is; the command line (runtimekit/cli.py, the one place that may import the simulator)
loads the scenario and hands it here. Scenario fields read (runtimekit/sim/scenario_types.py):
each GPU's ``index``, ``uuid``, ``pci_bus_id``, ``numa_node``, ``pcie_switch`` and ``nvlinks``
(the NVSwitch at the far end of each link); each NIC's ``name``, ``pci_bus_id``, ``numa_node``,
``pcie_switch`` and ``rate_gbps``; each NUMA node's ``socket``; each PCIe switch's ``parent``.

Places: a device's ``pcie_switches`` are the *names* of the switches above it, root first (the
switch it names, then its ``parent`` chain); two devices share a switch when the chains meet.
NVLinks: every scenario's links end at NVSwitches, so a GPU pair has as many as the lesser of the
two GPUs' counts (``distance.nvswitch_peers``, the rule discovery applies too). Distances: ``runtimekit.state.distance``'s
one rule (NVLink, a shared PCIe switch, the same NUMA node, the same socket, else system).
NICs carry no ``device_nodes`` here (the sysfs tree names them; discovery reads it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import combinations
from types import MappingProxyType
from typing import Protocol

from runtimekit.state.distance import links_between, nvswitch_peers
from runtimekit.state.refs import GpuRef, PciAddress
from runtimekit.state.topology import GpuPlace, NicPlace, Topology

__all__ = ["ScenarioData", "topology_from_scenario"]


class ScenarioGpu(Protocol):
    @property
    def index(self) -> int: ...
    @property
    def uuid(self) -> str: ...
    @property
    def pci_bus_id(self) -> str: ...
    @property
    def numa_node(self) -> int: ...
    @property
    def pcie_switch(self) -> str: ...
    @property
    def nvlinks(self) -> Sequence[int]: ...


class ScenarioNic(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def pci_bus_id(self) -> str: ...
    @property
    def numa_node(self) -> int: ...
    @property
    def pcie_switch(self) -> str: ...
    @property
    def rate_gbps(self) -> int: ...


class ScenarioNuma(Protocol):
    @property
    def id(self) -> int: ...
    @property
    def socket(self) -> int: ...


class ScenarioSwitch(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def parent(self) -> str: ...


class ScenarioData(Protocol):
    """What this module reads of a scenario (``runtimekit.sim.Scenario`` has it all)."""

    @property
    def gpus(self) -> Sequence[ScenarioGpu]: ...
    @property
    def nics(self) -> Sequence[ScenarioNic]: ...
    @property
    def numa_nodes(self) -> Sequence[ScenarioNuma]: ...
    @property
    def pcie_switches(self) -> Sequence[ScenarioSwitch]: ...


def topology_from_scenario(scenario: ScenarioData, now: float = 0.0) -> Topology:
    """Every GPU and NIC of ``scenario`` with its place, and the distance of every pair."""
    sockets = {numa.id: numa.socket for numa in scenario.numa_nodes}
    parents = {switch.name: switch.parent for switch in scenario.pcie_switches}
    fabric = nvswitch_peers({g.index: len(g.nvlinks) for g in scenario.gpus})
    gpus = tuple(GpuPlace(GpuRef(g.uuid, g.index, PciAddress.parse(g.pci_bus_id)), g.numa_node, sockets.get(g.numa_node),
                          _chain(g.pcie_switch, parents), MappingProxyType(fabric[g.index]), nvswitch=bool(g.nvlinks))
                 for g in sorted(scenario.gpus, key=lambda g: g.index))
    nics = tuple(NicPlace(n.name, str(PciAddress.parse(n.pci_bus_id)), n.numa_node, sockets.get(n.numa_node),
                          _chain(n.pcie_switch, parents), n.rate_gbps) for n in scenario.nics)
    gpu_links = {(a.ref.index, b.ref.index): links_between(a, b) for a, b in combinations(gpus, 2)}
    nic_links = {(g.ref.index, n.name): links_between(g, n) for g in gpus for n in nics}
    return Topology(gpus, nics, MappingProxyType(gpu_links), MappingProxyType(nic_links), now)


def _chain(switch: str, parents: Mapping[str, str]) -> tuple[str, ...]:
    """``switch`` and the switches above it, root first (empty when the device names none)."""
    chain: list[str] = []
    while switch and switch not in chain:
        chain.append(switch)
        switch = parents.get(switch, "")
    return tuple(reversed(chain))
