"""How every room names a device: GPU and MIG references, PCI addresses, kubelet device ids.

- ``PciAddress``: one normal form, ``dddd:bb:dd.f`` in lower case with a four-digit domain, as Linux
  names devices under /sys/bus/pci/devices. NVML's ``busId`` ("00000000:05:00.0", eight-digit domain,
  upper case), nvidia-smi's, sysfs's and the short "05:00.0" all parse to it.
- ``GpuRef``: a whole GPU by UUID (stable across reboots and index changes), NVML index and PCI address.
- ``MigRef``: a MIG device: its parent GPU, GPU and compute instance ids and its own ``MIG-…`` UUID.
- ``DeviceId``: what the kubelet hands a container (the device plugin's advertised ids):
  ``GPU-<uuid>`` a whole GPU, ``GPU-<uuid>::<n>`` replica n of a time-shared GPU (the NVIDIA device
  plugin's sharing ids), ``MIG-<uuid>`` a MIG device. Parsed here and nowhere else.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Literal

_PCI = re.compile(r"^(?:(?P<domain>[0-9a-fA-F]{1,8}):)?(?P<bus>[0-9a-fA-F]{2}):(?P<device>[0-9a-fA-F]{2})\.(?P<function>[0-7])$")


@dataclass(frozen=True, slots=True, order=True)
class PciAddress:
    domain: int
    bus: int
    device: int
    function: int

    @classmethod
    def parse(cls, text: str) -> PciAddress:
        """Any common spelling -> the address; ValueError naming the rule otherwise."""
        match = _PCI.match(text.strip()) if isinstance(text, str) else None
        if match is None:
            raise ValueError(f"PCI address: must be [domain:]bus:device.function in hex, got {text!r}")
        domain = int(match["domain"] or "0", 16)
        if domain > 0xFFFF:
            raise ValueError(f"PCI address: domain must be at most ffff, got {text!r}")
        return cls(domain, int(match["bus"], 16), int(match["device"], 16), int(match["function"]))

    def __str__(self) -> str:
        return f"{self.domain:04x}:{self.bus:02x}:{self.device:02x}.{self.function}"

    @property
    def nvml(self) -> str:
        """The spelling NVML's ``busId`` and nvidia-smi use: eight-digit domain, upper case."""
        return f"{self.domain:08X}:{self.bus:02X}:{self.device:02X}.{self.function}"


def normal_pci(text: str) -> str:
    """The normal spelling of a PCI address (``0000:05:00.0``); ValueError when it is not one."""
    return str(PciAddress.parse(text))


@dataclass(frozen=True, slots=True)
class GpuRef:
    """A whole GPU: ``uuid`` ("GPU-…", as NVML and nvidia-smi print it), NVML ``index``, PCI address."""

    uuid: str
    index: int
    pci: PciAddress | None = None


@dataclass(frozen=True, slots=True)
class MigRef:
    """A MIG device: its ``parent`` GPU, GPU instance and compute instance ids, and its "MIG-…" UUID."""

    parent: GpuRef
    gpu_instance_id: int
    compute_instance_id: int
    uuid: str


DeviceKind = Literal["gpu", "replica", "mig"]


@dataclass(frozen=True, slots=True)
class DeviceId:
    """A kubelet device id, parsed: ``uuid`` is the GPU's ("GPU-…") or the MIG device's ("MIG-…");
    ``replica`` is the shared replica's number for ``GPU-…::N``."""

    kind: DeviceKind
    uuid: str
    replica: int | None = None

    @property
    def gpu_uuid(self) -> str | None:
        """The physical GPU's UUID when the id names it (a MIG id needs NVML to find its parent)."""
        return self.uuid if self.kind in ("gpu", "replica") else None


@functools.lru_cache(maxsize=4096)
def parse_device_id(text: str) -> DeviceId | None:
    """The kubelet device id ``text`` parsed, or None when it is no GPU id we know (another
    plugin's resource, a malformed id): such a device is simply not ours. Memoised: the same ids
    come back from the kubelet every cycle (a DeviceId is immutable)."""
    base, sep, rest = text.partition("::")
    if base.startswith("GPU-") and len(base) > 4:
        if not sep:
            return DeviceId("gpu", base)
        return DeviceId("replica", base, int(rest)) if rest.isdigit() else None
    if base.startswith("MIG-") and len(base) > 4 and not sep:
        return DeviceId("mig", base)
    return None
