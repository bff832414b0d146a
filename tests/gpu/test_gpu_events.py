"""XidWatcher on the simulated driver: XIDs arrive with the right GPU, uuid and code, keep arriving
after another GPU is lost, a GPU that comes back is registered again, and stop() is prompt.

Timeouts are generous (CI machines stall); latency is recorded as a test property, not asserted —
benchmarks measure speed.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest

from runtimekit.gpu.events import XidWatcher
from runtimekit.gpu.nvml import NvmlSession
from runtimekit.gpu.types import XidEvent

TIMEOUT_S = 10.0


class Collector:
    """Collects delivered events; ``wait_for(predicate)`` blocks until one matches."""

    def __init__(self) -> None:
        self.events: list[tuple[float, XidEvent]] = []
        self._cond = threading.Condition()

    def __call__(self, event: XidEvent) -> None:
        with self._cond:
            self.events.append((time.perf_counter(), event))
            self._cond.notify_all()

    def wait_for(self, predicate: Callable[[XidEvent], bool], timeout: float = TIMEOUT_S) -> tuple[float, XidEvent]:
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                for arrived, event in self.events:
                    if predicate(event):
                        return arrived, event
                left = deadline - time.monotonic()
                assert left > 0, f"no matching XID within {timeout} s; got {[e for _, e in self.events]}"
                self._cond.wait(left)


def wait_until(predicate: Callable[[], bool], timeout: float = TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.005)


def registered_gpus(watcher: XidWatcher) -> set[int]:
    return {index for index, _ in dict(watcher.registered).values()}


@pytest.fixture
def start_watcher(node):
    watchers: list[XidWatcher] = []
    sessions: list[NvmlSession] = []

    def start(on_xid: Callable[[XidEvent], None], **kwargs) -> XidWatcher:
        session = NvmlSession()
        sessions.append(session)
        watcher = XidWatcher(session, on_xid, **kwargs)
        watchers.append(watcher)
        watcher.start()
        return watcher

    try:
        yield start
    finally:
        for watcher in watchers:
            watcher.stop()
        for session in sessions:
            session.shutdown()


def test_xid_is_delivered_and_keeps_flowing_after_another_gpu_is_lost(node, start_watcher, record_property):
    events = Collector()
    watcher = start_watcher(events)
    wait_until(lambda: registered_gpus(watcher) == set(range(8)))

    injected = time.perf_counter()
    node.inject(2, "xid", xid=13)
    arrived, event = events.wait_for(lambda e: e.xid == 13)
    record_property("xid_latency_seconds", arrived - injected)
    assert (event.gpu_index, event.uuid, event.xid) == (2, node.gpu(2).uuid, 13)
    assert (event.gpu_instance_id, event.compute_instance_id) == (None, None)
    assert event.received_at == pytest.approx(time.time(), abs=60)

    node.inject(4, "gpu-lost")
    # The wait answers GPU_IS_LOST once; the set is rebuilt without GPU 4.
    wait_until(lambda: registered_gpus(watcher) == set(range(8)) - {4})
    injected = time.perf_counter()
    node.inject(1, "xid", xid=31)
    arrived, event = events.wait_for(lambda e: e.xid == 31)
    record_property("xid_latency_after_loss_seconds", arrived - injected)
    assert (event.gpu_index, event.uuid, event.xid) == (1, node.gpu(1).uuid, 31)
    assert [e.xid for _, e in events.events] == [13, 31]

    started = time.monotonic()
    watcher.stop()
    assert time.monotonic() - started < 2.0
    assert not watcher._thread.is_alive()


def test_xid_79_itself_is_delivered_before_the_gpu_drops_out(node, start_watcher):
    events = Collector()
    watcher = start_watcher(events)
    wait_until(lambda: registered_gpus(watcher) == set(range(8)))
    node.inject(5, "xid", xid=79)
    _, event = events.wait_for(lambda e: e.xid == 79)
    assert (event.gpu_index, event.uuid) == (5, node.gpu(5).uuid)
    wait_until(lambda: registered_gpus(watcher) == set(range(8)) - {5})
    node.inject(6, "xid", xid=48)
    _, event = events.wait_for(lambda e: e.xid == 48)
    assert event.gpu_index == 6


def test_gpu_back_from_lost_is_registered_again(node, start_watcher):
    events = Collector()
    watcher = start_watcher(events, rebuild_seconds=0.2)
    wait_until(lambda: registered_gpus(watcher) == set(range(8)))
    node.inject(4, "gpu-lost")
    wait_until(lambda: 4 not in registered_gpus(watcher))
    node.clear(4)
    wait_until(lambda: registered_gpus(watcher) == set(range(8)))
    node.inject(4, "xid", xid=94)
    _, event = events.wait_for(lambda e: e.xid == 94)
    assert (event.gpu_index, event.uuid) == (4, node.gpu(4).uuid)


def test_stop_is_prompt_while_waiting(node, start_watcher):
    watcher = start_watcher(Collector())
    wait_until(lambda: registered_gpus(watcher) == set(range(8)))
    time.sleep(0.3)  # inside nvmlEventSetWait
    started = time.monotonic()
    watcher.stop()
    assert time.monotonic() - started < 2.0
    assert not watcher._thread.is_alive()


def test_check_reports_a_thread_that_died_with_its_exception(node, start_watcher, monkeypatch):
    def broken(self):
        raise ValueError("a bug in the event loop")

    monkeypatch.setattr(XidWatcher, "_build_set", broken)
    watcher = start_watcher(Collector())
    wait_until(lambda: not watcher._thread.is_alive())
    with pytest.raises(RuntimeError, match="XID event thread died: ValueError: a bug in the event loop"):
        watcher.check()


def test_check_reports_a_thread_silent_for_longer_than_it_ever_waits(node, start_watcher):
    watcher = start_watcher(Collector())
    watcher.check()  # alive and beating
    watcher.heartbeat_at -= watcher.liveness_seconds + 1  # as if stuck in nvmlEventSetWait
    with pytest.raises(RuntimeError, match="silent for"):
        watcher.check()


def test_a_gpu_without_xid_events_does_not_make_the_set_rebuild(node, start_watcher, monkeypatch):
    import pynvml

    original = pynvml.nvmlDeviceGetSupportedEventTypes

    def supported(handle):  # GPU 2 supports no XID events (as some boards do not)
        return 0 if pynvml.nvmlDeviceGetIndex(handle) == 2 else original(handle)

    builds = []
    build = XidWatcher._build_set

    def counting(self):
        builds.append(time.monotonic())
        return build(self)

    monkeypatch.setattr(pynvml, "nvmlDeviceGetSupportedEventTypes", supported)
    monkeypatch.setattr(XidWatcher, "_build_set", counting)
    watcher = start_watcher(Collector(), rebuild_seconds=0.1)
    wait_until(lambda: registered_gpus(watcher) == set(range(8)) - {2})
    time.sleep(0.6)  # six rebuild periods
    assert len(builds) == 1
