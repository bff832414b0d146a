"""A GPU left out of XID events is logged once when it leaves and once when it is back in, not on
every rebuild that tries it again (docs/health.md: transitions are logged once). The retries
themselves go on, on the rebuild cadence."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import pytest

from runtimekit.gpu.events import XidWatcher
from runtimekit.gpu.nvml import NvmlSession

TIMEOUT_S = 10.0
LOST = 5


def wait_until(predicate: Callable[[], bool], timeout: float = TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.005)


def watched(watcher: XidWatcher) -> set[int]:
    return {index for index, _ in dict(watcher.registered).values()}


def messages(caplog: pytest.LogCaptureFixture, text: str) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name == "runtimekit.gpu.events" and r.levelno == logging.INFO and text in r.getMessage()]


def test_a_lost_gpu_is_logged_once_out_and_once_back_in(node, monkeypatch, caplog):
    caplog.set_level(logging.DEBUG, logger="runtimekit.gpu.events")
    builds: list[float] = []
    build = XidWatcher._build_set

    def counting(self: XidWatcher) -> None:
        builds.append(time.monotonic())
        build(self)

    monkeypatch.setattr(XidWatcher, "_build_set", counting)
    session = NvmlSession()
    watcher = XidWatcher(session, lambda event: None, wait_ms=20, rebuild_seconds=0.02)
    watcher.start()
    try:
        wait_until(lambda: watched(watcher) == set(range(8)))
        node.inject(LOST, "gpu-lost")
        wait_until(lambda: LOST not in watched(watcher))
        retried = len(builds)
        wait_until(lambda: len(builds) >= retried + 5)  # the lost GPU is still tried on the cadence
        assert messages(caplog, f"GPU {LOST} left out of XID events") == [
            f"GPU {LOST} left out of XID events: NVML_ERROR_GPU_IS_LOST"]

        node.clear(LOST)
        wait_until(lambda: watched(watcher) == set(range(8)))
        assert len(messages(caplog, f"GPU {LOST} back in XID events")) == 1
        assert len(messages(caplog, "left out of XID events")) == 1

        node.inject(LOST, "gpu-lost")  # a second loss is a new transition: logged again
        wait_until(lambda: LOST not in watched(watcher))
        retried = len(builds)
        wait_until(lambda: len(builds) >= retried + 3)
        assert len(messages(caplog, f"GPU {LOST} left out of XID events")) == 2
    finally:
        watcher.stop()
        session.shutdown()
