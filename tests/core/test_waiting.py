"""A stop's cancellation that lands just as a loop's wait ends stops the loop.

On Python 3.11 ``asyncio.wait_for`` returns normally when the cancellation reaches it as the awaited
thing completes; the gang controller, the DRA publisher and the offer-annotation writer waited that
way, so a SIGTERM that came with a wake-up was lost and the service ran on (``gang serve`` did not
exit within 15 s in a clean-clone test run). Each test here sets the wake-up and cancels the loop
in the same step of the event loop, which makes that race happen every time. The one-shot steps of
a stop (the HTTP listener's cleanup, the offer annotation's withdrawal) wait with
``finished_within`` for the same reason, and no source file calls ``asyncio.wait_for``.
"""

from __future__ import annotations

import ast
import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client import ApiClient

from runtimekit.kube.deviceplugin.config import load as load_device_plugin_config
from runtimekit.kube.deviceplugin.offer_writer import OfferWriter
from runtimekit.kube.dra.config import load as load_dra_config
from runtimekit.kube.dra.publisher import Publisher
from runtimekit.waiting import finished_within, within
from tests.core.test_layering import sources
from tests.gang.gang_rig import start_rig

STOP_SECONDS = 2.0  # far more than a cancelled loop needs; the loops wait 5 s or more between rounds


async def _idle() -> None:
    """A round that does nothing (the loop's work is not what is tested)."""


async def _stops_when_cancelled_with(task: asyncio.Task[Any], wake: Callable[[], None]) -> None:
    """Let ``task`` (already idle) settle into its wait, then wake it and cancel it in one step: it must end cancelled."""
    for _ in range(20):
        await asyncio.sleep(0)
    assert not task.done(), "the loop ended by itself"
    wake()
    task.cancel()
    done, _ = await asyncio.wait((task,), timeout=STOP_SECONDS)
    if not done:
        task.cancel()  # a second cancel reaches it now that the first was lost
        await asyncio.gather(task, return_exceptions=True)
        pytest.fail("the loop went on after the cancellation that came with its wake-up")
    assert task.cancelled()


async def test_within_returns_the_result_or_the_default() -> None:
    event = asyncio.Event()
    event.set()
    assert await within(1.0, event.wait(), False) is True
    assert await within(0.01, asyncio.Event().wait(), False) is False


async def test_within_lets_a_timeout_error_of_the_awaitable_through() -> None:
    async def fails() -> bool:
        raise TimeoutError("the awaited call's own deadline")

    with pytest.raises(TimeoutError, match="own deadline"):
        await within(10.0, fails(), False)


async def test_finished_within_says_whether_the_awaitable_ended_in_time() -> None:
    event = asyncio.Event()
    event.set()
    assert await finished_within(1.0, event.wait()) is True
    assert await finished_within(0.01, asyncio.Event().wait()) is False


async def test_a_step_finishing_within_stops_on_a_cancel_that_comes_as_it_ends() -> None:
    event = asyncio.Event()
    after: list[str] = []

    async def stop_step() -> None:
        await finished_within(60.0, event.wait())
        after.append("went on")
        await asyncio.Event().wait()  # a caller that lost the cancel would wait here for good

    await _stops_when_cancelled_with(asyncio.create_task(stop_step()), event.set)
    assert after == []


def test_no_source_file_calls_asyncio_wait_for() -> None:
    calls = [
        f"{relative}:{node.lineno}"
        for relative, path in sources()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), relative))
        if isinstance(node, ast.Attribute) and node.attr == "wait_for"
        and isinstance(node.value, ast.Name) and node.value.id == "asyncio"
    ]
    assert calls == [], "asyncio.wait_for can lose a stop's cancellation on Python 3.11: use runtimekit.waiting"


async def test_a_loop_waiting_within_stops_on_a_cancel_that_comes_with_the_wakeup() -> None:
    event = asyncio.Event()

    async def loop() -> None:
        while True:
            await within(60.0, event.wait(), False)
            event.clear()

    await _stops_when_cancelled_with(asyncio.create_task(loop()), event.set)


async def test_the_gang_controller_stops_on_a_cancel_that_comes_with_a_change(tmp_path: Path) -> None:
    rig, stop = await start_rig(tmp_path, "controller: {resync_seconds: 60}\n")
    try:
        rig.controller.cluster.stop()  # run() starts the informers itself
        task = asyncio.create_task(rig.controller.run())
        while not (rig.controller.cluster.synced and rig.controller.rounds):
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.5)  # the informers' first changes settled and decided: the loop waits for the next
        await _stops_when_cancelled_with(task, rig.controller.changed.set)
    finally:
        await stop()


async def test_the_dra_publisher_stops_on_a_cancel_that_comes_with_a_wakeup() -> None:
    config = load_dra_config(None, {"node_name": "node-a", "publish_interval_seconds": 60})
    publisher = Publisher(ApiClient(), lambda: None, config)  # type: ignore[arg-type]  # never read: publish is idle
    publisher.publish = _idle  # type: ignore[method-assign]
    await _stops_when_cancelled_with(asyncio.create_task(publisher.run()), publisher.wake)


class _DeviceWatch:
    """The device watch as the writer uses it: a version that moves, and a wait for it to move."""

    def __init__(self) -> None:
        self.version = 0
        self._moved = asyncio.Event()

    async def wait_newer(self, version: int) -> int:
        while self.version == version:
            await self._moved.wait()
        return self.version

    def move(self) -> None:
        self.version += 1
        moved, self._moved = self._moved, asyncio.Event()
        moved.set()


async def test_the_offer_writer_stops_on_a_cancel_that_comes_with_a_device_change(tmp_path: Path) -> None:
    config = load_device_plugin_config(None, {"node_name": "node-a", "offer_annotation.enabled": True, "offer_annotation.poll_seconds": 60,
                                              "offer_annotation.pod_resources_socket": str(tmp_path / "kubelet.sock")})
    watch = _DeviceWatch()
    writer = OfferWriter(watch, config, annotation=None)  # type: ignore[arg-type]  # never written: step is idle
    writer.step = _idle  # type: ignore[method-assign]
    await _stops_when_cancelled_with(asyncio.create_task(writer.run()), watch.move)
