"""RDMA NICs from sysfs: ``class/infiniband/<dev>`` (mlx5_0, ...), their PCI address, NUMA node
and port 1 rate.

Source: Linux ``Documentation/ABI/stable/sysfs-class-infiniband`` (``ports/N/rate``: e.g.
"400 Gb/sec (4X NDR)"; ``device`` links to the PCI function).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .pci import normalise_bus_id
from .sysfs import DEFAULT_SYS_ROOT

__all__ = ["RdmaNic", "rdma_nics"]


@dataclass(frozen=True, slots=True)
class RdmaNic:
    """One RDMA device: ``numa_node`` None where sysfs says -1 or nothing; ``rate_gbps`` the
    port 1 rate in Gb/s (0 when unknown)."""

    name: str
    pci_bus_id: str  # the one spelling, "0000:1a:00.0" (runtimekit.state.refs)
    numa_node: int | None
    rate_gbps: int


def rdma_nics(sys_root: str | Path = DEFAULT_SYS_ROOT) -> list[RdmaNic]:
    """Every RDMA device backed by a PCI function, by name (others, e.g. soft-RoCE, are skipped)."""
    out = []
    for d in sorted((Path(sys_root) / "class/infiniband").glob("*")):
        dev = (d / "device").resolve()
        bus = normalise_bus_id(dev.name)
        if bus is None:
            continue
        numa = (dev / "numa_node").read_text().strip() if (dev / "numa_node").is_file() else "-1"
        rate = d / "ports/1/rate"
        words = rate.read_text().split() if rate.is_file() else []
        gbps = int(float(words[0])) if words and words[0].replace(".", "", 1).isdigit() else 0
        out.append(RdmaNic(d.name, bus, int(numa) if numa.isdigit() else None, gbps))
    return out
