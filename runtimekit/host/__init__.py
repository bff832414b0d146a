"""Host discovery from sysfs: NUMA nodes, CPU sockets, where a PCI device sits, RDMA NICs.

A base package (no NVML, no simulator, no exporter/healthcheck/slicer): every function takes
``sys_root`` (default ``DEFAULT_SYS_ROOT``, "/sys"), so the same code reads a real node and a
fixture tree. ``runtimekit sim record`` uses it; topology discovery can share it.
"""

from .nics import RdmaNic, rdma_nics
from .pci import (
    device_numa_node,
    device_pcie_root,
    device_switches,
    normalise_bus_id,
    pci_device_dir,
    pci_numa_node,
    pci_path,
    pcie_root,
    pcie_switches_above,
)
from .sysfs import DEFAULT_SYS_ROOT, NumaNode, cpu_sockets, format_cpulist, numa_nodes, parse_cpulist, read_fact

__all__ = [
    "DEFAULT_SYS_ROOT",
    "NumaNode",
    "RdmaNic",
    "cpu_sockets",
    "device_numa_node",
    "device_pcie_root",
    "device_switches",
    "format_cpulist",
    "normalise_bus_id",
    "numa_nodes",
    "parse_cpulist",
    "pci_device_dir",
    "pci_numa_node",
    "pci_path",
    "pcie_root",
    "pcie_switches_above",
    "rdma_nics",
    "read_fact",
]
