"""The exposition cache: once per view and format, single flight, off the event loop; rendering ahead
of periodic scrapers once a sample's followers are in, and never for nobody."""

from __future__ import annotations

import asyncio
import gzip
import threading
from contextlib import asynccontextmanager

import pytest
from exporter_factories import make_attribution, make_gpu, make_health, make_snapshot, make_state
from prometheus_client.core import GaugeMetricFamily

from runtimekit.exporter.exposition import ExpositionCache, ScrapeForecast
from runtimekit.exporter.registry import build_collector_set
from runtimekit.exporter.timing import CollectorSet
from runtimekit.state import SamplerStats


class Gate:
    """A collector that blocks its render thread until released, recording where it ran."""

    def __init__(self):
        self.release = threading.Event()
        self.threads: list[int] = []

    def collect(self, view):
        self.threads.append(threading.get_ident())
        assert self.release.wait(5)
        yield GaugeMetricFamily("runtimekit_test_gate", "gate", value=len(self.threads))


def gated_cache(state):
    gate = Gate()
    return ExpositionCache(state, CollectorSet({"gate": gate})), gate


def collectors():
    return build_collector_set(timer=lambda: 0.0)


async def test_concurrent_renders_coalesce_into_one_off_the_loop():
    state = make_state(make_snapshot())
    cache, gate = gated_cache(state)
    tasks = [asyncio.create_task(cache.render("text")) for _ in range(20)]
    for _ in range(5):
        await asyncio.sleep(0)
    gate.release.set()
    bodies = await asyncio.gather(*tasks)
    assert len(set(bodies)) == 1
    assert cache.renders == 1 and len(gate.threads) == 1
    assert gate.threads[0] != threading.get_ident()  # rendered in an executor thread
    assert await cache.render("text") == bodies[0] and cache.renders == 1  # cached


async def test_new_view_rerenders_and_formats_are_cached_separately():
    state = make_state(make_snapshot())
    cache = ExpositionCache(state, collectors())
    text1 = await cache.render("text")
    om1 = await cache.render("openmetrics")
    assert cache.renders == 2
    assert om1.endswith(b"# EOF\n") and not text1.endswith(b"# EOF\n")
    await cache.render("text")
    await cache.render("openmetrics")
    assert cache.renders == 2
    state.publish_snapshot(make_snapshot((make_gpu(0),)), SamplerStats(cycles_total=8))
    text2 = await cache.render("text")
    assert cache.renders == 3 and text2 != text1
    assert b'gpu="1"' in text1 and b'gpu="1"' not in text2
    assert b'runtimekit_exposition_renders_total{trigger="scrape"} 3.0\n' in text2


async def test_every_topic_makes_a_new_view():
    state = make_state(make_snapshot())
    cache = ExpositionCache(state, collectors())
    first = await cache.render("text")
    state.publish_attribution(make_attribution())
    second = await cache.render("text")
    state.publish_health(make_health())
    third = await cache.render("text")
    assert cache.renders == 3
    assert b"runtimekit_process_gpu_memory_bytes" in second and b"runtimekit_process_gpu_memory_bytes" not in first
    assert b"runtimekit_gpu_health" in third


async def test_gzip_variant_is_cached_and_decodes_to_the_body():
    state = make_state(make_snapshot())
    cache = ExpositionCache(state, collectors())
    plain = await cache.render("text")
    gz1 = await cache.render("text", gzip=True)
    gz2 = await cache.render("text", gzip=True)
    assert gz1 is gz2
    assert gzip.decompress(gz1) == plain
    assert cache.renders == 1


async def test_cancelled_scrape_does_not_cancel_the_shared_render():
    state = make_state(make_snapshot())
    cache, gate = gated_cache(state)
    first = asyncio.create_task(cache.render("text"))
    second = asyncio.create_task(cache.render("text"))
    await asyncio.sleep(0)
    first.cancel()
    gate.release.set()
    assert b"runtimekit_test_gate" in await second
    with pytest.raises(asyncio.CancelledError):
        await first
    assert cache.renders == 1


async def test_render_failure_is_not_cached():
    state = make_state(make_snapshot())

    class Flaky:  # a CollectorSet whose collect raises once (the real one isolates collectors)
        calls = 0

        def collect(self, view):
            Flaky.calls += 1
            if Flaky.calls == 1:
                raise RuntimeError("first render fails")
            return [GaugeMetricFamily("runtimekit_test_flaky", "flaky", value=1)]

    cache = ExpositionCache(state, Flaky())  # type: ignore[arg-type]
    with pytest.raises(RuntimeError):
        await cache.render("text")
    assert b"runtimekit_test_flaky" in await cache.render("text")


async def test_unknown_format_rejected():
    cache = ExpositionCache(make_state(), collectors())
    with pytest.raises(ValueError, match="openmetrics"):
        await cache.render("json")  # type: ignore[arg-type]


# --- the forecast --------------------------------------------------------------------------------


def test_forecast_needs_two_equal_gaps_and_predicts_before_the_next_sample():
    forecast = ScrapeForecast(sample_interval_seconds=1.0)
    forecast.scraped("openmetrics", True, 100.0)
    forecast.scraped("openmetrics", True, 115.0)
    assert forecast.due(115.5, next_sample_at=116.5) == []  # one gap: a person with curl, maybe
    forecast.scraped("openmetrics", True, 130.0)  # every 15 s: next at 145
    assert forecast.period("openmetrics", True) == 15.0
    assert forecast.due(140.0, next_sample_at=141.0) == []  # the next sample comes before 145
    assert forecast.due(144.3, next_sample_at=145.3) == [("openmetrics", True)]  # the last sample before 145
    assert forecast.due(144.95, next_sample_at=145.05) == []  # too close to the next sample to tell
    assert forecast.due(146.0, next_sample_at=147.0) == [("openmetrics", True)]  # late: keep it ready


