"""The exposition cache: render at most once per ``state.version`` and format, off the event loop.

A scrape never reaches NVML: collectors read the published ``NodeState``. Rendering still costs CPU,
so it runs in an executor thread, once per (version, format): concurrent scrapes of the same
version await one shared render (single flight), and later scrapes get the cached bytes until the
sampler publishes again. The gzip variant is cached alongside. Values that depend on wall time
(``runtimekit_snapshot_age_seconds``) therefore reflect render time, as their HELP says.
"""

from __future__ import annotations

import asyncio
import gzip as gzip_module
from concurrent.futures import Executor
from typing import Callable, Literal

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4
from prometheus_client.exposition import generate_latest as generate_text
from prometheus_client.openmetrics.exposition import CONTENT_TYPE_LATEST as CONTENT_TYPE_OPENMETRICS
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics

from runtimekit.state import NodeState

Format = Literal["text", "openmetrics"]

CONTENT_TYPES: dict[str, str] = {
    "text": CONTENT_TYPE_PLAIN_0_0_4,  # text/plain; version=0.0.4; charset=utf-8
    "openmetrics": CONTENT_TYPE_OPENMETRICS,  # application/openmetrics-text; version=1.0.0; charset=utf-8
}

_GENERATORS: dict[str, Callable[[CollectorRegistry], bytes]] = {
    "text": generate_text,
    "openmetrics": generate_openmetrics,
}

_Key = tuple[int, str, bool]  # (state version, format, gzip)


def _gzip(body: bytes) -> bytes:
    # mtime=0 keeps the compressed bytes a pure function of the body (stable goldens, ETags).
    return gzip_module.compress(body, compresslevel=6, mtime=0)


class ExpositionCache:
    """Holds the ``CollectorRegistry`` and serves its rendered exposition per state version."""

    def __init__(self, state: NodeState, registry: CollectorRegistry, *, executor: Executor | None = None) -> None:
        self._state = state
        self._registry = registry
        self._executor = executor  # None: the loop's default executor
        self._results: dict[_Key, bytes] = {}
        self._inflight: dict[_Key, asyncio.Future[bytes]] = {}
        self.renders = 0  # registry renders performed (for tests and self-inspection)

    @property
    def registry(self) -> CollectorRegistry:
        return self._registry

    async def render(self, fmt: Format = "text", gzip: bool = False) -> bytes:
        """The exposition in ``fmt`` ("text": Prometheus 0.0.4; "openmetrics": OpenMetrics 1.0.0)."""
        if fmt not in _GENERATORS:
            raise ValueError(f"unknown exposition format {fmt!r}; allowed: text, openmetrics")
        version = self._state.version
        body = await self._once((version, fmt, False), lambda: self._generate(fmt))
        if not gzip:
            return body
        return await self._once((version, fmt, True), lambda: _gzip(body))

    def _generate(self, fmt: str) -> bytes:
        self.renders += 1
        return _GENERATORS[fmt](self._registry)

    async def _once(self, key: _Key, work: Callable[[], bytes]) -> bytes:
        cached = self._results.get(key)
        if cached is not None:
            return cached
        future = self._inflight.get(key)
        if future is None:
            loop = asyncio.get_running_loop()
            future = loop.create_task(self._run(key, loop, work))
            self._inflight[key] = future
        # shield: a scrape that is cancelled (client went away) must not cancel the shared render.
        return await asyncio.shield(future)

    async def _run(self, key: _Key, loop: asyncio.AbstractEventLoop, work: Callable[[], bytes]) -> bytes:
        try:
            result = await loop.run_in_executor(self._executor, work)
        finally:
            self._inflight.pop(key, None)
        version = key[0]
        # Keep only the newest version's results; a late render of an older version is not stored.
        if all(k[0] <= version for k in self._results):
            for stale in [k for k in self._results if k[0] < version]:
                del self._results[stale]
            self._results[key] = result
        return result
