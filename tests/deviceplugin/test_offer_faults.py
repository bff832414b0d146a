"""The offer annotation's writer when its sources fail: the Kubernetes API down, the kubelet's
pod-resources socket absent or gone. The device plugin keeps serving the kubelet throughout; each
fault is logged once however often it is retried; the annotation appears once both answer and
follows the devices' health while the pod-resources API is away (the pods' last devices stand).

The agent is dp_agent.FakeAgent (four whole GPUs, no NVLink: four groups of one; a MIG card not
offered whole), the pod-resources API the simulator's fake kubelet server
(runtimekit.sim.kubelet.FakePodResourcesServer, the real protocol on a unix socket), the
Kubernetes API tests/kube_fakes.FakeKube, served only once the test says so on a port chosen first.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from dp_agent import FakeAgent, gpu_uuid, make_health
from dp_kubelet import FakeKubelet

from runtimekit.kube.deviceplugin.config import load
from runtimekit.kube.deviceplugin.service import DevicePluginService
from runtimekit.kube.gang.offer import OFFER_ANNOTATION, parse_offer_annotation
from runtimekit.kube.kubeclient import api_client
from runtimekit.sim.kubelet import FakePodResourcesServer
from runtimekit.sim.pods import GPU_RESOURCE, SimContainer, SimDevice, SimPod
from tests.agent_process import free_port
from tests.kube_fakes import FakeKube

NODE = "gpu-node-1"
WRITER = "runtimekit.kube.deviceplugin.offer_writer"


def pod_holding(index: int) -> SimPod:
    container = SimContainer("c", "0" * 64, (SimDevice(GPU_RESOURCE, gpu_uuid(index)),))
    return SimPod(f"job-{index}", "team", f"uid-{index}", (container,))


async def serve_on(app: web.Application, port: int) -> web.AppRunner:
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    return runner


async def eventually(condition: Callable[[], Any], what: str, timeout: float = 15.0) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        assert time.monotonic() < deadline, f"never: {what}"
        await asyncio.sleep(0.05)
    return value


def warnings_about(caplog: pytest.LogCaptureFixture, source: str) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name == WRITER and r.levelno == logging.WARNING and source in r.getMessage()]


async def test_faults_are_logged_once_and_never_stop_the_plugin(short_dir: Path, caplog: pytest.LogCaptureFixture
                                                                 ) -> None:
    caplog.set_level(logging.INFO, logger=WRITER)
    agent = FakeAgent(str(short_dir / "agent.sock"))
    await agent.start()
    kubelet = FakeKubelet(str(short_dir / "device-plugins"))
    await kubelet.start()
    pods: list[SimPod] = []
    pod_resources = FakePodResourcesServer(lambda: pods, str(short_dir / "pod-resources.sock"))
    api = FakeKube(names=(NODE,))
    port = free_port()
    (short_dir / "kubeconfig").write_text(api.kubeconfig(f"http://127.0.0.1:{port}"))
    config = load(None, {
        "agent_socket": agent.socket_path, "kubelet_socket": kubelet.socket_path, "health_poll_seconds": 0.1,
        "kubelet_poll_seconds": 0.05, "node_name": NODE, "offer_annotation.enabled": True,
        "offer_annotation.pod_resources_socket": pod_resources.socket_path, "offer_annotation.poll_seconds": 0.05,
        "offer_annotation.resync_seconds": 1.0, "kubernetes.kubeconfig": str(short_dir / "kubeconfig")})
    client = api_client(config.kubernetes.kubeconfig)
    service = DevicePluginService(config, client)
    task = asyncio.create_task(service.run())
    runner: web.AppRunner | None = None

    def groups() -> list[int] | None:
        text = api.nodes[NODE]["metadata"].get("annotations", {}).get(OFFER_ANNOTATION)
        return None if text is None else [group.free for group in parse_offer_annotation(text).groups]

    try:
        # Neither the pod-resources API nor the Kubernetes API answers: the kubelet is served all the same.
        await kubelet.wait_registrations(1)
        assert [device for device, _ in await kubelet.next_list("nvidia.com/gpu")] == [gpu_uuid(i) for i in range(4)]
        await eventually(lambda: warnings_about(caplog, "pod-resources"), "the pod-resources fault is logged")
        await asyncio.sleep(0.5)  # tries again and again meanwhile
        await pod_resources.start()
        await eventually(lambda: warnings_about(caplog, "the Kubernetes API"), "the API fault is logged")
        await asyncio.sleep(1.5)  # the backoff reaches its longest (resync_seconds)
        assert len(warnings_about(caplog, "pod-resources")) == 1 and len(warnings_about(caplog, "the Kubernetes API")) == 1
        assert api.requests == []

        runner = await serve_on(api.app, port)  # the API server is up
        assert await eventually(groups, "the annotation appears") == [1, 1, 1, 1]  # no NVLink; the MIG card not whole
        assert ("GET", f"/api/v1/nodes/{NODE}") in api.requests and api.patches[0][1] == "application/merge-patch+json"

        pods.append(pod_holding(2))
        await eventually(lambda: groups() == [1, 1, 1], "a pod's GPU leaves the offer")

        await pod_resources.stop()  # the kubelet restarts: its pods keep their devices
        await agent.set_health(make_health(unhealthy=(0,), evaluated_at=5))
        await eventually(lambda: groups() == [1, 1], "an unhealthy GPU leaves the offer while pod-resources is away")
        pods.clear()
        await pod_resources.start()
        await eventually(lambda: groups() == [1, 1, 1], "the pod's GPU comes back once pod-resources answers")
        # Gone once more: logged once more (twice if a call was cut off first: another kind of fault).
        assert 2 <= len(warnings_about(caplog, "pod-resources")) <= 3
        assert not task.done()
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        client.close()
        if runner is not None:
            await runner.cleanup()
        await pod_resources.stop()
        await kubelet.stop()
        await agent.stop()
