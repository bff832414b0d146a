"""The exposition cache: render at most once per view and format, off the event loop, and ahead of
periodic scrapers only when it will be used.

A scrape never reaches NVML: collectors read one published ``NodeView``. Rendering still costs CPU,
so it runs in an executor thread (``render.py``, a fast renderer equal to prometheus_client's
output), once per (view version, format): concurrent scrapes of the same view await one shared
render (single flight), and later scrapes get the cached bytes until something is published again.
The gzip variant is cached alongside; it is compressed one family at a time, reusing the
compressed bytes of families that did not change (``gzipparts.py``). Times are exported as
timestamps of the view, so a cached exposition is never wrong about staleness.

Rendering ahead (``run``, the exporter component's task): a sample is followed, a few milliseconds
later, by the attribution and the health verdict made from it. ``run`` watches the state and, once
the followers of the current sample are in (every follower topic that followed the previous sample
was published again after this one), renders the exposition a periodic scraper will get — but only
for the scrapers whose next scrape is forecast before the next sample. A render ahead is therefore
never made stale by the sample's own followers, and a scraper at the sampling interval costs one
render per scrape. Forecasts expire: a scraper that stops coming costs at most one render ahead
(for the scrape it missed), and with no scraper nothing is rendered at all.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from concurrent.futures import Executor
from typing import Literal

from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4
from prometheus_client.openmetrics.exposition import CONTENT_TYPE_LATEST as CONTENT_TYPE_OPENMETRICS

from runtimekit.exporter.family import COUNTER, Family
from runtimekit.exporter.gzipparts import GzipParts
from runtimekit.exporter.render import Renderer
from runtimekit.exporter.timing import CollectorSet
from runtimekit.state import ATTRIBUTION, HEALTH, SAMPLE, NodeState, NodeView

log = logging.getLogger("runtimekit.exporter")

Format = Literal["text", "openmetrics"]

CONTENT_TYPES: dict[str, str] = {
    "text": CONTENT_TYPE_PLAIN_0_0_4,  # text/plain; version=0.0.4; charset=utf-8
    "openmetrics": CONTENT_TYPE_OPENMETRICS,  # application/openmetrics-text; version=1.0.0; charset=utf-8
}

# Topics published as a consequence of a sample (made from it): a render ahead waits for them.
FOLLOWERS: tuple[str, ...] = (ATTRIBUTION, HEALTH)

_Key = tuple[int, str, bool]  # (view version, format, gzip)
_Variant = tuple[str, bool]  # (format, gzip)


class ExpositionCache:
    """Serves the rendered exposition of the state's current view; renders ahead in ``run``."""

    def __init__(
        self,
        state: NodeState,
        collectors: CollectorSet,
        *,
        executor: Executor | None = None,
        sample_interval_seconds: float = 1.0,
    ) -> None:
        self._state = state
        self._collectors = collectors
        self._executor = executor  # None: the loop's default executor
        self._renderers = {fmt: Renderer(fmt) for fmt in CONTENT_TYPES}  # label text cached per format
        self._gzips = {fmt: GzipParts() for fmt in CONTENT_TYPES}  # compressed families, per format
        self._parts: dict[str, tuple[int, list[bytes]]] = {}  # format -> (view version, its last render's parts)
        self._results: dict[_Key, bytes] = {}
        self._inflight: dict[_Key, asyncio.Future[bytes]] = {}
        self.forecast = ScrapeForecast(sample_interval_seconds)
        self.renders = 0  # renders performed (for the self-metric, tests and benchmarks)
        self.prerenders = 0  # of which started ahead of an expected scrape

    async def render(self, fmt: Format = "text", gzip: bool = False) -> bytes:
        """The exposition in ``fmt`` ("text": Prometheus 0.0.4; "openmetrics": OpenMetrics 1.0.0)."""
        if fmt not in CONTENT_TYPES:
            raise ValueError(f"unknown exposition format {fmt!r}; allowed: text, openmetrics")
        self.forecast.scraped(fmt, gzip, asyncio.get_running_loop().time())
        return await self._render(self._state.view(), fmt, gzip)

    async def _render(self, view: NodeView, fmt: str, gzip: bool, ahead: bool = False) -> bytes:
        plain_key, gzip_key = (view.version, fmt, False), (view.version, fmt, True)
        key = gzip_key if gzip else plain_key
        cached = self._results.get(key)
        if cached is not None:
            return cached
        plain = self._results.get(plain_key)
        if plain is not None:  # only the compression is missing
            kept = self._parts.get(fmt)
            parts = kept[1] if kept is not None and kept[0] == view.version else [plain]
            return await self._once(key, lambda: {gzip_key: self._gzips[fmt].compress(parts)})
        # One executor job renders (and compresses, when asked): one hop, not two.
        return await self._once(key, lambda: self._generate(view, plain_key, gzip_key if gzip else None, ahead))

    def _generate(self, view: NodeView, plain_key: _Key, gzip_key: _Key | None, ahead: bool) -> dict[_Key, bytes]:
        self.renders += 1
        self.prerenders += ahead
        fmt = plain_key[1]
        families = self._collectors.collect(view)
        parts = self._renderers[fmt].render_parts([*families, self._self_family()])
        body = b"".join(parts)
        if gzip_key is None:
            if view.version >= self._parts.get(fmt, (0, []))[0]:
                self._parts[fmt] = (view.version, parts)  # for a gzip scrape of the same view
            return {plain_key: body}
        return {plain_key: body, gzip_key: self._gzips[fmt].compress(parts)}

    def _self_family(self) -> Family:
        renders = Family(
            COUNTER,
            "runtimekit_exposition_renders_total",
            "Expositions rendered since the agent started, this one included, by trigger (scrape: a scrape "
            "found no cached exposition of the current view; ahead: rendered before a forecast periodic scrape). "
            "rate() of it over the scrape rate is the renders per scrape.",
            ["trigger"],
        )
        renders.add_metric(["scrape"], float(self.renders - self.prerenders))
        renders.add_metric(["ahead"], float(self.prerenders))
        return renders

    async def _once(self, key: _Key, work: Callable[[], dict[_Key, bytes]]) -> bytes:
        """Run ``work`` once for ``key`` however many scrapes ask concurrently; store its results."""
        future = self._inflight.get(key)
        if future is None:
            loop = asyncio.get_running_loop()
            future = loop.create_task(self._run_job(key, loop, work))
            self._inflight[key] = future
        # shield: a scrape that is cancelled (client went away) must not cancel the shared render.
        return await asyncio.shield(future)

    async def _run_job(
        self, key: _Key, loop: asyncio.AbstractEventLoop, work: Callable[[], dict[_Key, bytes]]
    ) -> bytes:
        try:
            results = await loop.run_in_executor(self._executor, work)
        finally:
            self._inflight.pop(key, None)
        version = key[0]
        # Keep only the newest view's results; a late render of an older view is not stored.
        if all(k[0] <= version for k in self._results):
            for stale in [k for k in self._results if k[0] < version]:
                del self._results[stale]
            self._results.update(results)
        return results[key]

    # -- rendering ahead of periodic scrapers ------------------------------------------------------

    async def run(self) -> None:
        """Render ahead of forecast scrapes until cancelled (the exporter component's task)."""
        loop = asyncio.get_running_loop()
        sample_version = 0
        sample_seen_at = 0.0  # loop time at which the current sample was first seen
        previous_sample_at: float | None = None  # publication time (state clock) of the sample before
        followers: tuple[str, ...] = ()
        done_for = 0  # the sample version whose render-ahead decision was made
        async for view in self._state.watch(SAMPLE, *FOLLOWERS):
            version = view.versions.get(SAMPLE, 0)
            if version == 0:
                continue
            sample_at = view.published_at.get(SAMPLE, 0.0)
            if version != sample_version:
                # The topics that followed the previous sample are the ones to wait for now (a
                # follower switched off or dead stops being waited for after one sample).
                followers = tuple(
                    t for t in FOLLOWERS
                    if previous_sample_at is not None and view.published_at.get(t, float("-inf")) >= previous_sample_at
                )
                previous_sample_at = sample_at
                sample_version, sample_seen_at = version, loop.time()
            if done_for == version or any(view.published_at.get(t, float("-inf")) < sample_at for t in followers):
                continue
            done_for = version
            due = self.forecast.due(loop.time(), next_sample_at=sample_seen_at + self.forecast.sample_interval)
            for fmt, use_gzip in due:
                try:
                    await self._render(self._state.view(), fmt, use_gzip, ahead=True)
                except Exception:  # noqa: BLE001 - a failed render ahead is retried by the scrape itself
                    log.exception("rendering the exposition ahead of a scrape failed")


