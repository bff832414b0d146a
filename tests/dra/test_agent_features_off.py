"""The DRA driver on an agent whose slicer and topology are switched off (``slicer.enabled: false``,
``topology.enabled: false``): ListSlices and GetTopology then answer UNAVAILABLE for good.

A real agent process (``runtimekit serve --sim dgx-h100``) with both off, the driver's process
(``DraService``) publishing to the fake resource.k8s.io/v1 API server (tests/kube_fake_resource.py):

- every GPU is published all the same, without place attributes (no topology), each in an NVLink
  domain of its own;
- a claim left "started" (a prepare cut short) is unprepared by the kubelet: no slice can exist,
  so there is none to delete;
- the cleanup unprepares a prepared claim whose ResourceClaim is gone, though the sweep of leftover
  slices has nothing to list;
- a kubelet that restarts (it deletes the node's slices, then registers the driver again) gets
  them back at once, not at the publisher's next resync (``RESYNC_SECONDS``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from runtimekit.kube.dra.checkpoint import COMPLETED, STARTED, Checkpoint, ClaimEntry, DeviceEntry
from runtimekit.kube.dra.claims import ClaimRef
from runtimekit.kube.dra.publisher import RESYNC_SECONDS
from runtimekit.kube.dra.service import DraService
from runtimekit.kube.kubeclient import api_client
from tests.agent_process import start_agent, without_pods
from tests.dra.dra_claims import DRIVER, NODE, ClaimStore
from tests.dra.dra_rig import NodeAgent, driver_config, short_directory
from tests.dra.kubelet_fake import FakeDraKubelet
from tests.kube_fake_resource import FakeResourceApi
from tests.kube_fakes import serve

FEATURES_OFF = "slicer:\n  enabled: false\ntopology:\n  enabled: false\n"


def gpu_entry(name: str, state: str, index: int) -> ClaimEntry:
    device = DeviceEntry(request="gpu", pool=NODE, device=f"gpu-{index}", position=0, kind="gpu")
    return ClaimEntry("default", name, state, (device,))


async def eventually(condition: Callable[[], Any], what: str, timeout: float = 20.0) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        assert time.monotonic() < deadline, f"never: {what}"
        await asyncio.sleep(0.05)
    return value


async def test_cleanup_unprepare_publishing_and_reregistration_without_slicer_or_topology() -> None:
    with short_directory() as directory:
        node_agent = NodeAgent(directory, "dgx-h100")
        (directory / "runtimekit.yaml").write_text(FEATURES_OFF)
        node_agent.agent = await asyncio.to_thread(
            start_agent, directory, "--sim", without_pods("dgx-h100", directory), "--sim-load", "idle", "--config",
            str(directory / "runtimekit.yaml"))
        api = FakeResourceApi(version="v1.35.0", nodes=(NODE,))
        runner, url = await serve(api.app)
        (directory / "kubeconfig").write_text(api.kubeconfig(url))
        config = driver_config(directory, node_agent, cleanup_interval_seconds=0.2,
                               **{"kubernetes.kubeconfig": str(directory / "kubeconfig")})
        checkpoint = Checkpoint.load(config.checkpoint_path)
        checkpoint.put("uid-half", gpu_entry("half-prepared", STARTED, 1))
        checkpoint.put("uid-gone", gpu_entry("deleted-claim", COMPLETED, 2))
        client = api_client(config.kubernetes.kubeconfig)
        store = ClaimStore()
        store.claims[("default", "half-prepared")] = {"metadata": {"uid": "uid-half"}}
        service = DraService(config, client, reader=store)
        task = asyncio.create_task(service.run())
        try:
            await eventually(lambda: service.preparer is not None and "uid-gone" not in service.preparer.checkpoint.claims,
                             "the claim whose ResourceClaim is gone is unprepared")
            assert service.preparer is not None
            ref = ClaimRef("default", "uid-half", "half-prepared")
            assert await service.preparer.unprepare([ref]) == {"uid-half": ""}
            assert Checkpoint.load(config.checkpoint_path).claims == {}

            def gpus() -> dict[str, dict[str, Any]]:
                return {device["name"]: device for item in api.pool(DRIVER, NODE)
                        for device in item["spec"].get("devices") or [] if device["name"].startswith("gpu-")}

            published = await eventually(lambda: len(gpus()) == 8 and gpus(), "the GPUs are published")
            for name, device in published.items():
                attributes = device.get("attributes") or {}
                assert "resource.kubernetes.io/pcieRoot" not in attributes, name
                assert attributes["nvlinkDomain"] == {"int": int(name.removeprefix("gpu-"))}, name
            kubelet = FakeDraKubelet(config.registry_dir, DRIVER)
            await kubelet.register()
            api.slices.clear()  # the kubelet restarts: it deletes the node's slices, then registers the driver
            await kubelet.register()
            await eventually(lambda: len(gpus()) == 8, "the slices are published again after the registration",
                             timeout=RESYNC_SECONDS / 2)
            assert not task.done()
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            client.close()
            await runner.cleanup()
            node_agent.stop()
