"""The exposition cache: render at most once per ``state.version`` and format, off the event loop.

A scrape never reaches NVML: collectors read the published ``NodeState``. Rendering still costs CPU,
so it runs in an executor thread (``render.py``, a fast renderer equal to prometheus_client's
output), once per (version, format): concurrent scrapes of the same
version await one shared render (single flight), and later scrapes get the cached bytes until the
sampler publishes again. The gzip variant is cached alongside. Values that depend on wall time
(``runtimekit_snapshot_age_seconds``) therefore reflect render time, as their HELP says.
"""

from __future__ import annotations

import asyncio
import gzip as gzip_module
from collections.abc import Callable
from concurrent.futures import Executor
from typing import Literal

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4
from prometheus_client.openmetrics.exposition import CONTENT_TYPE_LATEST as CONTENT_TYPE_OPENMETRICS

from runtimekit.exporter.render import render as render_families
from runtimekit.state import NodeState

Format = Literal["text", "openmetrics"]

CONTENT_TYPES: dict[str, str] = {
    "text": CONTENT_TYPE_PLAIN_0_0_4,  # text/plain; version=0.0.4; charset=utf-8
    "openmetrics": CONTENT_TYPE_OPENMETRICS,  # application/openmetrics-text; version=1.0.0; charset=utf-8
}

_Key = tuple[int, str, bool]  # (state version, format, gzip)


def _gzip(body: bytes) -> bytes:
    # mtime=0 keeps the compressed bytes a pure function of the body (stable goldens, ETags).
    # Level 1: a third of level 6's CPU for ~15 % more bytes on this repetitive text.
    return gzip_module.compress(body, compresslevel=1, mtime=0)


class ExpositionCache:
    """Holds the ``CollectorRegistry`` and serves its rendered exposition per state version."""

    def __init__(
        self,
        state: NodeState,
        registry: CollectorRegistry,
        *,
        executor: Executor | None = None,
        sample_interval_seconds: float = 1.0,
    ) -> None:
        self._state = state
        self._registry = registry
        self._executor = executor  # None: the loop's default executor
        self._results: dict[_Key, bytes] = {}
        self._inflight: dict[_Key, asyncio.Future[bytes]] = {}
        self._forecast = ScrapeForecast(sample_interval_seconds)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._check: asyncio.TimerHandle | None = None
        state.subscribe(self._published)
        self.renders = 0  # registry renders performed (for tests and self-inspection)
        self.prerenders = 0  # renders started ahead of an expected scrape

    @property
    def registry(self) -> CollectorRegistry:
        return self._registry

    async def render(self, fmt: Format = "text", gzip: bool = False) -> bytes:
        """The exposition in ``fmt`` ("text": Prometheus 0.0.4; "openmetrics": OpenMetrics 1.0.0)."""
        if fmt not in CONTENT_TYPES:
            raise ValueError(f"unknown exposition format {fmt!r}; allowed: text, openmetrics")
        self._loop = asyncio.get_running_loop()
        self._forecast.scraped(fmt, gzip, self._loop.time())
        return await self._render(fmt, gzip)

    async def _render(self, fmt: Format, gzip: bool) -> bytes:
        version = self._state.version
        plain_key, gzip_key = (version, fmt, False), (version, fmt, True)
        key = gzip_key if gzip else plain_key
        cached = self._results.get(key)
        if cached is not None:
            return cached
        plain = self._results.get(plain_key)
        if plain is not None:  # only the compression is missing
            return await self._once(key, lambda: {gzip_key: _gzip(plain)})
        # One executor job renders (and compresses, when asked): one hop, not two.
        return await self._once(key, lambda: self._generate(plain_key, gzip_key if gzip else None))

    def _generate(self, plain_key: _Key, gzip_key: _Key | None) -> dict[_Key, bytes]:
        self.renders += 1
        body = render_families(self._registry.collect(), plain_key[1])
        return {plain_key: body} if gzip_key is None else {plain_key: body, gzip_key: _gzip(body)}

    async def _once(self, key: _Key, work: Callable[[], dict[_Key, bytes]]) -> bytes:
        """Run ``work`` once for ``key`` however many scrapes ask concurrently; store its results."""
        future = self._inflight.get(key)
        if future is None:
            loop = asyncio.get_running_loop()
            future = loop.create_task(self._run(key, loop, work))
            self._inflight[key] = future
        # shield: a scrape that is cancelled (client went away) must not cancel the shared render.
        return await asyncio.shield(future)

    async def _run(
        self, key: _Key, loop: asyncio.AbstractEventLoop, work: Callable[[], dict[_Key, bytes]]
    ) -> bytes:
        try:
            results = await loop.run_in_executor(self._executor, work)
        finally:
            self._inflight.pop(key, None)
        version = key[0]
        # Keep only the newest version's results; a late render of an older version is not stored.
        if all(k[0] <= version for k in self._results):
            for stale in [k for k in self._results if k[0] < version]:
                del self._results[stale]
            self._results.update(results)
        return results[key]

    # -- rendering ahead of a periodic scraper ---------------------------------------------------

    def _published(self) -> None:
        """A new sample or attribution was published (any thread): look again once it settles."""
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._settle)

    def _settle(self) -> None:
        if self._check is None and self._loop is not None:
            # The attribution of a sample is published shortly after the sample: wait for both.
            self._check = self._loop.call_later(SETTLE_SECONDS, self._prerender_due)

    def _prerender_due(self) -> None:
        self._check = None
        assert self._loop is not None
        for fmt, gzip in self._forecast.due(self._loop.time()):
            self.prerenders += 1
            self._loop.create_task(self._render(fmt, gzip))  # single flight, cached for the scrape


SETTLE_SECONDS = 0.1


class ScrapeForecast:
    """When a periodic scraper will come next, per (format, gzip), from its last two scrapes.

    Prometheus scrapes a target at a fixed interval. If its next scrape is expected before the
    next sample, the exposition of the current sample is what it will get: render it now, so the
    scrape is served from the cache instead of waiting for a render. A render happens once per
    scrape either way; only its timing moves. Irregular scrapers simply get no forecast.
    """

    def __init__(self, sample_interval_seconds: float) -> None:
        self.sample_interval = sample_interval_seconds
        self._last: dict[tuple[str, bool], float] = {}
        self._period: dict[tuple[str, bool], float] = {}

    def scraped(self, fmt: str, gzip: bool, now: float) -> None:
        key = (fmt, gzip)
        last = self._last.get(key)
        if last is not None and 0.2 <= now - last <= 600:
            self._period[key] = now - last
        self._last[key] = now

    def due(self, now: float) -> list[tuple[str, bool]]:
        """The (format, gzip) variants whose next scrape comes before the next sample."""
        due = []
        for key, period in self._period.items():
            expected = self._last[key] + period
            while expected < now - period / 2:  # scrapes it skipped: keep the phase
                expected += period
            if expected <= now + self.sample_interval:  # no new sample before it (or it is late)
                due.append(key)
        return due
