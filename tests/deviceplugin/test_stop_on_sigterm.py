"""``runtimekit device-plugin serve`` stopped by SIGTERM while the kubelet is connected (every
DaemonSet rollout and node drain): it ends every ListAndWatch stream cleanly (the kubelet's stream
ends with status OK, not an error such as UNAVAILABLE), exits 0 within a second or two (the
DaemonSet's terminationGracePeriodSeconds is 10 s) and logs no ERROR and no traceback (a pod log's
errors are alerted on).

The plugin runs as its own process, as in its pod; the fake agent (dp_agent.py) and the fake
kubelet (dp_kubelet.py) run in the test's event loop, on real unix sockets. SIGTERM is sent only
once the kubelet's streams are open: with the agent answering, once each of its three resources'
streams has carried its first list; with no agent, once the one stream (nvidia.com/gpu) is open
and waits for the agent's first answer. Both are the case that logged gRPC's "Exception not
handled by _handle_exceptions ... CancelledError" with a traceback, in most runs.

A call that is still in flight when the plugin stops (an Allocate whose agent call hangs) gets
``STOP_GRACE_SECONDS``, then is cancelled: the stop stays prompt whatever the agent does.
"""

from __future__ import annotations

import asyncio
import signal
import sys
import time
from pathlib import Path

import grpc
import pytest
from dp_agent import FakeAgent, gpu_uuid
from dp_kubelet import FakeKubelet
from dp_rig import start_rig, stop_rig

from runtimekit._proto.deviceplugin.v1beta1 import api_pb2
from runtimekit._proto.runtimekit.v1 import service_pb2
from runtimekit.kube.deviceplugin.plugin import STOP_GRACE_SECONDS

RESOURCES = ("nvidia.com/gpu", "nvidia.com/mig-3g.40gb", "nvidia.com/mig-1g.10gb")  # the fake agent's three
#: How long a stop may take, in seconds: well within the DaemonSet's terminationGracePeriodSeconds (10 s).
PROMPT_SECONDS = 8.0


async def stop_while_streaming(directory: Path, *, agent_answers: bool = True
                               ) -> tuple[int, str, float, dict[str, BaseException | None]]:
    """Start the plugin, wait until the kubelet's streams are open (each has carried its first
    list when ``agent_answers``), SIGTERM it. Returns its exit code, its stderr, how long it took
    to exit after SIGTERM, and how each of the kubelet's streams ended (None: status OK; else the
    error it ended with)."""
    agent = FakeAgent(str(directory / "agent.sock"))
    if agent_answers:
        await agent.start()
    resources = RESOURCES if agent_answers else RESOURCES[:1]  # no agent: no MIG device known
    kubelet = FakeKubelet(str(directory / "device-plugins"))
    await kubelet.start()
    config = directory / "plugin.yaml"
    config.write_text(f"agent_socket: {agent.socket_path}\nkubelet_socket: {kubelet.socket_path}\n"
                      "kubelet_poll_seconds: 0.05\nhealth_poll_seconds: 0.2\nlog_level: info\n")
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "runtimekit.kube.deviceplugin", "serve", "--config", str(config),
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE)
    try:
        await kubelet.wait_registrations(len(resources), timeout=30)
        for resource in resources:
            if agent_answers:
                await kubelet.next_list(resource, timeout=30)  # its stream is open and has carried a list
            else:
                await kubelet.wait_stream(resource, timeout=30)
                await asyncio.sleep(0.5)  # the ListAndWatch call reaches the plugin (no list: no agent)
                assert kubelet.connections[resource].lists.empty()
        process.send_signal(signal.SIGTERM)
        signalled = time.monotonic()
        _, stderr = await asyncio.wait_for(process.communicate(), 30)
        took = time.monotonic() - signalled
        ended: dict[str, BaseException | None] = {}
        for resource in resources:
            task = kubelet.connections[resource].task
            assert task is not None
            await asyncio.wait_for(asyncio.gather(task, return_exceptions=True), 5)
            ended[resource] = task.exception()
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
        await kubelet.stop()
        await agent.stop()
    return process.returncode, stderr.decode(), took, ended


@pytest.mark.parametrize("run", range(2))
@pytest.mark.parametrize("agent_answers", [True, False], ids=["agent", "no agent"])
async def test_sigterm_ends_the_streams_cleanly_without_an_error(short_dir: Path, agent_answers: bool, run: int
                                                                 ) -> None:
    code, stderr, took, ended = await stop_while_streaming(short_dir, agent_answers=agent_answers)
    assert code == 0, stderr
    assert "Traceback" not in stderr, stderr
    assert [line for line in stderr.splitlines() if " ERROR " in line or "CancelledError" in line] == [], stderr
    assert stderr.rstrip().endswith("stopped: the plugin sockets are removed"), stderr
    assert took < PROMPT_SECONDS, f"exited {took:.1f}s after SIGTERM"
    problems = {resource: (error.code() if isinstance(error, grpc.aio.AioRpcError) else error)
                for resource, error in ended.items() if error is not None}
    assert problems == {}, "the kubelet's streams ended with an error, not status OK"


async def test_a_call_in_flight_gets_the_grace_then_is_cancelled(short_dir: Path) -> None:
    rig = await start_rig(short_dir, start_agent=False, agent_timeout_seconds=30)
    asked = asyncio.Event()

    async def hang(request: service_pb2.AllocateDevicesRequest, context: grpc.aio.ServicerContext) -> None:
        asked.set()
        await asyncio.Event().wait()  # the agent never answers (within the plugin's 30 s deadline)

    rig.agent.AllocateDevices = hang
    await rig.agent.start()
    try:
        await rig.kubelet.wait_registrations(len(RESOURCES))
        await rig.kubelet.next_list(RESOURCES[0])
        request = api_pb2.AllocateRequest(container_requests=[api_pb2.ContainerAllocateRequest(
            devices_ids=[gpu_uuid(0)])])
        allocate = asyncio.ensure_future(rig.kubelet.plugin(RESOURCES[0]).Allocate(request))
        await asyncio.wait_for(asked.wait(), 10)  # the Allocate waits on the agent's NICs
        stopping = time.monotonic()
        rig.task.cancel()  # what SIGTERM does
        await asyncio.gather(rig.task, return_exceptions=True)
        took = time.monotonic() - stopping
        assert STOP_GRACE_SECONDS * 0.9 <= took < 2 * STOP_GRACE_SECONDS + 1, f"stopped in {took:.2f}s"
        with pytest.raises(grpc.aio.AioRpcError) as cut:
            await asyncio.wait_for(allocate, 5)
        assert cut.value.code() in (grpc.StatusCode.CANCELLED, grpc.StatusCode.UNAVAILABLE)
        stream = rig.kubelet.connections[RESOURCES[0]].task
        assert stream is not None and stream.done() and stream.exception() is None  # ended with status OK
    finally:
        await stop_rig(rig)
