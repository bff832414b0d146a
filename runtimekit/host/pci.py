"""Where a PCI device sits: its sysfs directory, NUMA node, and the PCIe switches above it.

A PCI function is ``<sys_root>/bus/pci/devices/<dddd:bb:dd.f>``, a link into the device tree
(``devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:08.0/0000:05:00.0``): each path component
that is a PCI address is a bridge on the way from the root complex. The first one is the root
port; after it, PCIe switches appear as pairs of ports (upstream port, then the downstream port
the device hangs off), so the upstream ports name the switches. ``numa_node`` is -1 where the
platform has no NUMA affinity. Source: Linux ``Documentation/ABI/testing/sysfs-bus-pci``,
``Documentation/PCI/sysfs-pci.rst``.

Bus ids are NVML's format (``00000000:05:00.0``: 8-digit domain, upper case); sysfs uses a
4-digit lower-case domain (``0000:05:00.0``). Both are accepted.
"""

from __future__ import annotations

from pathlib import Path

from runtimekit.state.refs import normal_pci

from .sysfs import DEFAULT_SYS_ROOT

__all__ = ["normalise_bus_id", "pci_device_dir", "pci_numa_node", "pci_path", "pcie_switches_above"]



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


def pci_numa_node(bus_id: str, sys_root: str | Path = DEFAULT_SYS_ROOT) -> int | None:
    """NUMA node of PCI function ``bus_id`` (sysfs ``numa_node``); None when absent or -1."""
    d = pci_device_dir(bus_id, sys_root)
    f = d / "numa_node" if d else None
    if f is None or not f.is_file():
        return None
    text = f.read_text().strip()
    return int(text) if text.isdigit() else None


def pci_path(bus_id: str, sys_root: str | Path = DEFAULT_SYS_ROOT) -> list[str]:
    """Bus ids of the bridges from the root port down to the device's parent (NVML form);
    [] when the device is absent or sits right on the root complex."""
    d = pci_device_dir(bus_id, sys_root)
    if d is None:
        return []
    bridges = [normalise_bus_id(part) for part in d.parent.parts]
    return [b for b in bridges if b is not None]


def pcie_switches_above(bus_id: str, sys_root: str | Path = DEFAULT_SYS_ROOT) -> list[str]:
    """Upstream-port bus ids of the PCIe switches between the root port and the device, nearest
    the root first (each switch is an upstream port followed by a downstream port)."""
    return pci_path(bus_id, sys_root)[1::2]
