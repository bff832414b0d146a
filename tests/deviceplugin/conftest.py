"""Fixtures of the device plugin's tests: a short directory for the sockets, and the plugin
between its fakes (dp_rig.py). tests/api's fakes (a real NodeState, a fake slicer) serve the test
against the agent's real API server (test_real_agent.py)."""

from __future__ import annotations

import shutil
import sys
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from dp_rig import Rig, start_rig, stop_rig

sys.path.insert(0, str(Path(__file__).parents[1] / "api"))


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A directory with a short path: a unix socket's path must fit in 108 bytes."""
    path = Path(tempfile.mkdtemp(prefix="rk-dp-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
async def rig(short_dir: Path) -> AsyncIterator[Rig]:
    """The plugin with its defaults (CDI and the environment, NICs), registered resources and all."""
    started = await start_rig(short_dir)
    try:
        yield started
    finally:
        await stop_rig(started)
