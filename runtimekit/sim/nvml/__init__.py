"""FakeNvmlLibrary: the NVML C API of a simulated node, for ``pynvml.nvmlLib``.

pynvml looks each C symbol up with ``getattr(nvmlLib, name)``; the library is composed of one
mixin per NVML API area (one file each), all answering from the same ``SimulatedNode``:

- ``system``: nvmlInit*/nvmlShutdown, nvmlSystem*, device count and handles;
- ``identity``: name, UUID, serial, PCI info, NUMA and CPU affinity, compute mode;
- ``memory``: framebuffer and BAR1 memory;
- ``power``: utilisation, power, energy, temperature, fans, clocks, clock-event reasons;
- ``pcie``: link generation/width, replay counter, throughput;
- ``ecc``: ECC counters, retired pages, row remapping;
- ``nvlink``: link state, version, error counters, remote endpoints;
- ``topology``: common PCIe ancestor, nearest GPUs, peer-to-peer status;
- ``fields``: nvmlDeviceGetFieldValues;
- ``processes``: running processes and per-process utilisation;
- ``events``: event sets (XIDs, ECC, GPU lost);
- ``mig``: MIG mode, GPU instances and their profiles and placements;
- ``mig_compute``: MIG compute instances inside GPU instances;
- ``mig_devices``: MIG device handles, and the device calls that also answer for a MIG device
  (UUID, name, memory, processes; utilization is NOT_SUPPORTED). It comes first in the bases:
  those symbols pass a whole GPU's handle on to their area's mixin.

A symbol the fake driver lacks is simply not defined, so pynvml raises
``NVMLError_FunctionNotFound`` as with an old driver. Calling conventions: ``_base``.
"""

from __future__ import annotations

from .ecc import EccMixin
from .events import EventsMixin
from .fields import FieldValuesMixin
from .identity import IdentityMixin
from .memory import MemoryMixin
from .mig import MigMixin
from .mig_compute import ComputeInstancesMixin
from .mig_devices import MigDevicesMixin
from .nvlink import NvLinkMixin
from .pcie import PcieMixin
from .power import PowerThermalClocksMixin
from .processes import ProcessesMixin
from .system import SystemMixin
from .topology import TopologyMixin

__all__ = ["FakeNvmlLibrary"]


class FakeNvmlLibrary(
    MigDevicesMixin,
    MigMixin,
    ComputeInstancesMixin,
    SystemMixin,
    IdentityMixin,
    MemoryMixin,
    PowerThermalClocksMixin,
    PcieMixin,
    EccMixin,
    NvLinkMixin,
    TopologyMixin,
    FieldValuesMixin,
    ProcessesMixin,
    EventsMixin,
):
    """The C symbols of NVML, answered from a ``SimulatedNode`` (``FakeNvmlLibrary(node)``)."""
