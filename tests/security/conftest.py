"""Fixtures of the security tests: the certificates (pki.py), made once per session, and a
folder with a short path (a unix socket's path must fit in 108 bytes)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.security.pki import make_pki


@pytest.fixture(scope="session")
def pki(tmp_path_factory: pytest.TempPathFactory, require_tool: Callable[..., str]) -> Path:
    return make_pki(require_tool("openssl", "openssl"), tmp_path_factory.mktemp("pki"))


@pytest.fixture
def short_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="rk-sec-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)
