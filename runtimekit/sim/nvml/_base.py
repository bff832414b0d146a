"""Shared plumbing of the fake NVML library: return codes, ctypes helpers and the call wrappers.

pynvml looks each C symbol up with ``getattr(nvmlLib, name)`` and calls it with ctypes
arguments; every method of the library is one C symbol (same name, same argument order as nvml.h
and the pynvml wrapper that calls it) returning an ``nvmlReturn_t`` int. Out-parameters arrive as
``ctypes.byref(x)`` (the target is ``ref._obj``), arrays as ctypes arrays, strings as a
``create_string_buffer`` plus its length.

Device handles are opaque pointers whose value encodes the GPU index (``_DEV_BASE + index``);
nothing ever dereferences them. ``_device`` wraps every per-device symbol: initialisation
(NVML_ERROR_UNINITIALIZED), the handle (INVALID_ARGUMENT), then the node's injected device error
(GPU_IS_LOST or a ``driver-error``). Return codes: nvml.h ``nvmlReturn_t``.
"""

from __future__ import annotations

import ctypes
import functools
import struct
from collections.abc import Callable
from typing import Any

from ..events import NO_INSTANCE
from ..node import SimulatedNode

SUCCESS, UNINITIALIZED, INVALID_ARGUMENT, NOT_SUPPORTED = 0, 1, 2, 3
CORRUPTED_INFOROM = 14  # NVML_ERROR_CORRUPTED_INFOROM
NOT_FOUND, INSUFFICIENT_SIZE, TIMEOUT, GPU_IS_LOST, VERSION_MISMATCH = 6, 7, 10, 15, 25

_DEV_BASE = 0x7E57_0000_1000
_HANDLES_KEPT = 1024  # decoded handles remembered (``_gpu_of``)
_NO_ID = NO_INSTANCE  # gpuInstanceId / computeInstanceId of a whole (non-MIG) GPU


def _v(x: Any) -> Any:
    """Python value of a ctypes scalar or a plain Python value."""
    return x.value if hasattr(x, "value") and not isinstance(x, ctypes.Array) else x


def _out(ref: Any, value: Any) -> None:
    ref._obj.value = value


def _obj(ref: Any) -> Any:
    """The object behind ``byref(x)``, or ``x`` itself when passed directly."""
    return getattr(ref, "_obj", ref)


def _ptr(value: Any) -> int | None:
    if value is None:
        return None
    try:
        return ctypes.cast(value, ctypes.c_void_p).value
    except (ctypes.ArgumentError, TypeError):
        return None


def _set_ptr(ref: Any, addr: int) -> None:
    ctypes.c_void_p.from_buffer(_obj(ref)).value = addr


def _put_str(buf: Any, length: Any, text: str) -> int:
    raw = text.encode()
    if len(raw) + 1 > _v(length):
        return INSUFFICIENT_SIZE
    buf.value = raw
    return SUCCESS


def _bytes_of(array: Any, layout: struct.Struct) -> memoryview:
    """The caller's ctypes array as writable bytes, after checking its rows have ``layout``'s size
    (answers are packed into it: pynvml's structs override attribute access in Python)."""
    if ctypes.sizeof(array._type_) != layout.size:
        raise TypeError(f"{array._type_.__name__}: {ctypes.sizeof(array._type_)} bytes a row, the fake "
                        f"writes {layout.size}")
    return memoryview(array).cast("B")


def _fill_pci(info: Any, bus_id: str, device_id: int, subsystem_id: int) -> None:
    """Fill an nvmlPciInfo_t from "00000000:18:00.0" (domain:bus:device.function)."""
    domain, bus, rest = bus_id.split(":")
    dev = rest.split(".")[0]
    info.busIdLegacy = f"{domain[-4:]}:{bus}:{rest}".encode()
    info.busId = bus_id.encode()
    info.domain, info.bus, info.device = int(domain, 16), int(bus, 16), int(dev, 16)
    info.pciDeviceId, info.pciSubSystemId = device_id, subsystem_id

def _device(fn: Callable[..., int]) -> Callable[..., int]:
    """Wrap a per-device symbol: init check, handle -> GPU index, injected device errors."""

    @functools.wraps(fn)
    def call(self: _LibraryBase, handle: Any, *args: Any) -> int:
        if not self._refcount:
            return UNINITIALIZED
        gpu = self._gpu_of(handle)
        if gpu is None:
            return INVALID_ARGUMENT
        err = self.node.device_error(gpu)
        if err:
            return err
        return fn(self, gpu, *args)

    return call


def _system(fn: Callable[..., int]) -> Callable[..., int]:
    """Wrap a system-level symbol: init check."""

    @functools.wraps(fn)
    def call(self: _LibraryBase, *args: Any) -> int:
        if not self._refcount:
            return UNINITIALIZED
        return fn(self, *args)

    return call


class _ErrorString:
    """``nvmlErrorString``: pynvml sets ``restype`` on it, so it must accept attributes."""

    restype: Any = None

    def __call__(self, result: Any) -> bytes:
        return f"NVML error {_v(result)}".encode()


class _LibraryBase:
    """State every NVML area shares: the node, the init refcount, handle decoding."""

    def __init__(self, node: SimulatedNode) -> None:
        self.node = node
        self._refcount = 0
        self.nvmlErrorString = _ErrorString()
        self._handles: dict[int, tuple[Any, int | None]] = {}  # id(handle) -> (handle, GPU index)

    def _gpu_of(self, handle: Any) -> int | None:
        # The caller keeps its handle objects between calls: decode each once (ctypes.cast is the
        # costly part of every per-device call). Keyed by id with the object itself kept, so an id
        # reused by a new object never matches; cleared when handles made per call pile up.
        known = self._handles.get(id(handle))
        if known is not None and known[0] is handle:
            return known[1]
        addr = _ptr(handle)
        i = addr - _DEV_BASE if addr is not None else -1
        gpu = i if 0 <= i < self.node.gpu_count else None
        if len(self._handles) >= _HANDLES_KEPT:
            self._handles.clear()
        self._handles[id(handle)] = (handle, gpu)
        return gpu

    def _model(self, gpu: int) -> Any:
        return self.node.gpu(gpu).model
