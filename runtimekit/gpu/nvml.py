"""The one choke point for NVML: the only module in Runtime Kit that imports pynvml.

It turns NVML's error codes into values the rest of the agent can reason about:

- NVML_ERROR_NOT_SUPPORTED, NO_PERMISSION and any other per-call error become an ``Unavailable``
  reading, so the sample is omitted (never exported as 0 or -1);
- a function the driver does not have (NVML_ERROR_FUNCTION_NOT_FOUND, or a wrapper this pynvml
  lacks) is logged once and then answered as ``Unavailable("function_not_found")``;
- versioned symbols (``_v2``, ``_v3``, ``…V``) are probed newest first and the first that the
  driver has is remembered;
- NVML_ERROR_GPU_IS_LOST raises ``GpuLostError`` so that the caller marks that one GPU lost.

All methods block: call them from an executor thread, never from the event loop.
"""

from __future__ import annotations

import ctypes
import functools
import logging
import struct
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pynvml

from runtimekit.gpu.types import Unavailable

log = logging.getLogger(__name__)

_REASONS = {
    pynvml.NVML_ERROR_NOT_SUPPORTED: "not_supported",
    pynvml.NVML_ERROR_NO_PERMISSION: "no_permission",
    pynvml.NVML_ERROR_FUNCTION_NOT_FOUND: "function_not_found",
}


class GpuLostError(Exception):
    """NVML answered NVML_ERROR_GPU_IS_LOST: the device fell off the bus or is inaccessible."""


class NvmlInitError(Exception):
    """NVML could not be loaded or initialised; ``str()`` says why."""


class NvmlCallError(Exception):
    """A call made through ``NvmlSession.control`` failed: ``wrapper`` is the call, ``name`` the
    NVML error (``error_name``: NVML_ERROR_IN_USE, ...)."""

    def __init__(self, wrapper: str, name: str) -> None:
        super().__init__(f"{wrapper}: {name}")
        self.wrapper = wrapper
        self.name = name


@dataclass(frozen=True, slots=True)
class Variant:
    """One candidate for a versioned NVML call: a pynvml wrapper name and how to adapt arguments."""

    wrapper: str
    adapt: Callable[..., tuple[tuple[Any, ...], dict[str, Any]]] | None = None


def error_name(error: Exception) -> str:
    """A short, stable name for an NVML error, e.g. ``NVML_ERROR_TIMEOUT``."""
    code = getattr(error, "value", None)
    return _error_names().get(code, f"NVML_ERROR_{code}") if isinstance(code, int) else f"NVML_ERROR_{code}"


@functools.cache
def _error_names() -> dict[int, str]:
    """NVML's error codes -> their names (pynvml's NVML_ERROR_* constants, first name wins)."""
    names: dict[int, str] = {}
    for name, value in vars(pynvml).items():
        if name.startswith("NVML_ERROR_") and isinstance(value, int):
            names.setdefault(value, name)
    return names


#: What says that NVML, or the GPU a call named, cannot be used now: the call was not refused,
#: the driver or the card is gone (callers wait and retry rather than fail).
NVML_DOWN = (NvmlInitError, GpuLostError)


