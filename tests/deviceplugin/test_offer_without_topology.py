"""The offer annotation on an agent that serves no topology (``topology.enabled: false``:
GetTopology answers UNAVAILABLE for good): the annotation is written all the same, each GPU an
NVLink group of its own and no RDMA NIC, instead of never.

The agent is dp_agent.FakeAgent with no topology (four whole GPUs, a MIG card not offered whole),
the pod-resources API the simulator's fake kubelet server (runtimekit.sim.kubelet), the
Kubernetes API tests/kube_fakes.FakeKube (it validates node PATCHes as the API server does).
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from dp_agent import FakeAgent
from dp_kubelet import FakeKubelet

from runtimekit.kube.deviceplugin.config import load
from runtimekit.kube.deviceplugin.service import DevicePluginService
from runtimekit.kube.gang.offer import OFFER_ANNOTATION, parse_offer_annotation
from runtimekit.kube.kubeclient import api_client
from runtimekit.sim.kubelet import FakePodResourcesServer
from tests.kube_fakes import FakeKube, serve

NODE = "gpu-node-1"


async def test_the_offer_is_written_without_a_topology(short_dir: Path) -> None:
    agent = FakeAgent(str(short_dir / "agent.sock"))
    agent.topology = None  # GetTopology: UNAVAILABLE
    await agent.start()
    kubelet = FakeKubelet(str(short_dir / "device-plugins"))
    await kubelet.start()
    pod_resources = FakePodResourcesServer(lambda: [], str(short_dir / "pod-resources.sock"))
    await pod_resources.start()
    api = FakeKube(names=(NODE,))
    runner, url = await serve(api.app)
    (short_dir / "kubeconfig").write_text(api.kubeconfig(url))
    config = load(None, {
        "agent_socket": agent.socket_path, "kubelet_socket": kubelet.socket_path, "health_poll_seconds": 0.1,
        "kubelet_poll_seconds": 0.05, "node_name": NODE, "offer_annotation.enabled": True,
        "offer_annotation.pod_resources_socket": pod_resources.socket_path, "offer_annotation.poll_seconds": 0.05,
        "kubernetes.kubeconfig": str(short_dir / "kubeconfig")})
    client = api_client(config.kubernetes.kubeconfig)
    task = asyncio.create_task(DevicePluginService(config, client).run())
    try:
        deadline = time.monotonic() + 15
        while (text := api.nodes[NODE]["metadata"].get("annotations", {}).get(OFFER_ANNOTATION)) is None:
            assert time.monotonic() < deadline and not task.done(), "never: the annotation is written"
            await asyncio.sleep(0.05)
        offer = parse_offer_annotation(text)
        assert [group.free for group in offer.groups] == [1, 1, 1, 1]  # no NVLink known: each GPU alone
        assert offer.nics == ()
        assert agent.topology_reads >= 1
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        client.close()
        await runner.cleanup()
        await pod_resources.stop()
        await kubelet.stop()
        await agent.stop()
