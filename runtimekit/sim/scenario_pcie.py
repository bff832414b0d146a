"""The PCIe side of a scenario: its switches (``pcie_switches:``) and where every PCI function sits.

Each GPU and NIC names its PCIe switch (``pcie_switch``). A switch is a pair of port kinds, as
sysfs shows it (Linux ``Documentation/PCI/sysfs-pci.rst``): one upstream port, hanging below a
root port of the CPU's host bridge (a top-level switch) or below a downstream port of another
switch (``parent``), and one downstream port per device or child switch below it. So a device's
sysfs path is ``devices/pci<dddd:bb>/<root port>/<upstream>/<downstream>[/<upstream>/<downstream>...]/<device>``.

``pcie_switches:`` entries are ``{name, upstream_port, root_port}`` or ``{name, upstream_port,
parent}``. A switch a device names but the list does not declare is derived, by one rule: it is a
top-level switch alone below its own root port and host bridge, numbered as firmware numbers buses
depth-first, from the lowest bus ``B`` among its devices: root port ``B-3:01.0`` (host bridge
``pci<domain>:B-3``), upstream port ``B-2:00.0``. Downstream ports are always derived: the k-th
child of a switch (its devices and child switches in bus-id order) hangs off ``U+1:k.0``, ``U``
the bus of the switch's upstream port.

Rules (``ScenarioError`` names the key): bus ids look like ``00000000:16:00.0``; names are
unique; a parent exists and there is no cycle; a switch has at most 32 children; no two PCI
functions (GPUs, NICs, switch ports) share a bus id; two top-level switches never share a
root port; every device below one top-level switch is on the same NUMA node (a root port belongs
to one host bridge, on one NUMA node).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from .scenario_types import PcieSwitchSpec, ScenarioError

__all__ = ["SWITCH_SCHEMA", "parse_pcie_switches", "pci_paths"]

_BUS_ID = re.compile(r"^[0-9A-Fa-f]{8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]$")

#: The shape of one ``pcie_switches`` entry (``runtimekit.schema.check_shape``).
SWITCH_SCHEMA = {"name": str, "upstream_port": str, "root_port?": str, "parent?": str}

#: At most 32 devices on one bus (5-bit device number): one per downstream port of a switch.
_MAX_CHILDREN = 32


def _bus(bus_id: str) -> int:
    return int(bus_id.split(":")[1], 16)


def _at(bus_id: str, bus: int, dev: int, fn: int = 0) -> str:
    """A bus id in ``bus_id``'s domain at ``bus:dev.fn`` (NVML spelling, upper case)."""
    return f"{bus_id.split(':')[0]}:{bus:02X}:{dev:02X}.{fn}".upper()


def parse_pcie_switches(
    declared: list[dict[str, Any]], devices: Iterable[tuple[str, str, str, int]]
) -> tuple[PcieSwitchSpec, ...]:
    """The scenario's PCIe switches: those ``declared`` (the ``pcie_switches`` list, shape-checked)
    and one derived per switch name a device gives but the list lacks. ``devices``: (key path,
    bus id, switch name, NUMA node) of every GPU and NIC, bus ids already validated."""
    devices = list(devices)
    switches: dict[str, PcieSwitchSpec] = {}
    for i, s in enumerate(declared):
        p = f"pcie_switches[{i}]"
        if s["name"] in switches:
            raise ScenarioError(f"{p}.name: duplicate switch {s['name']!r}")
        for key in ("upstream_port", "root_port"):
            if key in s and not _BUS_ID.match(s[key]):
                raise ScenarioError(f"{p}.{key}: must look like 00000000:16:00.0")
        if ("root_port" in s) == ("parent" in s):
            raise ScenarioError(f"{p}: give exactly one of root_port (a top-level switch) and parent")
        switches[s["name"]] = PcieSwitchSpec(s["name"], s["upstream_port"].upper(), s.get("root_port", "").upper(),
                                             s.get("parent", ""))
    for i, s in enumerate(declared):
        parent, seen = s.get("parent", ""), {s["name"]}
        while parent:
            if parent not in switches:
                raise ScenarioError(f"pcie_switches[{i}].parent: unknown switch {parent!r} (not in pcie_switches)")
            if parent in seen:
                raise ScenarioError(f"pcie_switches[{i}].parent: switch {s['name']!r} is its own ancestor")
            seen.add(parent)
            parent = switches[parent].parent
    by_switch: dict[str, list[tuple[str, str, str, int]]] = {}
    for d in devices:
        by_switch.setdefault(d[2], []).append(d)
    for name, below in sorted(by_switch.items()):
        if name not in switches:
            switches[name] = _derived(name, below)
    out = tuple(switches.values())
    _check_numa(out, devices)
    _check_addresses(out, devices)
    return out