class NvmlSession:
    """Lazily initialised access to NVML with the error policy above."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._initialized = False
        self._reported_missing: set[str] = set()
        self._chosen_variant: dict[str, int] = {}

    @property
    def initialized(self) -> bool:
        return self._initialized

    def init(self) -> None:
        """Load and initialise NVML (nvmlInit → nvmlInitWithFlags). Raises ``NvmlInitError``."""
        with self._lock:
            if self._initialized:
                return
            try:
                pynvml.nvmlInit()
            except pynvml.NVMLError as error:
                raise NvmlInitError(f"{error_name(error)}: {error}") from error
            except OSError as error:  # a broken library can fail inside ctypes
                raise NvmlInitError(f"loading libnvidia-ml failed: {error}") from error
            self._initialized = True

    def shutdown(self) -> None:
        """nvmlShutdown; harmless when NVML was never initialised."""
        with self._lock:
            if not self._initialized:
                return
            self._initialized = False
            try:
                pynvml.nvmlShutdown()
            except pynvml.NVMLError as error:
                log.debug("nvmlShutdown failed: %s", error)

    def call(self, wrapper: str, *args: Any, **kwargs: Any) -> Any:
        """Call a pynvml wrapper (or a ``ROW_WRAPPERS`` / ``MIG_WRAPPERS`` one) by name; errors become ``Unavailable``
        (GPU lost raises)."""
        function = _wrapper(wrapper)
        if function is None:
            return self._missing(wrapper)
        try:
            return function(*args, **kwargs)
        except pynvml.NVMLError as error:
            return self._map_error(wrapper, error)

    def control(self, wrapper: str, *args: Any, **kwargs: Any) -> Any:
        """Call a wrapper whose errors the caller must tell apart (configuration changes such as
        MIG): an NVML error raises ``NvmlCallError`` naming it, a wrapper missing from pynvml or the
        driver raises it with NVML_ERROR_FUNCTION_NOT_FOUND; GPU lost raises ``GpuLostError``."""
        function = _wrapper(wrapper)
        if function is None:
            raise NvmlCallError(wrapper, "NVML_ERROR_FUNCTION_NOT_FOUND")
        try:
            return function(*args, **kwargs)
        except pynvml.NVMLError as error:
            if error.value == pynvml.NVML_ERROR_GPU_IS_LOST:
                raise GpuLostError(wrapper) from error
            raise NvmlCallError(wrapper, error_name(error)) from error

    def call_versioned(self, name: str, variants: Sequence[Variant], *args: Any) -> Any:
        """Call the newest variant of a versioned function the driver has, remembering the choice.

        ``name`` identifies the logical call for the log line and the cache; ``variants`` are
        newest first. A variant missing from pynvml or from the driver is skipped once and
        never tried again.
        """
        start = self._chosen_variant.get(name, 0)
        for position in range(start, len(variants)):
            variant = variants[position]
            function = _wrapper(variant.wrapper)
            if function is None:
                continue
            call_args, call_kwargs = variant.adapt(*args) if variant.adapt else (args, {})
            try:
                result = function(*call_args, **call_kwargs)
            except pynvml.NVMLError as error:
                if error.value == pynvml.NVML_ERROR_FUNCTION_NOT_FOUND:
                    continue
                self._chosen_variant[name] = position
                return self._map_error(variant.wrapper, error)
            self._chosen_variant[name] = position
            return result
        self._chosen_variant[name] = len(variants)
        return self._missing(name)

    def _missing(self, name: str) -> Unavailable:
        if name not in self._reported_missing:
            self._reported_missing.add(name)
            log.warning("NVML function %s is not available in this driver; its readings are omitted", name)
        return Unavailable("function_not_found", name)

    def _map_error(self, wrapper: str, error: pynvml.NVMLError) -> Unavailable:
        if error.value == pynvml.NVML_ERROR_GPU_IS_LOST:
            raise GpuLostError(wrapper) from error
        if error.value == pynvml.NVML_ERROR_FUNCTION_NOT_FOUND:
            return self._missing(wrapper)
        reason = _REASONS.get(error.value, "error")
        return Unavailable(reason, f"{wrapper}: {error_name(error)}")


def memory_v2_args(handle: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """Arguments for nvmlDeviceGetMemoryInfo asking for the v2 struct (with ``reserved``)."""
    return (handle,), {"version": pynvml.nvmlMemory_v2}


# -- arrays of structs, read as rows ----------------------------------------------------------------
#
# pynvml turns every element of a process list into a "friendly object" (a dict of every field read
# through its Python-level __getattribute__): ~6 µs a process, so 512 processes cost ~3 ms a
# cycle. The wrappers below make the same C calls in the same order as pynvml's (the count first,
# then an array oversized as pynvml does) and unpack the array in one C-level pass into tuples of
# the struct's fields, in declaration order.

_STRUCT_CODES: dict[Any, str] = {ctypes.c_uint: "I", ctypes.c_ulonglong: "Q"}
NOT_AVAILABLE_U64 = 0xFFFF_FFFF_FFFF_FFFF  # NVML_VALUE_NOT_AVAILABLE_ulonglong (WDDM: memory not known)


@functools.cache
def _layout(struct_type: type[ctypes.Structure]) -> struct.Struct:
    """The ``struct`` layout of a ctypes structure of unsigned ints (native alignment, as ctypes lays it out)."""
    layout = struct.Struct("@" + "".join(_STRUCT_CODES[field[1]] for field in struct_type._fields_))
    if layout.size != ctypes.sizeof(struct_type):
        raise TypeError(f"{struct_type.__name__}: padding differs from ctypes' ({layout.size} != {ctypes.sizeof(struct_type)})")
    return layout


def _rows(struct_type: type[ctypes.Structure], array: Any, count: int) -> list[tuple[int, ...]]:
    return list(_layout(struct_type).iter_unpack(ctypes.string_at(array, count * ctypes.sizeof(struct_type))))


def _process_rows(symbol: str) -> Callable[[Any], list[tuple[int, ...]]]:
    """nvmlDevice{Compute,Graphics}RunningProcesses_v2/_v3 as rows (pid, used GPU memory in bytes,
    GPU instance id, compute instance id); memory NVML cannot tell is ``NOT_AVAILABLE_U64``."""

    def read(handle: Any) -> list[tuple[int, ...]]:
        function = pynvml._nvmlGetFunctionPointer(symbol)
        count = ctypes.c_uint(0)
        ret = function(handle, ctypes.byref(count), None)
        if ret == pynvml.NVML_SUCCESS:
            return []  # no process: NVML answers the size query with success
        if ret != pynvml.NVML_ERROR_INSUFFICIENT_SIZE:
            raise pynvml.NVMLError(ret)
        count.value = count.value * 2 + 5  # room for processes started between the two calls
        array = (pynvml.c_nvmlProcessInfo_v3_t * count.value)()
        pynvml._nvmlCheckReturn(function(handle, ctypes.byref(count), array))
        return _rows(pynvml.c_nvmlProcessInfo_v3_t, array, count.value)

    return read


def _process_utilization_rows(handle: Any, since_us: int) -> list[tuple[int, ...]]:
    """nvmlDeviceGetProcessUtilization as rows (pid, timestamp in µs, SM %, memory %, encoder %,
    decoder %) of the samples newer than ``since_us``."""
    function = pynvml._nvmlGetFunctionPointer("nvmlDeviceGetProcessUtilization")
    count, stamp = ctypes.c_uint(0), ctypes.c_ulonglong(since_us)
    ret = function(handle, None, ctypes.byref(count), stamp)
    if ret != pynvml.NVML_ERROR_INSUFFICIENT_SIZE:
        raise pynvml.NVMLError(ret)  # NVML answers a size query with INSUFFICIENT_SIZE, or an error
    array = (pynvml.c_nvmlProcessUtilizationSample_t * count.value)()
    pynvml._nvmlCheckReturn(function(handle, array, ctypes.byref(count), stamp))
    return _rows(pynvml.c_nvmlProcessUtilizationSample_t, array, count.value)


# c_nvmlFieldValue_t: fieldId, scopeId, timestamp (µs), latencyUsec, valueType, nvmlReturn, then the
# 8-byte value union, whose member valueType names (nvmlValueType_t, nvml.h).
_FIELD_VALUE = struct.Struct("@IIqqII8s")
_VALUE_UNION: dict[int, struct.Struct] = {
    pynvml.NVML_VALUE_TYPE_DOUBLE: struct.Struct("@d"),
    pynvml.NVML_VALUE_TYPE_UNSIGNED_INT: struct.Struct("@I"),
    pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG: struct.Struct("@L"),
    pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG: struct.Struct("@Q"),
    pynvml.NVML_VALUE_TYPE_SIGNED_LONG_LONG: struct.Struct("@q"),
    pynvml.NVML_VALUE_TYPE_SIGNED_INT: struct.Struct("@i"),
    pynvml.NVML_VALUE_TYPE_UNSIGNED_SHORT: struct.Struct("@H"),
}
if _FIELD_VALUE.size != ctypes.sizeof(pynvml.c_nvmlFieldValue_t):
    raise TypeError(f"c_nvmlFieldValue_t: layout differs from ctypes' ({_FIELD_VALUE.size} != "
                    f"{ctypes.sizeof(pynvml.c_nvmlFieldValue_t)})")


@functools.lru_cache(maxsize=64)
def _field_request(field_ids: tuple[int | tuple[int, int], ...]) -> bytes:
    """The request array's bytes (fieldId and scopeId set, the rest zero), built once per field list."""
    array = (pynvml.c_nvmlFieldValue_t * len(field_ids))()
    for position, field_id in enumerate(field_ids):
        entry = array[position]
        field, scope = field_id if isinstance(field_id, tuple) else (field_id, 0)
        object.__setattr__(entry, "fieldId", field)
        object.__setattr__(entry, "scopeId", scope)
    return bytes(array)