class ScrapeForecast:
    """When each periodic scraper will come next, per (format, gzip), from its last scrapes.

    Prometheus scrapes a target at a fixed interval. A period is known once two consecutive gaps
    agree (within ``TOLERANCE``), so a person with curl gets no forecast. A gap of a whole number of
    periods (a skipped scrape) keeps the period. The forecast of a scraper expires once it has
    missed its expected scrape by more than half a period: a scraper that went away stops being
    rendered for after one missed scrape.
    """

    TOLERANCE = 0.1  # relative: gaps within 10 % of each other are one period
    MIN_PERIOD, MAX_PERIOD = 0.05, 600.0  # seconds: outside, a gap is no scrape loop's period

    def __init__(self, sample_interval_seconds: float) -> None:
        self.sample_interval = sample_interval_seconds
        self.margin = 0.1 * sample_interval_seconds  # too close to the next sample to be sure which it gets
        self._last: dict[_Variant, float] = {}
        self._gap: dict[_Variant, float] = {}  # the last gap, until a period is confirmed
        self._period: dict[_Variant, float] = {}
        self._rendered_for: dict[_Variant, float] = {}  # the expected scrape last rendered ahead for

    def scraped(self, fmt: str, gzip: bool, now: float) -> None:
        key = (fmt, gzip)
        last = self._last.get(key)
        self._last[key] = now
        if last is None:
            return
        gap = now - last
        if not self.MIN_PERIOD <= gap <= self.MAX_PERIOD:
            self._period.pop(key, None)
            self._gap.pop(key, None)
            return
        period = self._period.get(key)
        if period is not None:
            multiple = round(gap / period)
            if multiple >= 1 and abs(gap - multiple * period) <= self.TOLERANCE * period:
                if multiple == 1:
                    self._period[key] = gap  # follow slow drift
                return
            del self._period[key]
        before = self._gap.get(key)
        self._gap[key] = gap
        if before is not None and abs(gap - before) <= self.TOLERANCE * before:
            self._period[key] = gap

    def period(self, fmt: str, gzip: bool) -> float | None:
        return self._period.get((fmt, gzip))

    def due(self, now: float, next_sample_at: float) -> list[_Variant]:
        """The variants whose next scrape is expected before ``next_sample_at`` (less a margin):
        they will get the exposition of the current view. Expired forecasts are dropped."""
        due = []
        for key, period in list(self._period.items()):
            last = self._last[key]
            expected = last + period
            awaited = self._rendered_for.get(key)
            slack = self.TOLERANCE * period
            # Rendered ahead for a scrape that never came (none near the expected time, and it is past).
            missed = awaited is not None and last < awaited - slack and now > awaited + slack
            if missed or now - expected > period / 2:  # gone, or irregular: forget it
                del self._period[key]
                self._gap.pop(key, None)
                self._rendered_for.pop(key, None)
                continue
            if expected < next_sample_at - self.margin:
                due.append(key)
                self._rendered_for[key] = expected
        return due

    def active(self) -> bool:
        return bool(self._period)
