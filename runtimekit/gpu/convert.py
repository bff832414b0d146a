"""Conversions at the NVML boundary: NVML's units to base units, and readings mapped through."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from runtimekit.gpu.types import Reading, is_available

MHZ = 1e6  # NVML clocks are in MHz
MILLI = 1e-3  # NVML power in mW, energy in mJ
KIB = 1024  # NVLink throughput fields count KiB


def map_reading(value: Any, convert: Callable[[Any], Any]) -> Reading[Any]:
    """Apply ``convert`` to a real reading; pass ``Unavailable`` through."""
    return convert(value) if is_available(value) else value
