"""Where a PCI device sits: its sysfs directory, NUMA node, and the PCIe switches above it.

A PCI function is ``<sys_root>/bus/pci/devices/<dddd:bb:dd.f>``, a link into the device tree
(``devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:08.0/0000:05:00.0``): each path component
that is a PCI address is a bridge on the way from the root complex. The first one is the root
port; after it, PCIe switches appear as pairs of ports (upstream port, then the downstream port
the device hangs off), so the upstream ports name the switches. ``numa_node`` is -1 where the
platform has no NUMA affinity. Source: Linux ``Documentation/ABI/testing/sysfs-bus-pci``,
``Documentation/PCI/sysfs-pci.rst``.

The PCIe root complex of a device is the first component of that path below ``devices/``, the
host bridge ``pci<domain>:<bus>`` ("pci0000:00"): the value of Kubernetes' standard device attribute
``resource.kubernetes.io/pcieRoot``, derived as k8s.io/dynamic-resource-allocation does it
(``deviceattribute/pci_linux.go``, ``resolvePCIeRoot``: the link ``bus/pci/devices/<address>``
must lead into ``devices/pci…`` and end at the address).

Bus ids are NVML's format (``00000000:05:00.0``: 8-digit domain, upper case); sysfs uses a
4-digit lower-case domain (``0000:05:00.0``). Both are accepted.
"""

from __future__ import annotations

import re
from pathlib import Path

from runtimekit.state.refs import normal_pci

from .sysfs import DEFAULT_SYS_ROOT

__all__ = [
    "device_numa_node", "device_pcie_root", "device_switches", "normalise_bus_id", "numa_node_id", "pci_device_dir",
    "pci_numa_node", "pci_path", "pcie_root", "pcie_switches_above",
]

#: A host bridge's directory under ``devices/``: "pci" + the PCI domain + ":" + its root bus, in
#: lower-case hex as sysfs writes them (domains above ffff, VMD's, are not PCI addresses here: refs).
_HOST_BRIDGE = re.compile(r"pci[0-9a-f]{4}:[0-9a-f]{2}")


def normalise_bus_id(bus_id: str) -> str | None:
    """The one spelling of a PCI address (``runtimekit.state.refs``: "0000:05:00.0", as sysfs
    names devices) from any common one; None if ``bus_id`` is not a PCI address."""
    try:
        return normal_pci(bus_id)
    except ValueError:
        return None


def pci_device_dir(bus_id: str, sys_root: str | Path = DEFAULT_SYS_ROOT) -> Path | None:
    """The resolved sysfs directory of PCI function ``bus_id``; None when absent."""
    name = normalise_bus_id(bus_id)  # sysfs names devices in the one spelling
    if name is None:
        return None
    link = Path(sys_root) / "bus/pci/devices" / name
    return link.resolve() if link.exists() else None


def numa_node_id(text: str) -> int | None:
    """A sysfs ``numa_node`` (stripped) as a node id; None for -1 (no NUMA affinity) or anything
    that is not a node number."""
    return int(text) if text.isdigit() else None


def device_numa_node(device_dir: Path) -> int | None:
    """NUMA node of the PCI function whose resolved sysfs directory is ``device_dir`` (its
    ``numa_node``); None when absent or -1."""
    f = device_dir / "numa_node"
    return numa_node_id(f.read_text().strip()) if f.is_file() else None


def pci_numa_node(bus_id: str, sys_root: str | Path = DEFAULT_SYS_ROOT) -> int | None:
    """NUMA node of PCI function ``bus_id`` (sysfs ``numa_node``); None when absent or -1."""
    d = pci_device_dir(bus_id, sys_root)
    return device_numa_node(d) if d is not None else None


def _bridges(device_dir: Path) -> list[str]:
    """Bus ids of the bridges from the root port down to ``device_dir``'s parent (the path
    components that are PCI addresses), in the one spelling."""
    bridges = [normalise_bus_id(part) for part in device_dir.parent.parts]
    return [b for b in bridges if b is not None]


def pci_path(bus_id: str, sys_root: str | Path = DEFAULT_SYS_ROOT) -> list[str]:
    """Bus ids of the bridges from the root port down to the device's parent (the one spelling,
    "0000:16:00.0"); [] when the device is absent or sits right on the root complex."""
    d = pci_device_dir(bus_id, sys_root)
    return _bridges(d) if d is not None else []


def device_switches(device_dir: Path) -> list[str]:
    """Upstream-port bus ids of the PCIe switches above the PCI function whose resolved sysfs
    directory is ``device_dir``, nearest the root first (each switch is an upstream port followed
    by a downstream port)."""
    return _bridges(device_dir)[1::2]


def pcie_switches_above(bus_id: str, sys_root: str | Path = DEFAULT_SYS_ROOT) -> list[str]:
    """Upstream-port bus ids of the PCIe switches between the root port and the device, nearest
    the root first; [] when the device is absent (``device_switches``)."""
    d = pci_device_dir(bus_id, sys_root)
    return device_switches(d) if d is not None else []


def device_pcie_root(device_dir: Path, sys_root: str | Path = DEFAULT_SYS_ROOT) -> str | None:
    """The PCIe root complex ("pci0000:15") of the PCI function whose resolved sysfs directory is
    ``device_dir``: the first component of its path below ``<sys_root>/devices``; None when the
    device is not below a host bridge there (the path leads elsewhere, or its first component is
    no ``pci<domain>:<bus>``)."""
    try:
        below = device_dir.relative_to(Path(sys_root).resolve() / "devices")
    except ValueError:
        return None
    first = below.parts[0] if below.parts else ""
    return first if _HOST_BRIDGE.fullmatch(first) and len(below.parts) > 1 else None


def pcie_root(bus_id: str, sys_root: str | Path = DEFAULT_SYS_ROOT) -> str | None:
    """The PCIe root complex ("pci0000:15") of PCI function ``bus_id``; None when the device is
    absent or not below a host bridge (``device_pcie_root``)."""
    d = pci_device_dir(bus_id, sys_root)
    return device_pcie_root(d, sys_root) if d is not None else None
