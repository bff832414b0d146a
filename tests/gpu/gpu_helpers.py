"""Helpers for the NVML-layer tests: a hand-moved clock and a wrapper around the fake NVML library.

``PatchedLib`` sits between pynvml and ``runtimekit.sim.FakeNvmlLibrary`` (it becomes
``pynvml.nvmlLib``): it hides C symbols (pynvml then raises NVML_ERROR_FUNCTION_NOT_FOUND, as
with an older driver), forces a return code for chosen symbols, and counts lookups and calls.
The simulator itself is not changed.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import pynvml

# nvmlReturn_t codes used by the tests (nvml.h).
NOT_SUPPORTED = pynvml.NVML_ERROR_NOT_SUPPORTED  # 3
NO_PERMISSION = pynvml.NVML_ERROR_NO_PERMISSION  # 4
TIMEOUT = pynvml.NVML_ERROR_TIMEOUT  # 10
FUNCTION_NOT_FOUND = pynvml.NVML_ERROR_FUNCTION_NOT_FOUND  # 13
UNKNOWN = pynvml.NVML_ERROR_UNKNOWN  # 999


class FakeClock:
    """Unix seconds that the test moves by hand."""

    def __init__(self, start: float = 1_750_000_000.0) -> None:
        self.t = start

    def __call__(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += seconds


class PatchedLib:
    """Delegates every C symbol to ``lib`` except hidden ones (AttributeError) and forced codes.

    ``lookups[name]`` counts how often pynvml asked for a symbol that is hidden (pynvml caches
    found symbols but not missing ones, so this counts probes); ``calls[name]`` counts calls of
    the symbols named in ``count``.
    """

    def __init__(
        self,
        lib: Any,
        *,
        hide: Iterable[str] = (),
        errors: Mapping[str, int] | None = None,
        count: Iterable[str] = (),
    ) -> None:
        self._lib = lib
        self._hide = frozenset(hide)
        self._errors = dict(errors or {})
        self._count = frozenset(count)
        self.lookups: Counter[str] = Counter()
        self.calls: Counter[str] = Counter()

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        if name in self._hide:
            self.lookups[name] += 1
            raise AttributeError(name)
        if name in self._errors:
            code = self._errors[name]
            return self._counted(name, lambda *args: code)
        target = getattr(self._lib, name)
        if name in self._count:
            return self._counted(name, target)
        return target

    def _counted(self, name: str, function: Callable[..., int]) -> Callable[..., int]:
        def call(*args: Any) -> int:
            self.calls[name] += 1
            return function(*args)

        return call


def use_library(lib: Any) -> None:
    """Make ``lib`` pynvml's library and forget every symbol pynvml cached from the previous one."""
    with pynvml.libLoadLock:
        pynvml.nvmlLib = lib
        pynvml._nvmlGetFunctionPointer_cache.clear()