def test_forecast_expires_once_the_scraper_missed_its_scrape():
    forecast = ScrapeForecast(sample_interval_seconds=1.0)
    for t in (0.0, 1.0, 2.0):
        forecast.scraped("text", False, t)
    assert forecast.due(2.5, next_sample_at=3.4) == [("text", False)]
    assert forecast.active()
    assert forecast.due(3.6, next_sample_at=4.5) == []  # expected at 3.0, more than half a period late
    assert not forecast.active()  # gone: nothing more is rendered for it
    assert forecast.due(10.0, next_sample_at=11.0) == []


def test_forecast_keeps_the_period_over_a_skipped_scrape_and_drops_irregular_ones():
    forecast = ScrapeForecast(sample_interval_seconds=1.0)
    for t in (0.0, 15.0, 30.0, 60.0):  # 45 skipped
        forecast.scraped("text", False, t)
    assert forecast.period("text", False) == 15.0
    forecast.scraped("text", False, 67.0)  # irregular
    assert forecast.period("text", False) is None
    forecast.scraped("text", True, 10.0)
    forecast.scraped("text", True, 2000.0)  # too far apart to be a period
    forecast.scraped("text", True, 3990.0)
    assert forecast.period("text", True) is None


# --- rendering ahead ------------------------------------------------------------------------------


@asynccontextmanager
async def running(cache):
    task = asyncio.create_task(cache.run())
    await asyncio.sleep(0)
    try:
        yield
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


async def settle():
    for _ in range(20):
        await asyncio.sleep(0.005)


def publish_cycle(state, cycle: int, *, followers: bool = True) -> None:
    state.publish_snapshot(make_snapshot(), SamplerStats(cycles_total=cycle))
    if followers:
        state.publish_attribution(make_attribution())
        state.publish_health(make_health())


async def test_renders_ahead_only_once_the_samples_followers_are_in():
    state = make_state(make_snapshot())
    cache = ExpositionCache(state, collectors(), sample_interval_seconds=1.0)
    async with running(cache):
        publish_cycle(state, 1)  # the followers of a sample are learnt from the previous cycle
        await settle()
        for scrape in range(3):  # a scraper every 0.5 s: its period is known after three scrapes
            if scrape:
                await asyncio.sleep(0.5)
            await cache.render("text")
        renders = cache.renders
        state.publish_snapshot(make_snapshot(), SamplerStats(cycles_total=2))
        await settle()
        assert cache.prerenders == 0  # the attribution and health of this sample are not in yet
        state.publish_attribution(make_attribution())
        await settle()
        assert cache.prerenders == 0
        state.publish_health(make_health())
        await settle()
        assert cache.prerenders == 1 and cache.renders == renders + 1
        body = await cache.render("text")  # served from the cache: no new render
        assert cache.renders == renders + 1
        assert b'runtimekit_exposition_renders_total{trigger="ahead"} 1.0' in body


async def test_no_scraper_no_renders():
    state = make_state(make_snapshot())
    cache = ExpositionCache(state, collectors(), sample_interval_seconds=0.05)
    async with running(cache):
        for cycle in range(20):
            publish_cycle(state, cycle)
            await asyncio.sleep(0.05)
    assert cache.renders == 0


async def test_a_scraper_that_went_away_costs_at_most_one_render():
    state = make_state(make_snapshot())
    interval = 0.1
    cache = ExpositionCache(state, collectors(), sample_interval_seconds=interval)
    async with running(cache):
        for cycle in range(5):  # samples and scrapes, one each per interval
            publish_cycle(state, cycle)
            await asyncio.sleep(interval / 2)
            await cache.render("openmetrics", gzip=True)
            await asyncio.sleep(interval / 2)
        renders = cache.renders
        for cycle in range(5, 25):  # the scraper is gone
            publish_cycle(state, cycle)
            await asyncio.sleep(interval)
        assert cache.renders - renders <= 1
        assert not cache.forecast.active()


@pytest.mark.parametrize("phase", [0.25, 0.5, 0.75])
async def test_a_scraper_at_the_sampling_interval_costs_one_render_per_scrape(phase):
    """Samples every 0.2 s, each followed by its attribution (10 ms) and health (20 ms); a scraper
    at exactly that interval, at ``phase`` of the interval after each sample."""
    state = make_state(make_snapshot())
    interval = 0.2
    cache = ExpositionCache(state, collectors(), sample_interval_seconds=interval)
    loop = asyncio.get_running_loop()
    scrapes = 0
    async with running(cache):
        start = loop.time()

        async def sampler():
            for cycle in range(12):
                await asyncio.sleep(max(0.0, start + cycle * interval - loop.time()))
                publish_cycle(state, cycle, followers=False)
                await asyncio.sleep(0.01)
                state.publish_attribution(make_attribution())
                await asyncio.sleep(0.01)
                state.publish_health(make_health())

        async def scraper():
            nonlocal scrapes
            for k in range(11):
                await asyncio.sleep(max(0.0, start + (k + phase) * interval - loop.time()))
                await cache.render("openmetrics", gzip=True)
                scrapes += 1
                if k == 2:
                    nonlocal_renders[0] = cache.renders

        nonlocal_renders = [0]
        await asyncio.gather(sampler(), scraper())
    # The first three scrapes learn the period; from then on one render per scrape. One more is
    # allowed for the event loop's jitter on a loaded machine (bench/scrape.py measures the ratio
    # over a minute of 1 s scrapes: renders_per_scrape).
    assert cache.renders - nonlocal_renders[0] <= (scrapes - 3) + 1
    if phase > 0.25:  # scrapes after the followers: all rendered ahead
        assert cache.prerenders >= scrapes - 4
