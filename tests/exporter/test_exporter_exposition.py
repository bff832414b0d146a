"""The exposition cache: once per version and format, single flight, off the event loop."""

from __future__ import annotations

import asyncio
import gzip
import threading

import pytest
from exporter_factories import SAMPLED_AT, make_snapshot, make_state
from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily

from runtimekit.exporter.exposition import ExpositionCache
from runtimekit.exporter.registry import build_registry
from runtimekit.state import SamplerStats


class Gate:
    """A collector that blocks its render thread until released, recording where it ran."""

    def __init__(self):
        self.release = threading.Event()
        self.threads: list[int] = []

    def collect(self):
        self.threads.append(threading.get_ident())
        assert self.release.wait(5)
        yield GaugeMetricFamily("runtimekit_test_gate", "gate", value=len(self.threads))


def gated_cache(state):
    gate = Gate()
    registry = CollectorRegistry()
    registry.register(gate)
    return ExpositionCache(state, registry), gate


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


async def test_new_version_rerenders_and_formats_are_cached_separately():
    state = make_state(make_snapshot())
    cache = ExpositionCache(state, build_registry(state, clock=lambda: SAMPLED_AT + 1, timer=lambda: 0.0))
    text1 = await cache.render("text")
    om1 = await cache.render("openmetrics")
    assert cache.renders == 2
    assert om1.endswith(b"# EOF\n") and not text1.endswith(b"# EOF\n")
    await cache.render("text")
    await cache.render("openmetrics")
    assert cache.renders == 2
    state.publish_snapshot(make_snapshot((make_gpu_zero(),)), SamplerStats(cycles_total=8))
    text2 = await cache.render("text")
    assert cache.renders == 3 and text2 != text1
    assert b'gpu="1"' in text1 and b'gpu="1"' not in text2


def make_gpu_zero():
    from exporter_factories import make_gpu

    return make_gpu(0)


async def test_gzip_variant_is_cached_and_decodes_to_the_body():
    state = make_state(make_snapshot())
    cache = ExpositionCache(state, build_registry(state, timer=lambda: 0.0))
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
    registry = CollectorRegistry()

    class Flaky:
        calls = 0

        def collect(self):
            Flaky.calls += 1
            if Flaky.calls == 1:
                raise RuntimeError("first render fails")
            yield GaugeMetricFamily("runtimekit_test_flaky", "flaky", value=1)

    registry.register(Flaky())
    cache = ExpositionCache(state, registry)
    with pytest.raises(RuntimeError):
        await cache.render("text")
    assert b"runtimekit_test_flaky" in await cache.render("text")


async def test_unknown_format_rejected():
    state = make_state()
    cache = ExpositionCache(state, CollectorRegistry())
    with pytest.raises(ValueError, match="openmetrics"):
        await cache.render("json")  # type: ignore[arg-type]


def test_forecast_expects_a_periodic_scraper_before_the_next_sample():
    from runtimekit.exporter.exposition import ScrapeForecast

    forecast = ScrapeForecast(sample_interval_seconds=1.0)
    forecast.scraped("openmetrics", True, 100.0)
    assert forecast.due(100.5) == []  # one scrape: no period known yet
    forecast.scraped("openmetrics", True, 115.0)  # every 15 s: next at 130
    assert forecast.due(120.0) == []  # the next sample comes before 130: too early
    assert forecast.due(129.3) == [("openmetrics", True)]  # the last sample before 130
    assert forecast.due(131.0) == [("openmetrics", True)]  # late: still expected, keep it ready
    assert forecast.due(140.0) == []  # past half a period: it skipped 130, the next is 145
    assert forecast.due(159.5) == [("openmetrics", True)]  # skipped scrapes keep the phase (145, 160)
    forecast.scraped("text", False, 10.0)
    forecast.scraped("text", False, 2000.0)  # too far apart to be a period
    assert ("text", False) not in forecast.due(2000.5)


async def test_a_periodic_scrape_is_rendered_before_it_arrives():
    import asyncio

    from exporter_factories import make_gpu, make_snapshot, make_state

    from runtimekit.exporter import ExpositionCache, build_registry
    from runtimekit.state import SamplerStats

    state = make_state(make_snapshot((make_gpu(0),)))
    cache = ExpositionCache(state, build_registry(state), sample_interval_seconds=0.5)
    await cache.render("text")
    await asyncio.sleep(0.3)
    await cache.render("text")  # a scraper every 0.3 s: faster than the samples
    renders = cache.renders
    state.publish_snapshot(make_snapshot((make_gpu(0),)), SamplerStats(cycles_total=2))
    await asyncio.sleep(0.25)  # settle (0.1 s) and render
    assert cache.prerenders == 1 and cache.renders == renders + 1
    await cache.render("text")  # served from the cache: no new render
    assert cache.renders == renders + 1
