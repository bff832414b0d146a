"""``runtimekit topo``: the node's topology as a matrix like ``nvidia-smi topo -m``, RDMA NICs
included, read from the agent over runtimekit.v1 (GetTopology, on the agent's unix socket; the
socket options are ``runtimekit slice``'s). ``-o json``: the answer in proto3's JSON mapping.
``runtimekit topo allocate`` (``runtimekit.cli_topo_allocate``) runs the allocator over a scenario
without an agent.

Each cell is the nearest level two devices share (``LEGEND``); one row and one column per GPU, then
per NIC. Each row also shows the device's NUMA node, CPU socket and PCIe root complex (the host
bridge, "pci0000:15"; N/A when unknown). NIC↔NIC cells apply the same rule
(``runtimekit.state.distance.links_between``) to the NICs' places from the answer. Exit codes:
as ``runtimekit slice``'s (0 done; 1 the agent unreachable or not ready; 2 bad usage).
"""

from __future__ import annotations

import argparse

from runtimekit._proto.runtimekit.v1 import node_pb2, service_pb2
from runtimekit.cli_slice import call, client_options, guarded, print_result, table
from runtimekit.cli_topo_allocate import ScenarioTopology, add_allocate_parser
from runtimekit.state.distance import links_between
from runtimekit.state.topology import Allocator, NicPlace

__all__ = ["LEGEND", "add_topo_parser", "cell", "matrix"]

#: A level's cell, as nvidia-smi's legend names it where it can (NODE, SYS, PIX); SOCK is ours.
CELLS = {"pcie_switch": "PIX", "numa": "NODE", "socket": "SOCK", "system": "SYS"}
LEGEND = """Legend:

  X    = Self
  NV#  = Connected by # device-to-device links (NVLink; through the NVSwitch fabric on NVSwitch systems)
  PIX  = Under a common PCIe switch (one or several: PCIe P2P never crosses the root complex)
  NODE = Attached to the same NUMA node, under different PCIe switches
  SOCK = Attached to the same CPU socket, across its NUMA nodes
  SYS  = Across CPU sockets (or a place the agent could not read)"""


def cell(level: str, links: int = 0) -> str:
    """The matrix cell of a level (API names: "interconnect" is NV<links>)."""
    return f"NV{links}" if level == "interconnect" else CELLS.get(level, level.upper())


def _place(nic: node_pb2.Nic) -> NicPlace:
    return NicPlace(nic.name, nic.pci_address, nic.numa_node if nic.HasField("numa_node") else None,
                    nic.socket if nic.HasField("socket") else None, tuple(nic.pcie_switches))


def _where(message: node_pb2.DevicePlace | node_pb2.Nic) -> list[str]:
    """A row's NUMA node, socket and PCIe root ("N/A" where unknown)."""
    return [*(str(getattr(message, field)) if message.HasField(field) else "N/A" for field in ("numa_node", "socket")),
            message.pcie_root or "N/A"]


def matrix(topology: node_pb2.Topology) -> str:
    """The matrix, its legend, the NIC names, and what discovery could not read."""
    gpus = [device.ref.index for device in topology.devices]
    nics = [nic.name for nic in topology.nics]
    labels = [f"GPU{index}" for index in gpus] + [f"NIC{position}" for position in range(len(nics))]
    cells: dict[tuple[str, str], str] = {}
    for link in topology.device_links:
        a, b = f"GPU{link.device_index}", f"GPU{link.peer_index}"
        cells[(a, b)] = cells[(b, a)] = cell(link.level, link.links)
    names = {name: f"NIC{position}" for position, name in enumerate(nics)}
    for nic_link in topology.nic_links:
        a, b = f"GPU{nic_link.device_index}", names.get(nic_link.nic, nic_link.nic)
        cells[(a, b)] = cells[(b, a)] = cell(nic_link.level)
    places = [_place(nic) for nic in topology.nics]
    for i, one in enumerate(places):
        for j, other in enumerate(places[i + 1:], start=i + 1):
            cells[(f"NIC{i}", f"NIC{j}")] = cells[(f"NIC{j}", f"NIC{i}")] = cell(links_between(one, other).level)
    rows = []
    for row in labels:
        place = topology.devices[gpus.index(int(row[3:]))] if row.startswith("GPU") else topology.nics[int(row[3:])]
        rows.append([row, *("X" if row == column else cells.get((row, column), "-") for column in labels), *_where(place)])
    parts = [table(["", *labels, "NUMA", "Socket", "PCIe-Root"], rows), "", LEGEND]
    if nics:
        parts += ["", "NIC Legend:", "", *(f"  NIC{position}: {name}" for position, name in enumerate(nics))]
    if topology.errors:
        parts += ["", "Not read (those places are unknown above):", *(f"  {error}" for error in topology.errors)]
    return "\n".join(parts)


def _run_topo(args: argparse.Namespace) -> int:
    found = call(args, "GetTopology", service_pb2.GetTopologyRequest()).topology
    if args.output == "json":
        return print_result(args, found, (), ())
    print(matrix(found))
    return 0


def add_topo_parser(commands: argparse._SubParsersAction, scenario_topology: ScenarioTopology, allocate: Allocator) -> None:
    """Register ``topo`` (the agent's topology) and ``topo allocate`` (offline, over a scenario:
    ``scenario_topology`` is the composition root's name -> Topology, ``allocate`` its allocator)."""
    topo = commands.add_parser("topo", parents=[client_options()],
                               help="the node's topology: GPUs and RDMA NICs, a matrix like nvidia-smi topo -m (runtimekit.v1)")
    topo.set_defaults(handler=guarded(_run_topo))
    actions = topo.add_subparsers(dest="topo_command", metavar="ACTION")
    add_allocate_parser(actions, scenario_topology, allocate)

