"""A sampled GPU as the base's vocabulary names it: its ``GpuRef``."""

from __future__ import annotations

from runtimekit.gpu.types import GpuSnapshot, is_available
from runtimekit.state.refs import GpuRef, PciAddress

__all__ = ["gpu_ref"]


def gpu_ref(gpu: GpuSnapshot) -> GpuRef:
    """The reference of a sampled GPU ("" for a UUID the driver could not give; no PCI address
    when it could not give one)."""
    uuid = gpu.identity.uuid if is_available(gpu.identity.uuid) else ""
    pci = gpu.identity.pci_bus_id
    try:
        address = PciAddress.parse(pci) if is_available(pci) else None
    except ValueError:  # the reader normalises it; an unreadable one is left out, not fatal
        address = None
    return GpuRef(uuid, gpu.index, address)
