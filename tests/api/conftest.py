"""Fixtures of the gRPC API's tests (api_harness.py serves; api_fakes.py fakes the slicer), and
the buf program (npm's @bufbuild/buf, which scripts/test installs into .tools/)."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from api_harness import Api, serve

ROOT = Path(__file__).resolve().parents[2]
LOCAL_BUF = ROOT / ".tools" / "node_modules" / ".bin" / "buf"  # where scripts/_env.sh's ensure_buf puts it


@pytest.fixture(scope="session")
def buf() -> str:
    """The buf program: .tools/'s, else one on PATH. Missing, it fails the test under CI (CI=true:
    scripts/test installs it) and skips it elsewhere, as tests/conftest.py does for Debian's tools;
    the reason starts as theirs do, so the run's summary counts it."""
    if LOCAL_BUF.is_file() and os.access(LOCAL_BUF, os.X_OK):
        return str(LOCAL_BUF)
    found = shutil.which("buf")
    if found:
        return found
    reason = "missing tool buf (npm package @bufbuild/buf: `source scripts/_env.sh && ensure_buf` installs it into .tools/)"
    if os.environ.get("CI", "").strip().lower() in ("true", "1", "yes"):
        pytest.fail(f"{reason} -- CI=true, so a missing tool is a failure, not a skip", pytrace=False)
    pytest.skip(reason)


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A directory with a short path: a unix socket's path must fit in 108 bytes, and pytest's
    tmp_path (named after the test) may not."""
    path = Path(tempfile.mkdtemp(prefix="rk-api-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
async def api(short_dir: Path) -> AsyncIterator[Api]:
    """The API with the fake slicer."""
    async for served in serve(short_dir):
        yield served


@pytest.fixture
async def api_without_slicer(short_dir: Path) -> AsyncIterator[Api]:
    """The API of an agent whose slicer is disabled (slicer.enabled: false)."""
    async for served in serve(short_dir, slicer=False):
        yield served
