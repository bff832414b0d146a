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

import functools
import logging
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


REAL_ERRORS = ("error", "no_permission")  # "not supported" and "function not found" are facts, not errors


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
        """Call a pynvml wrapper by name; errors become ``Unavailable`` (GPU lost raises)."""
        function = getattr(pynvml, wrapper, None)
        if function is None:
            return self._missing(wrapper)
        try:
            return function(*args, **kwargs)
        except pynvml.NVMLError as error:
            return self._map_error(wrapper, error)

    def call_versioned(self, name: str, variants: Sequence[Variant], *args: Any) -> Any:
        """Call the newest variant of a versioned function the driver has, remembering the choice.

        ``name`` identifies the logical call for the log line and the cache; ``variants`` are
        newest first. A variant missing from pynvml or from the driver is skipped once and
        never tried again.
        """
        start = self._chosen_variant.get(name, 0)
        for position in range(start, len(variants)):
            variant = variants[position]
            function = getattr(pynvml, variant.wrapper, None)
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
