"""NodeState: typed topics with their own versions, one immutable view, watch() from any thread,
and subscribers that cannot hurt the publisher."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import threading

import pytest

from runtimekit.gpu.types import NodeSnapshot, XidEvent
from runtimekit.state import ATTRIBUTION, HEALTH, SAMPLE, XIDS, NodeState, SamplerStats


def snapshot(at: float) -> NodeSnapshot:
    return NodeSnapshot(at, 0.01, True, "", None, 0, ())


def xid(code: int) -> XidEvent:
    return XidEvent(gpu_index=1, uuid="GPU-1", xid=code, received_at=5.0)


def test_each_topic_has_its_own_version_and_publication_time() -> None:
    clock = iter([100.0, 101.0, 102.0])
    state = NodeState(clock=lambda: next(clock))
    state.publish_snapshot(snapshot(1.0), SamplerStats(cycles_total=1))
    state.record_xid(xid(13))
    state.record_xid(xid(79))
    view = state.view()
    assert view.version == 3
    assert (view.versions[SAMPLE], view.versions[XIDS], view.versions[ATTRIBUTION]) == (1, 2, 0)
    assert view.published_at == {SAMPLE: 100.0, XIDS: 102.0}
    assert view.xid_counts == {(1, "GPU-1", 13): 1, (1, "GPU-1", 79): 1}
    assert [event.xid for _, event in view.xids_after(1)] == [79]


def test_a_view_is_one_moment_and_never_changes() -> None:
    state = NodeState()
    state.publish_snapshot(snapshot(1.0), SamplerStats())
    before = state.view()
    state.publish_snapshot(snapshot(2.0), SamplerStats(cycles_total=2))
    assert before.snapshot is not None and before.snapshot.sampled_at == 1.0
    assert state.view().snapshot.sampled_at == 2.0  # type: ignore[union-attr]
    with pytest.raises(dataclasses.FrozenInstanceError):
        before.version = 9  # type: ignore[misc]
    with pytest.raises(TypeError):
        before.versions[SAMPLE] = 9  # type: ignore[index]


async def test_watch_wakes_on_its_topics_only_and_skips_to_the_newest_view() -> None:
    state = NodeState()
    seen: list[int] = []
    woken = asyncio.Event()

    async def watcher() -> None:
        async for view in state.watch(SAMPLE, since=state.view()):
            seen.append(view.versions[SAMPLE])
            woken.set()

    task = asyncio.create_task(watcher())
    await asyncio.sleep(0)
    state.record_xid(xid(13))  # not watched
    await asyncio.sleep(0.01)
    assert seen == []

    def publish_three() -> None:  # another thread, as the sampler's
        for cycle in (1, 2, 3):
            state.publish_snapshot(snapshot(float(cycle)), SamplerStats(cycles_total=cycle))

    thread = threading.Thread(target=publish_three)
    thread.start()
    thread.join()
    await asyncio.wait_for(woken.wait(), 2)
    await asyncio.sleep(0.01)
    assert seen[-1] == 3 and len(seen) <= 3  # coalesced: never a backlog, always the newest
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_watch_refuses_unknown_topics() -> None:
    with pytest.raises(ValueError, match="topics: unknown colour"):
        async for _ in NodeState().watch("colour"):
            pass


def test_a_subscriber_that_raises_is_logged_and_isolated(caplog) -> None:
    state = NodeState()
    calls: list[str] = []

    def broken() -> None:
        raise RuntimeError("subscriber bug")

    state.subscribe(broken)
    unsubscribe = state.subscribe(lambda: calls.append("second"))
    with caplog.at_level(logging.ERROR, logger="runtimekit.state"):
        state.publish_health(object())  # type: ignore[arg-type]
    assert calls == ["second"]  # the next subscriber still ran; the publisher did not see the error
    assert state.view().versions[HEALTH] == 1
    assert any("subscriber bug" in str(r.exc_info[1]) for r in caplog.records if r.exc_info)
    unsubscribe()
    state.publish_health(object())  # type: ignore[arg-type]
    assert calls == ["second"]
