"""FakeNvmlLibrary: the NVML C API of a simulated node, for ``pynvml.nvmlLib``.

pynvml looks each C symbol up with ``getattr(nvmlLib, name)``; the library is composed of one
mixin per NVML API area (one file each), all answering from the same ``SimulatedNode``:

- ``system``: nvmlInit*/nvmlShutdown, nvmlSystem*, device count and handles;
- ``identity``: name, UUID, serial, PCI info, NUMA and CPU affinity, MIG and compute modes;
- ``memory``: framebuffer and BAR1 memory;
- ``power``: utilisation, power, energy, temperature, fans, clocks, clock-event reasons;
- ``pcie``: link generation/width, replay counter, throughput;
- ``ecc``: ECC counters, retired pages, row remapping;
- ``nvlink``: link state, version, error counters, remote endpoints;
- ``fields``: nvmlDeviceGetFieldValues;
- ``processes``: running processes and per-process utilisation;
- ``events``: event sets (XIDs, ECC, GPU lost).

A symbol the fake driver lacks is simply not defined, so pynvml raises
``NVMLError_FunctionNotFound`` as with an old driver. Calling conventions: ``_base``.
"""

from __future__ import annotations

from .ecc import EccMixin
from .events import EventsMixin
from .fields import FieldValuesMixin
from .identity import IdentityMixin
from .memory import MemoryMixin
from .nvlink import NvLinkMixin
from .pcie import PcieMixin
from .power import PowerThermalClocksMixin
from .processes import ProcessesMixin
from .system import SystemMixin

__all__ = ["FakeNvmlLibrary"]


class FakeNvmlLibrary(
    SystemMixin,
    IdentityMixin,
    MemoryMixin,
    PowerThermalClocksMixin,
    PcieMixin,
    EccMixin,
    NvLinkMixin,
    FieldValuesMixin,
    ProcessesMixin,
    EventsMixin,
):
    """The C symbols of NVML, answered from a ``SimulatedNode`` (``FakeNvmlLibrary(node)``)."""