def _field_value_rows(handle: Any, field_ids: Sequence[int | tuple[int, int]]) -> list[tuple[int, int, int, Any]]:
    """nvmlDeviceGetFieldValues as rows (field id, scope id, nvmlReturn, value): the value is the
    union member ``valueType`` names, None for a field that failed or an unknown value type.

    pynvml fills the request array one Python attribute at a time (~100 fields a GPU with 18
    NVLinks); here it is copied from bytes built once per field list, and the answers unpacked in
    one C-level pass."""
    request = _field_request(tuple(field_ids))
    count = len(field_ids)
    array = (pynvml.c_nvmlFieldValue_t * count).from_buffer_copy(request)
    function = pynvml._nvmlGetFunctionPointer("nvmlDeviceGetFieldValues")
    pynvml._nvmlCheckReturn(function(handle, ctypes.c_int32(count), ctypes.byref(array)))
    rows = []
    for field, scope, _, _, value_type, returned, raw in _FIELD_VALUE.iter_unpack(ctypes.string_at(array, len(request))):
        union = _VALUE_UNION.get(value_type) if returned == pynvml.NVML_SUCCESS else None
        rows.append((field, scope, returned, union.unpack_from(raw)[0] if union is not None else None))
    return rows


# For these symbols the session answers rows, not pynvml's objects (the names stay NVML's, so that
# errors and log lines name the C function that failed).
ROW_WRAPPERS: dict[str, Callable[..., list[tuple[Any, ...]]]] = {
    "nvmlDeviceGetFieldValues": _field_value_rows,
    **{symbol: _process_rows(symbol) for symbol in (
        "nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetComputeRunningProcesses_v2",
        "nvmlDeviceGetGraphicsRunningProcesses_v3", "nvmlDeviceGetGraphicsRunningProcesses_v2",
    )},
    "nvmlDeviceGetProcessUtilization": _process_utilization_rows,
}


