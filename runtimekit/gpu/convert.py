"""Conversions at the NVML boundary: NVML's units to base units, and readings mapped through."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from runtimekit.gpu.types import Reading, Unavailable, is_available
from runtimekit.state.refs import normal_pci

MHZ = 1e6  # NVML clocks are in MHz
MILLI = 1e-3  # NVML power in mW, energy in mJ
KIB = 1024  # NVLink throughput fields count KiB


def map_reading(value: Any, convert: Callable[[Any], Any]) -> Reading[Any]:
    """Apply ``convert`` to a real reading; pass ``Unavailable`` through."""
    return convert(value) if is_available(value) else value


def nvml_text(value: Any) -> str:
    """A string NVML answered: pynvml gives bytes or str depending on its version."""
    return value.decode() if isinstance(value, bytes) else str(value)


def bus_id(value: Any) -> Reading[str]:
    """A PCI bus id as NVML gives it (bytes or str), in the one spelling (``0000:05:00.0``); an
    unparseable one is an error reading, never an exception in the sampling cycle."""
    text = nvml_text(value)
    try:
        return normal_pci(text)
    except ValueError:
        return Unavailable("error", f"unparseable PCI bus id {text!r}")
