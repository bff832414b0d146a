"""Fixtures for the NVML layer: a simulated node installed below pynvml, always uninstalled after."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from runtimekit import sim

# The helpers live next to the tests; make them importable whatever the import mode.
sys.path.insert(0, str(Path(__file__).parent))

from gpu_helpers import FakeClock, PatchedLib, use_library  # noqa: E402


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def make_node(clock: FakeClock) -> Iterator[Callable[..., sim.SimulatedNode]]:
    """``make_node(scenario="dgx-h100", load="idle", **kwargs)``: a node installed below pynvml."""

    def make(scenario: str = "dgx-h100", *, load: str = "idle", seed: int = 1, **kwargs: Any) -> sim.SimulatedNode:
        node = sim.SimulatedNode(sim.load_scenario(scenario), seed=seed, clock=kwargs.pop("clock", clock), load=load, **kwargs)
        sim.install(node)
        return node

    try:
        yield make
    finally:
        sim.uninstall()


@pytest.fixture
def node(make_node: Callable[..., sim.SimulatedNode]) -> sim.SimulatedNode:
    return make_node("dgx-h100")


@pytest.fixture
def patch_lib() -> Callable[..., PatchedLib]:
    """``patch_lib(hide=..., errors=..., count=...)`` wraps the installed fake library (see gpu_helpers)."""

    def patch(**kwargs: Any) -> PatchedLib:
        lib = sim.installed()
        assert lib is not None, "install a simulated node first"
        wrapper = PatchedLib(lib, **kwargs)
        use_library(wrapper)
        return wrapper

    return patch


@pytest.fixture
def make_reader(clock: FakeClock, make_node: Callable[..., sim.SimulatedNode]) -> Iterator[Callable[..., Any]]:
    """``make_reader(**kwargs)``: a fresh NodeReader (own NvmlSession) on the fake clock; closed
    after, before the node is uninstalled."""
    from runtimekit.gpu.reader import NodeReader

    readers: list[NodeReader] = []

    def make(**kwargs: Any) -> NodeReader:
        kwargs.setdefault("clock", clock)
        reader = NodeReader(**kwargs)
        readers.append(reader)
        return reader

    try:
        yield make
    finally:
        for reader in readers:
            reader.close()
