"""Fixtures: a Slicer on a simulated dgx-a100 (GPUs 0 and 1 in MIG mode, the others whole cards),
in this process, uninstalled after each test."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from runtimekit import sim

# The driver lives next to the tests; make it importable whatever the import mode.
sys.path.insert(0, str(Path(__file__).parent))

from slicer_driver import build  # noqa: E402


@pytest.fixture
def uninstall() -> Iterator[None]:
    try:
        yield
    finally:
        sim.uninstall()


@pytest.fixture
def make_slicer(tmp_path: Path, uninstall: None) -> Iterator[Callable[..., Any]]:
    """``make_slicer(**config)`` -> (slicer, state, node), not started; closed after the test."""
    made: list[Any] = []

    def make(**config: Any) -> Any:
        built = build(tmp_path, **config)
        made.append(built[0])
        return built

    yield make


@pytest.fixture
async def rig(make_slicer: Callable[..., Any]) -> AsyncIterator[Any]:
    """(slicer, state, node) with the slicer started; closed after the test."""
    slicer, state, node = make_slicer()
    await slicer.start()
    try:
        yield slicer, state, node
    finally:
        await slicer.close()


def publish_verdict(state: Any, unhealthy: dict[int, str]) -> None:
    """Publish a health verdict on the rig's NodeState: the GPUs of ``unhealthy`` (index -> fault)
    unhealthy, the others healthy."""
    from runtimekit.state.health import HEALTHY, UNHEALTHY, ActiveFault, GpuHealth, NodeHealth

    gpus = tuple(
        GpuHealth(gpu.index, gpu.identity.uuid, UNHEALTHY if gpu.index in unhealthy else HEALTHY,
                  (ActiveFault(unhealthy[gpu.index], "critical", "reset_gpu", "test", "reset", 0.0, 0.0),)
                  if gpu.index in unhealthy else ())
        for gpu in state.view().snapshot.gpus)
    state.publish_health(NodeHealth(0.0, UNHEALTHY if unhealthy else HEALTHY, "none", gpus))
