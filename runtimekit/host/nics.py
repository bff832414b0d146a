"""RDMA NICs from sysfs: ``class/infiniband/<dev>`` (mlx5_0, ...), their PCI address, NUMA node
and port 1 rate.

Source: Linux ``Documentation/ABI/stable/sysfs-class-infiniband`` (``ports/N/rate``: e.g.
"400 Gb/sec (4X NDR)"; ``device`` links to the PCI function).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .pci import normalise_bus_id, numa_node_id
from .sysfs import DEFAULT_SYS_ROOT, read_fact

__all__ = ["RdmaNic", "rdma_nics"]


@dataclass(frozen=True, slots=True)
class RdmaNic:
    """One RDMA device: ``numa_node`` None where sysfs says -1 or nothing; ``rate_gbps`` the
    port 1 rate in Gb/s (0 when unknown)."""

    name: str
    pci_bus_id: str  # the one spelling, "0000:1a:00.0" (runtimekit.state.refs)
    numa_node: int | None
    rate_gbps: int


def _gbps(text: str) -> int:
    words = text.split()
    return int(float(words[0])) if words and words[0].replace(".", "", 1).isdigit() else 0


def rdma_nics(sys_root: str | Path = DEFAULT_SYS_ROOT, errors: list[str] | None = None) -> list[RdmaNic]:
    """Every RDMA device backed by a PCI function, by name (others, e.g. soft-RoCE, are skipped).

    Read one NIC at a time. With ``errors`` a list, what cannot be read (OSError, or bytes that are
    not UTF-8) is appended to it in words, naming the NIC and the file, and left unknown: a NIC
    whose ``device`` link cannot be read is left out, an unreadable NUMA node is None, an
    unreadable rate 0; the other NICs are read all the same. With ``errors`` None the first such
    failure is raised."""
    out = []
    for d in sorted((Path(sys_root) / "class/infiniband").glob("*")):
        try:
            dev = (d / "device").resolve()
        except (OSError, RuntimeError) as error:  # RuntimeError: a symlink loop (Python < 3.13)
            if errors is None:
                raise
            errors.append(f"NIC {d.name}: reading {d / 'device'} failed: {error}")
            continue
        bus = normalise_bus_id(dev.name)
        if bus is None:
            continue
        numa = read_fact(dev / "numa_node", numa_node_id, None, f"NIC {d.name}", errors)
        gbps = read_fact(d / "ports/1/rate", _gbps, 0, f"NIC {d.name}", errors)
        out.append(RdmaNic(d.name, bus, numa, gbps))
    return out
