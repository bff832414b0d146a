"""Each component of a running agent (on the simulated node, in this process) is killed by an
exception inside it: the death is logged with its traceback, the component restarted and counted,
and ``/readyz`` follows (not ready while a required component is down, ready again after)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

import pynvml
import pytest
from aiohttp.test_utils import TestClient, TestServer

from runtimekit import config as config_module
from runtimekit.attribution.attributor import Attributor
from runtimekit.exporter.exposition import ScrapeForecast
from runtimekit.gpu.reader import NodeReader
from runtimekit.healthcheck.checker import HealthChecker
from runtimekit.service import build_app
from runtimekit.sim.component import SIM_SCHEMA, Simulation
from tests.agent_process import parse_samples

BACKOFF_SECONDS = 1.0  # long enough to see /readyz answer 503 while the component is down

# component -> (owner, attribute): raising there (once) kills the component from inside while it runs.
FAULTS = {
    "sampler": (NodeReader, "sample"),  # in the sampler's NVML thread
    "xid_watcher": (pynvml, "nvmlEventSetWait"),  # in the XID event thread, between two waits
    "attribution": (Attributor, "attribute"),
    "health": (HealthChecker, "evaluate"),
    "exporter": (ScrapeForecast, "due"),  # once a sample's attribution and health are in
}
REQUIRED = {"sampler", "xid_watcher", "health", "exporter"}


@pytest.fixture
async def agent(tmp_path) -> AsyncIterator[TestClient]:
    overrides = {
        "state_dir": str(tmp_path / "state"),
        "sampling.interval_seconds": 0.1,
        "sampling.nvml_retry_seconds": 0.2,
        "components.initial_backoff_seconds": BACKOFF_SECONDS,
        "sim.scenario": "dgx-h100",
        "sim.processes": 4,
    }
    config = config_module.load(None, overrides, extra_schema=SIM_SCHEMA)
    simulation = Simulation(config)
    app = build_app(simulation.configure(config), [simulation.registration()])
    client = TestClient(TestServer(app))
    await client.start_server()
    try:
        yield client
    finally:
        await client.close()
        simulation.remove()


async def until(predicate, timeout: float = 10.0, step: float = 0.02):
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        value = await predicate()
        if value:
            return value
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(step)


async def readyz(client: TestClient) -> tuple[int, str]:
    response = await client.get("/readyz")
    return response.status, await response.text()


async def restarts(client: TestClient, component: str) -> float:
    text = await (await client.get("/metrics")).text()
    key = ("runtimekit_component_restarts_total", frozenset({("component", component)}))
    return parse_samples(text).get(key, 0.0)


@pytest.mark.parametrize("component", list(FAULTS))
async def test_killed_component_is_logged_restarted_counted_and_readyz_follows(agent, component, monkeypatch, caplog):
    await until(lambda: _status_is(agent, 200))
    cls, method = FAULTS[component]
    original = getattr(cls, method)
    armed = {"left": 1}

    def fail_once(*args, **kwargs):
        if armed["left"]:
            armed["left"] -= 1
            raise RuntimeError(f"injected fault in {component}")
        return original(*args, **kwargs)

    async def fail_once_async(*args, **kwargs):
        if armed["left"]:
            armed["left"] -= 1
            raise RuntimeError(f"injected fault in {component}")
        return await original(*args, **kwargs)

    monkeypatch.setattr(cls, method, fail_once_async if asyncio.iscoroutinefunction(original) else fail_once)
    with caplog.at_level(logging.ERROR, logger="runtimekit.supervisor"):
        if component in REQUIRED:
            status, text = await until(lambda: _status_if(agent, 503))
            assert f"component down: {component}" in text
        await until(lambda: _restarted(agent, component))
        await until(lambda: _status_is(agent, 200))
    died = [r for r in caplog.records if r.getMessage().startswith(f"component {component} died")]
    assert died and died[0].exc_info is not None
    assert "injected fault" in "".join(str(r.exc_info[1]) + str(r.exc_info[1].__cause__) for r in died)
    assert await restarts(agent, component) == 1.0


async def _status_is(client: TestClient, code: int) -> bool:
    return (await readyz(client))[0] == code


async def _status_if(client: TestClient, code: int) -> tuple[int, str] | None:
    answer = await readyz(client)
    return answer if answer[0] == code else None


async def _restarted(client: TestClient, component: str) -> bool:
    return await restarts(client, component) >= 1.0