# -- MIG calls whose arguments are C arrays or structs ---------------------------------------------
#
# pynvml leaves these arrays to the caller; the wrappers below allocate them, so that no module but
# this one touches pynvml's ctypes types. Same C calls as pynvml's wrappers of the same names.

def _gi_possible_placements(handle: Any, profile_id: int) -> list[tuple[int, int]]:
    """nvmlDeviceGetGpuInstancePossiblePlacements_v2 as (start, size) rows in memory slices: every
    legal placement of the GPU instance profile, free or not (nvml.h). The first call, with no
    array, asks for the count."""
    count = ctypes.c_uint(0)
    pynvml.nvmlDeviceGetGpuInstancePossiblePlacements(handle, profile_id, None, ctypes.byref(count))
    array = (pynvml.c_nvmlGpuInstancePlacement_t * count.value)()
    pynvml.nvmlDeviceGetGpuInstancePossiblePlacements(handle, profile_id, array, ctypes.byref(count))
    return [(int(p.start), int(p.size)) for p in array[: count.value]]


def _create_gi_with_placement(handle: Any, profile_id: int, start: int, size: int) -> Any:
    """nvmlDeviceCreateGpuInstanceWithPlacement at {start, size} (memory slices); the new GPU instance's handle."""
    placement = pynvml.c_nvmlGpuInstancePlacement_t()
    placement.start, placement.size = start, size
    return pynvml.nvmlDeviceCreateGpuInstanceWithPlacement(handle, profile_id, ctypes.byref(placement))


def _instance_handles(read: Callable[..., Any], handle_type: Any) -> Callable[[Any, int, int], list[Any]]:
    """nvmlDeviceGetGpuInstances / nvmlGpuInstanceGetComputeInstances: the handles of the instances of
    one profile in an array of ``capacity`` (the profile's ``instanceCount``, as go-nvml sizes it)."""

    def handles(parent: Any, profile_id: int, capacity: int) -> list[Any]:
        count = ctypes.c_uint(0)
        array = (handle_type * max(capacity, 1))()
        read(parent, profile_id, array, ctypes.byref(count))
        return list(array[: count.value])

    return handles


MIG_WRAPPERS: dict[str, Callable[..., Any]] = {
    "nvmlDeviceGetGpuInstancePossiblePlacements_v2": _gi_possible_placements,
    "nvmlDeviceCreateGpuInstanceWithPlacement": _create_gi_with_placement,
    "nvmlDeviceGetGpuInstances": _instance_handles(pynvml.nvmlDeviceGetGpuInstances, pynvml.c_nvmlGpuInstance_t),
    "nvmlGpuInstanceGetComputeInstances": _instance_handles(
        pynvml.nvmlGpuInstanceGetComputeInstances, pynvml.c_nvmlComputeInstance_t),
}


def _wrapper(name: str) -> Callable[..., Any] | None:
    """A ``ROW_WRAPPERS`` or ``MIG_WRAPPERS`` function by its name, else pynvml's wrapper of that
    name (None: pynvml lacks it)."""
    return ROW_WRAPPERS.get(name) or MIG_WRAPPERS.get(name) or getattr(pynvml, name, None)
