"""Fixtures: a simulated node on a fake clock, installed below pynvml."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pynvml
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from runtimekit.sim import SimulatedNode, install, load_scenario, uninstall
from runtimekit.sim.control import add_control_routes


class FakeClock:
    """A clock the test moves by hand (seconds)."""

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self.t = start

    def __call__(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += seconds


@pytest.fixture
def clock_factory() -> type[FakeClock]:
    """The FakeClock class (test modules cannot import a conftest by name reliably)."""
    return FakeClock


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def node(clock: FakeClock) -> SimulatedNode:
    return SimulatedNode(load_scenario("dgx-h100"), seed=7, clock=clock, load="busy")


@pytest.fixture
def nvml(node: SimulatedNode):
    """pynvml, initialised on ``node``; uninstalled afterwards."""
    install(node)
    pynvml.nvmlInit()
    try:
        yield pynvml
    finally:
        uninstall()


@pytest.fixture
async def client(node: SimulatedNode) -> AsyncIterator[TestClient]:
    """A client of the simulator's control routes over ``node`` (no agent around them)."""
    app = web.Application()
    add_control_routes(app, node)
    async with TestClient(TestServer(app, host="127.0.0.1")) as c:
        yield c
