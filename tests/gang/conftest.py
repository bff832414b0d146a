"""Fixtures of the gang service's tests."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.gang.gang_rig import Rig, start_rig


@pytest.fixture
async def rig(tmp_path: Path) -> AsyncIterator[Rig]:
    """The controller and its informers against a fresh fake API server (gang_rig.py)."""
    started, stop = await start_rig(tmp_path)
    try:
        yield started
    finally:
        await stop()
