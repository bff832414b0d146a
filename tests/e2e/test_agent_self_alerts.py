"""The alerts on the agent itself fire in a real Prometheus from what the agent really exports.

The agent runs in this process on the simulated dgx-h100 node (so that a test can hang its reader
or kill a component from inside), served on a real loopback port; Debian's ``prometheus`` scrapes
it every second and evaluates the shipped rules (alerts/runtimekit.rules.yml). Each alert is found
in the shipped file by the metric its expression reads; the test copy keeps the expression and
shortens only its ``for:`` and, for staleness, its threshold in seconds (60 s in the shipped rule,
3 s here), so that the test takes seconds. Before each fault the alert is not firing.
"""

from __future__ import annotations

import asyncio
import re
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import yaml
from aiohttp.test_utils import TestServer

from runtimekit import config as config_module
from runtimekit.exporter.collectors.thermal import ThermalCollector
from runtimekit.gpu.reader import NodeReader
from runtimekit.healthcheck.checker import HealthChecker
from runtimekit.service import build_app
from runtimekit.sim.component import SIM_SCHEMA, Simulation
from tests.agent_process import ROOT
from tests.prometheus_process import prometheus, query, scrape_config, wait_for_scrapes

RULES = ROOT / "alerts" / "runtimekit.rules.yml"
STALE_AFTER_SECONDS = 3


def alert_reading(metric: str) -> dict:
    """The shipped alerting rule whose expression reads ``metric`` (exactly one)."""
    rules = [rule for group in yaml.safe_load(RULES.read_text())["groups"] for rule in group["rules"]]
    found = [rule for rule in rules if "alert" in rule and metric in rule["expr"]]
    assert len(found) == 1, f"expected one alert on {metric}, found {[r['alert'] for r in found]}"
    return found[0]


def test_copy(rule: dict) -> dict:
    copy = dict(rule, **{"for": "0s"})
    copy["expr"] = re.sub(r">\s*60\b", f"> {STALE_AFTER_SECONDS}", rule["expr"])
    return copy


test_copy.__test__ = False  # a helper, not a test


async def firing(prometheus: str, alert: str) -> bool:
    expr = f'ALERTS{{alertname="{alert}",alertstate="firing"}}'
    return bool(await asyncio.to_thread(query, prometheus, expr))


async def until(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not await predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.5)


@pytest.fixture
async def agent_and_prometheus(tmp_path: Path) -> AsyncIterator[tuple[str, dict]]:
    overrides = {
        "state_dir": str(tmp_path / "state"),
        "sampling.interval_seconds": 0.5,
        "sampling.timeout_seconds": 1.0,
        "components.initial_backoff_seconds": 5.0,
        "sim.scenario": "dgx-h100",
        "sim.processes": 4,
    }
    config = config_module.load(None, overrides, extra_schema=SIM_SCHEMA)
    simulation = Simulation(config)
    server = TestServer(build_app(simulation.configure(config), [simulation.registration()]), host="127.0.0.1")
    await server.start_server()
    alerts = {
        "stale": alert_reading("runtimekit_last_sample_timestamp_seconds"),
        "component": alert_reading("runtimekit_component_up"),
        "collector": alert_reading("runtimekit_collector_success"),
        "health_check": alert_reading("health_check_failed"),
    }
    (tmp_path / "rules.yml").write_text(yaml.safe_dump({"groups": [
        {"name": "self", "interval": "1s", "rules": [test_copy(rule) for rule in alerts.values()]}
    ]}))
    try:
        config_file = scrape_config(f"127.0.0.1:{server.port}", rule_files=[str(tmp_path / "rules.yml")])
        with prometheus(tmp_path, config_file) as url:
            await asyncio.to_thread(wait_for_scrapes, url, tmp_path, 3)
            yield url, alerts
    finally:
        await server.close()
        simulation.remove()


async def test_stale_samples_alert_fires_when_the_reader_hangs(agent_and_prometheus, monkeypatch):
    prometheus, alerts = agent_and_prometheus
    name = alerts["stale"]["alert"]
    assert not await firing(prometheus, name)
    release = threading.Event()
    original = NodeReader.sample

    def hang(self):
        release.wait(60)  # the driver does not answer
        return original(self)

    monkeypatch.setattr(NodeReader, "sample", hang)
    try:
        await until(lambda: firing(prometheus, name), 30, f"{name} to fire")
        assert query(prometheus, 'up{job="runtimekit"}')[0]["value"][1] == "1"  # the agent still serves
    finally:
        release.set()


async def test_component_down_alert_fires_when_a_component_keeps_dying(agent_and_prometheus, monkeypatch):
    prometheus, alerts = agent_and_prometheus
    name = alerts["component"]["alert"]
    assert not await firing(prometheus, name)

    async def broken(self):
        raise RuntimeError("injected: the health checker keeps dying")

    monkeypatch.setattr(HealthChecker, "evaluate", broken)
    await until(lambda: firing(prometheus, name), 30, f"{name} to fire")
    labels = (await asyncio.to_thread(query, prometheus, f'ALERTS{{alertname="{name}"}}'))[0]["metric"]
    assert labels.get("component") == "health"


async def test_collector_failing_alert_fires_when_a_collector_raises(agent_and_prometheus, monkeypatch):
    prometheus, alerts = agent_and_prometheus
    name = alerts["collector"]["alert"]
    assert not await firing(prometheus, name)

    def broken(self, view):
        raise RuntimeError("injected: a bug in the thermal collector")

    monkeypatch.setattr(ThermalCollector, "collect", broken)
    await until(lambda: firing(prometheus, name), 30, f"{name} to fire")
    labels = (await asyncio.to_thread(query, prometheus, f'ALERTS{{alertname="{name}"}}'))[0]["metric"]
    assert labels.get("collector") == "thermal"
    assert query(prometheus, 'runtimekit_gpu_power_draw_watts{gpu="0"}')  # the other collectors still export


async def test_health_check_failing_alert_fires_when_the_detectors_fail(agent_and_prometheus, monkeypatch):
    prometheus, alerts = agent_and_prometheus
    name = alerts["health_check"]["alert"]
    assert not await firing(prometheus, name)

    def broken(state, data):
        raise RuntimeError("injected: a detector bug")

    broken.name = "broken"  # type: ignore[attr-defined]
    monkeypatch.setattr("runtimekit.healthcheck.detectors.DETECTORS", (broken,))
    await until(lambda: firing(prometheus, name), 30, f"{name} to fire")
