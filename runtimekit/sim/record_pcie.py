"""``runtimekit sim record``: the PCIe switches above the node's GPUs and NICs, from sysfs.

Each device's sysfs path (``runtimekit.host.pci_path``: the root port, then an upstream and a
downstream port per PCIe switch) gives the switches above it; a switch is named after its upstream
port ("0000:16:00.0"), and becomes a ``pcie_switches`` entry with its ``root_port`` (the top one) or
its ``parent``. A device sysfs does not place below a switch (no PCI tree in sysfs, or a device
right on a root port) gets a placeholder switch of its own — sharing nothing with any other device —
whose ports are invented in the unused PCI domain FFFFFFFF (``x-recorded.placeholders`` says which).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from runtimekit.host import pci_path
from runtimekit.state.refs import PciAddress

__all__ = ["PLACEHOLDER_DOMAIN", "record_switches"]

#: The PCI domain of invented placeholder ports (no real domain is this large).
PLACEHOLDER_DOMAIN = "FFFFFFFF"


def _nvml(bus_id: str) -> str:
    return PciAddress.parse(bus_id).nvml


def record_switches(sys_root: Path, bus_ids: list[str]) -> tuple[dict[str, str], list[dict[str, Any]], list[str]]:
    """For devices ``bus_ids`` (NVML spelling): bus id -> its nearest switch's name, the
    ``pcie_switches`` entries, and the bus ids that got a placeholder switch."""
    switch_of: dict[str, str] = {}
    entries: dict[str, dict[str, Any]] = {}
    placeholders: list[str] = []
    for bus_id in bus_ids:
        path = pci_path(bus_id, sys_root)
        ups = path[1::2]
        if not ups:
            k = len(placeholders)
            name = f"placeholder-{k}"
            entries[name] = {"name": name, "upstream_port": f"{PLACEHOLDER_DOMAIN}:{3 * k + 1:02X}:00.0",
                             "root_port": f"{PLACEHOLDER_DOMAIN}:{3 * k:02X}:01.0"}
            placeholders.append(bus_id)
            switch_of[bus_id] = name
            continue
        for i, up in enumerate(ups):
            where = {"root_port": _nvml(path[0])} if i == 0 else {"parent": ups[i - 1]}
            entries.setdefault(up, {"name": up, "upstream_port": _nvml(up), **where})
        switch_of[bus_id] = ups[-1]
    return switch_of, list(entries.values()), placeholders
