"""The offer annotation end to end: the device plugin's process (``DevicePluginService``, as
``runtimekit device-plugin serve`` runs it with ``offer_annotation.enabled``) on a real agent process
on the simulated DGX H100 (``runtimekit serve --sim dgx-h100``: its NVSwitch topology, its health
checker, and its fake kubelet pod-resources server holding the scenario's pods), writing through
the official ``kubernetes`` client to the fake Kubernetes API (tests/kube_fakes.py: it validates node
PATCHes as the API server does), with the fake kubelet of dp_kubelet.py for the device plugin API.

The annotation appears and parses with the gang placer's own reader; it counts the GPUs no pod
holds in one NVLink group of 8 and one NIC per PCIe root; it drops a GPU when XID 79 makes it fall
off the bus and when a pod is given one, and takes it back when the pod goes and after a reboot;
it is written only when it changes, repaired when someone edits it, and removed when the plugin
stops. The gang placer places (and refuses) a gang on the offers read from it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dp_kubelet import FakeKubelet

from runtimekit.client import inject_remote, reboot_remote, request_json
from runtimekit.kube.deviceplugin.config import load
from runtimekit.kube.deviceplugin.service import DevicePluginService
from runtimekit.kube.gang.network import Tiers
from runtimekit.kube.gang.offer import OFFER_ANNOTATION, Offer, parse_offer_annotation
from runtimekit.kube.gang.placer import GangDemand, Placement, Placer, PodDemand, Refusal
from runtimekit.kube.kubeclient import api_client
from tests.agent_process import Agent, start_agent
from tests.kube_fakes import FakeKube, serve

NODE = "dgx-h100-0"
GPU = "nvidia.com/gpu"
SCENARIO_PODS = (("ml-training", "llama-pretrain-0"), ("inference", "vllm-llama-8b-0"), ("research", "notebook-alice"))
XID_GPU, POD_GPU = 3, 5


@dataclass
class Rig:
    agent: Agent
    api: FakeKube
    kubelet: FakeKubelet
    service: DevicePluginService
    task: asyncio.Task[None]

    def annotation(self) -> str | None:
        value: str | None = self.api.nodes[NODE]["metadata"].get("annotations", {}).get(OFFER_ANNOTATION)
        return value

    def offer(self) -> Offer | None:
        text = self.annotation()
        return None if text is None else parse_offer_annotation(text)

    def written(self) -> list[Any]:
        """The annotation's value in every PATCH that reached the API, in order."""
        return [body["metadata"]["annotations"][OFFER_ANNOTATION] for _, _, body in self.api.patches]

    def sim(self, method: str, route: str, body: dict[str, Any]) -> dict:
        return request_json(method, f"{self.agent.url}/sim/v1/{route}", body)


@asynccontextmanager
async def offer_rig(short_dir: Path) -> AsyncIterator[Rig]:
    agent = await asyncio.to_thread(start_agent, short_dir, "--sim", "dgx-h100", "--sim-load", "idle",
                                    "--sim-processes", "0", "--interval", "0.2", "--seed", "3")
    api = FakeKube(names=(NODE,))
    runner, url = await serve(api.app)
    kubelet = FakeKubelet(str(short_dir / "device-plugins"))
    await kubelet.start()
    client = None
    task: asyncio.Task[None] | None = None
    try:
        host = await asyncio.to_thread(request_json, "GET", f"{agent.url}/sim/v1/host")
        (short_dir / "kubeconfig").write_text(api.kubeconfig(url))
        config = load(None, {
            "agent_socket": str(short_dir / "state" / "runtimekit.sock"), "kubelet_socket": kubelet.socket_path,
            "health_poll_seconds": 0.2, "kubelet_poll_seconds": 0.05, "node_name": NODE,
            "offer_annotation.enabled": True, "offer_annotation.pod_resources_socket": host["kubelet_socket"],
            "offer_annotation.poll_seconds": 0.1, "offer_annotation.resync_seconds": 1.0,
            "kubernetes.kubeconfig": str(short_dir / "kubeconfig")})
        client = api_client(config.kubernetes.kubeconfig)
        service = DevicePluginService(config, client)
        task = asyncio.create_task(service.run())
        yield Rig(agent, api, kubelet, service, task)
    finally:
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        if client is not None:
            client.close()
        await kubelet.stop()
        await runner.cleanup()
        await asyncio.to_thread(agent.stop)


