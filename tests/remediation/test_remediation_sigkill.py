"""SIGKILL of the real process (``python -m runtimekit.kube.remediation serve``) around the
replacement call: after a restart the action completes, and the spare-node endpoint — which
honours Idempotency-Key, as docs/remediation.md asks of it — acts once per replacement.

Delivery is at least once: a kill after the receiver acted and before the journal commit makes
the restarted service call again with the same key. ``max_step_runs`` bounds the runs, so a crash
loop cannot call without end.
"""

from __future__ import annotations

import asyncio

from conftest import alert_body, get_actions, post_alert, spawn_service, start_service, stop_service, wait_dead, wait_for, write_config

from tests.agent_process import free_port


async def test_sigkill_after_receipt_then_restart_acts_exactly_once(fakes, tmp_path):
    """The first run journals the alert and answers 200 but waits (action_delay_seconds) before
    acting; it is killed while it waits. The second run, without the delay, acts once — also when
    Alertmanager re-sends the same alert afterwards."""
    kube, replacement, url = fakes
    port = free_port()
    first = await start_service(write_config(tmp_path, url, listen=f"127.0.0.1:{port}", action_delay_seconds=60), port)
    try:
        assert await post_alert(port, alert_body(node="gpu-2")) == 200  # journaled before this answer
        await asyncio.sleep(0.5)
        assert replacement.calls == []  # still waiting to act
    finally:
        await stop_service(first, kill=True)

    second = await start_service(write_config(tmp_path, url, listen=f"127.0.0.1:{port}", action_delay_seconds=0), port)
    try:
        await wait_for(lambda: replacement.calls, what="the replacement call")
        assert len(replacement.calls) == 1
        assert await post_alert(port, alert_body(node="gpu-2")) == 200  # Alertmanager re-sends
        await asyncio.sleep(1.0)
        assert len(replacement.calls) == 1
        key, body = replacement.calls[0]
        assert key and "gpu-2" in str(body)
        assert kube.nodes["gpu-2"]["spec"].get("unschedulable") is True  # cordoned once
    finally:
        await stop_service(second)


async def _replace_finished(port: int) -> bool:
    return next(a["state"] for a in await get_actions(port) if a["kind"] == "replace") != "pending"


async def test_killed_while_the_receiver_acts_the_receiver_sees_each_replacement_once(fakes, tmp_path):
    """Killed twice just after the receiver acted (before the answer, so before the journal commit):
    three calls with one key, one replacement."""
    kube, replacement, url = fakes
    port = free_port()
    config = write_config(tmp_path, url, listen=f"127.0.0.1:{port}", ladders={"replace_node": ["replace"]})
    spawned: list = []
    replacement.on_call = lambda key: spawned[-1].kill()
    for run in range(3):
        if run == 2:
            replacement.on_call = None
        spawned.append(await start_service(config, port) if run in (0, 2) else spawn_service(config))
        process = spawned[-1]
        try:
            if run == 0:
                assert await post_alert(port, alert_body(node="gpu-2")) == 200
            if run < 2:
                await wait_dead(process)
                continue
            await wait_for(lambda: _replace_finished(port), what="the replace step to finish")
            assert [a["state"] for a in await get_actions(port) if a["kind"] == "replace"] == ["done"]
        finally:
            await stop_service(process, kill=True)
    assert len(replacement.calls) == 3 and len({key for key, _ in replacement.calls}) == 1
    assert len(replacement.replacements) == 1
    assert next(iter(replacement.replacements.values()))["node"] == "gpu-2"


async def test_a_crash_loop_cannot_repeat_the_replacement_call_without_end(fakes, tmp_path):
    """Every run is killed during the call: after max_step_runs runs the step fails instead."""
    kube, replacement, url = fakes
    port = free_port()
    config = write_config(tmp_path, url, listen=f"127.0.0.1:{port}", ladders={"replace_node": ["replace"]},
                          max_step_runs=2)
    spawned: list = []
    replacement.on_call = lambda key: spawned[-1].kill()
    for run in range(3):
        spawned.append(await start_service(config, port) if run in (0, 2) else spawn_service(config))
        process = spawned[-1]
        try:
            if run == 0:
                assert await post_alert(port, alert_body(node="gpu-2")) == 200
            if run < 2:
                await wait_dead(process)
                continue
            await wait_for(lambda: _replace_finished(port), what="the replace step to fail")
            action = next(a for a in await get_actions(port) if a["kind"] == "replace")
            assert action["state"] == "failed" and "max_step_runs" in action["result"]["error"]
        finally:
            await stop_service(process, kill=True)
    assert len(replacement.calls) == 2
