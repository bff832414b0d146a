"""Put a simulated node's fake NVML library under pynvml (``pynvml.nvmlLib``), and take it away.

After ``install(node)`` every pynvml wrapper (and so nvitop, nvitop-exporter and our own
``runtimekit.gpu``) talks to the simulated driver; ``_nvmlGetFunctionPointer_cache`` is cleared
so no symbol of a previous library survives. See slicing.md section 4, "Option A".
"""

from __future__ import annotations

import pynvml

from .node import SimulatedNode
from .nvml import FakeNvmlLibrary

__all__ = ["install", "uninstall", "installed"]


def install(node: SimulatedNode) -> FakeNvmlLibrary:
    """Make ``node`` the NVML library pynvml uses; replaces any earlier one. Returns the library."""
    lib = FakeNvmlLibrary(node)
    with pynvml.libLoadLock:
        pynvml.nvmlLib = lib
        pynvml._nvmlGetFunctionPointer_cache.clear()
        pynvml._nvmlLib_refcount = 0
    return lib


def uninstall() -> None:
    """Restore pynvml to "no library loaded" (``nvmlLib = None``) and clear its symbol cache."""
    with pynvml.libLoadLock:
        pynvml.nvmlLib = None
        pynvml._nvmlGetFunctionPointer_cache.clear()
        pynvml._nvmlLib_refcount = 0


def installed() -> FakeNvmlLibrary | None:
    """The fake library pynvml currently uses, if any."""
    lib = pynvml.nvmlLib
    return lib if isinstance(lib, FakeNvmlLibrary) else None