async def eventually(condition: Callable[[], Any], what: str, rig: Rig, timeout: float = 20.0) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        assert time.monotonic() < deadline, f"never: {what}; the annotation: {rig.annotation()}\n{rig.agent.log()[-2000:]}"
        await asyncio.sleep(0.05)
    return value


async def groups_become(rig: Rig, groups: list[int], what: str) -> Offer:
    def reached() -> Offer | None:
        offer = rig.offer()
        return offer if offer is not None and [g.free for g in offer.groups] == groups else None
    found: Offer = await eventually(reached, f"{what}: NVLink groups {groups}", rig)
    return found


def place(offer: Offer, gang: GangDemand) -> Placement | Refusal:
    placer = Placer(Tiers.preset())
    placer.set_node(NODE, {}, offer)
    return placer.place(gang)


TRAINERS = GangDemand("ml/train", (PodDemand("w0", 4, 1), PodDemand("w1", 4, 1)))


async def test_the_annotation_follows_health_and_pods(short_dir: Path) -> None:
    async with offer_rig(short_dir) as rig:
        # The scenario's pods hold all eight GPUs: nothing to offer but the NICs, one per PCIe root.
        first = await eventually(rig.offer, "the annotation appears", rig)
        assert (first.gpus_free, len(first.nics), first.nics_free) == (0, 8, 8), first
        assert all(root.startswith("pci0000:") for root, _ in first.nics)
        assert isinstance(place(first, TRAINERS), Refusal)

        for namespace, name in SCENARIO_PODS:
            await asyncio.to_thread(rig.sim, "DELETE", "pods", {"namespace": namespace, "name": name})
        free = await groups_become(rig, [8], "the pods are gone: the NVSwitch board is one group of 8")
        placed = place(free, TRAINERS)
        assert isinstance(placed, Placement) and set(placed.nodes.values()) == {NODE}, placed

        await asyncio.to_thread(inject_remote, rig.agent.url, XID_GPU, "xid", {"xid": 79})
        await groups_become(rig, [7], "XID 79: the GPU fell off the bus")
        await asyncio.to_thread(rig.sim, "POST", "pods", {"namespace": "team", "name": "one-gpu",
                                                          "containers": [{"name": "c", "gpus": [POD_GPU], "idle": True}]})
        held = await groups_become(rig, [6], "a pod holds a GPU")
        assert isinstance(place(held, GangDemand("ml/wide", (PodDemand("w0", 4), PodDemand("w1", 4)))), Refusal)

        await asyncio.to_thread(rig.sim, "DELETE", "pods", {"namespace": "team", "name": "one-gpu"})
        await groups_become(rig, [7], "the pod is gone")
        await asyncio.to_thread(reboot_remote, rig.agent.url)
        back = await groups_become(rig, [8], "the reboot brought the GPU back")
        assert isinstance(place(back, TRAINERS), Placement)

        written = rig.written()
        assert all(a != b for a, b in zip(written, written[1:], strict=False)), f"a value written twice in a row: {written}"
        assert len(written) <= 8, written  # one PATCH per change (0, 8, 7, 6, 7, 8 free), not one per poll

        tampered = '{"v":1,"gpus_free":0,"nvlink_groups":[],"nics_free_by_root":{}}'
        rig.api.nodes[NODE]["metadata"]["annotations"][OFFER_ANNOTATION] = tampered
        await eventually(lambda: rig.annotation() not in (None, tampered), "the edited annotation is written again", rig)
        assert rig.annotation() == written[-1]

        rig.task.cancel()
        await asyncio.gather(rig.task, return_exceptions=True)
        assert rig.annotation() is None, "a stopped plugin removes its annotation"
        assert rig.written()[-1] is None