def _derived(name: str, below: list[tuple[str, str, str, int]]) -> PcieSwitchSpec:
    path, low = min(((d[0], d[1]) for d in below), key=lambda d: _bus(d[1]))
    bus = _bus(low)
    if bus < 3:
        raise ScenarioError(f"{path}.pcie_switch: switch {name!r} is not in pcie_switches, and bus {bus:#04x} leaves no"
                            " room below it for a derived root port and upstream port (declare it in pcie_switches)")
    return PcieSwitchSpec(name, _at(low, bus - 2, 0), root_port=_at(low, bus - 3, 1))


def _top(switches: dict[str, PcieSwitchSpec], name: str) -> PcieSwitchSpec:
    s = switches[name]
    while s.parent:
        s = switches[s.parent]
    return s


def _check_numa(switches: tuple[PcieSwitchSpec, ...], devices: list[tuple[str, str, str, int]]) -> None:
    by_name = {s.name: s for s in switches}
    numa: dict[str, tuple[int, str]] = {}
    for path, _bus_id, name, node in devices:
        top = _top(by_name, name).name
        first = numa.setdefault(top, (node, path))
        if first[0] != node:
            raise ScenarioError(f"{path}.numa_node: {node}, but {first[1]} below the same PCIe switch tree ({top!r})"
                                f" is on NUMA node {first[0]}")


def pci_paths(switches: tuple[PcieSwitchSpec, ...], devices: Iterable[tuple[str, str]]) -> dict[str, tuple[str, ...]]:
    """bus id -> the bridges from the root port down to it (root port, then an upstream and a
    downstream port per switch), for every device ((bus id, switch name) pairs) and every switch's
    upstream port (keyed by that port's bus id). Bus ids in NVML spelling."""
    by_name = {s.name: s for s in switches}
    children: dict[str, list[str]] = {s.name: [] for s in switches}  # switch -> bus ids below it
    owner: dict[str, str] = {}  # a child's bus id -> the switch it hangs from
    for bus_id, name in devices:
        children[name].append(bus_id)
        owner[bus_id] = name
    for s in switches:
        if s.parent:
            children[s.parent].append(s.upstream_port)
            owner[s.upstream_port] = s.parent
    paths: dict[str, tuple[str, ...]] = {}

    def path_of(bus_id: str) -> tuple[str, ...]:
        if bus_id not in paths:
            sw = by_name[owner[bus_id]]
            above = path_of(sw.upstream_port) if sw.parent else (sw.root_port,)
            k = sorted(children[sw.name]).index(bus_id)
            paths[bus_id] = (*above, sw.upstream_port, _at(sw.upstream_port, _bus(sw.upstream_port) + 1, k))
        return paths[bus_id]

    for bus_id in owner:
        path_of(bus_id)
    return paths


def _check_addresses(switches: tuple[PcieSwitchSpec, ...], devices: list[tuple[str, str, str, int]]) -> None:
    by_name = {s.name: s for s in switches}
    for name, count in _child_counts(switches, devices).items():
        if count > _MAX_CHILDREN:
            raise ScenarioError(f"pcie_switches: switch {name!r} has {count} devices and switches below it;"
                                f" at most {_MAX_CHILDREN}")
        if _bus(by_name[name].upstream_port) == 0xFF:
            raise ScenarioError(f"pcie_switches: switch {name!r}: upstream port on bus FF leaves no bus for its"
                                " downstream ports")
    owners: dict[str, str] = {}

    def claim(bus_id: str, what: str) -> None:
        if bus_id in owners:
            raise ScenarioError(f"{what}: bus id {bus_id} is also {owners[bus_id]}")
        owners[bus_id] = what

    for path, bus_id, _name, _node in devices:
        claim(bus_id.upper(), f"{path}.pci_bus_id")
    for s in switches:
        claim(s.upstream_port, f"the upstream port of PCIe switch {s.name!r}")
        if s.root_port:
            claim(s.root_port, f"the root port of PCIe switch {s.name!r}")
    _check_downstream(switches, devices, owners)


def _child_counts(switches: tuple[PcieSwitchSpec, ...], devices: list[tuple[str, str, str, int]]) -> dict[str, int]:
    counts = {s.name: 0 for s in switches}
    for d in devices:
        counts[d[2]] += 1
    for s in switches:
        if s.parent:
            counts[s.parent] += 1
    return counts


def _check_downstream(switches: tuple[PcieSwitchSpec, ...], devices: list[tuple[str, str, str, int]],
                      owners: dict[str, str]) -> None:
    """Downstream ports (derived) never take a bus id a device, port or another switch's
    downstream port already has."""
    downstream: dict[str, str] = {}
    for bus_id, path in pci_paths(switches, [(d[1].upper(), d[2]) for d in devices]).items():
        port = path[-1]
        if port in owners:
            raise ScenarioError(f"pcie_switches: the derived downstream port {port} above {bus_id} is also"
                                f" {owners[port]} (move the switch's upstream_port to a free bus)")
        if downstream.setdefault(port, bus_id) != bus_id:
            raise ScenarioError(f"pcie_switches: the derived downstream port {port} is above both"
                                f" {downstream[port]} and {bus_id} (two switches' upstream ports share a bus)")
