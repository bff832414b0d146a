"""The DRA driver's node side, end to end on the simulated DGX H100: a claim for a TDM share of
50 % and 2 GiB of one GPU (a SliceConfig ``compute: 50, memory: 2Gi`` on device ``gpu-3`` of this
driver, as the scheduler allocates it), prepared through the fake kubelet by ``runtimekit dra
serve``, is a slice of the real agent: listed by ``runtimekit slice list`` and in the agent's
/metrics, and named by the CDI device id the kubelet gets back, whose spec in the agent's CDI
directory carries the limits (50 % and 2048 MiB, as the slicer writes them). Unprepare removes it
from all three. The driver is SIGKILLed between two steps of prepare and of unprepare, and the
kubelet's retry converges each time.

Real parts: the agent (``runtimekit serve --sim dgx-h100``), the driver's process, the CLI, unix
sockets, gRPC. Fakes: the kubelet (kubelet_fake.py) and the API server (tests/kube_fake_resource.py).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from runtimekit.kube.dra.names import owner_id
from tests.agent_process import ROOT
from tests.dra.dra_claims import DRIVER, NODE, Alloc, Config, ref_of, resource_claim, slice_config
from tests.dra.dra_process import RUNTIMEKIT_COMMAND, DriverProcess
from tests.dra.dra_rig import NodeAgent, short_directory
from tests.dra.kubelet_fake import CallFailed, FakeDraKubelet
from tests.kube_fake_resource import FakeResourceApi
from tests.kube_fakes import serve

GPU = 3


@pytest.fixture
def node() -> Iterator[NodeAgent]:
    with short_directory() as directory:
        agent = NodeAgent(directory, "dgx-h100")
        agent.start()
        try:
            yield agent
        finally:
            agent.stop()


def slice_list(node: NodeAgent) -> list[dict[str, Any]]:
    """``runtimekit slice list -o json`` against the agent's socket."""
    done = subprocess.run([sys.executable, "-m", "runtimekit.cli", "slice", "list", "-o", "json", "--socket", node.socket],
                          cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout).get("slices", [])


def metric_samples(node: NodeAgent, slice_id: str) -> dict[str, float]:
    """The agent's /metrics samples of slice ``slice_id`` (exporter/collectors/slices.py), by name."""
    assert node.agent is not None
    return {name: value for (name, labels), value in node.agent.samples().items()
            if ("slice", slice_id) in labels and name.startswith("runtimekit_slice_") and name != "runtimekit_slice_health"}


def wait_for(check: Any, what: str, timeout: float = 10.0) -> Any:
    """``check()`` until it is truthy (the agent samples its slices on its interval)."""
    deadline = time.monotonic() + timeout
    while not (found := check()):
        assert time.monotonic() < deadline, f"{what} within {timeout} s"
        time.sleep(0.1)
    return found


def cdi_device(cdi_dir: Path, qualified: str) -> tuple[Path, dict[str, Any]] | None:
    """The spec file and device a container runtime finds for ``vendor/class=name`` in ``cdi_dir``."""
    kind, _, name = qualified.partition("=")
    for path in sorted(cdi_dir.glob("*.json")):
        spec = json.loads(path.read_text())
        for device in spec.get("devices", []) if spec.get("kind") == kind else []:
            if device["name"] == name:
                return path, device
    return None


async def test_a_claimed_tdm_share_is_the_agents_slice_with_its_limits_until_unprepared(node: NodeAgent) -> None:
    api = FakeResourceApi(nodes=(NODE,))
    runner, url = await serve(api.app)
    with short_directory("rk-drv-") as directory:
        kubeconfig = directory / "kubeconfig"
        kubeconfig.write_text(api.kubeconfig(url))
        driver = DriverProcess(directory, node, kubeconfig, command=RUNTIMEKIT_COMMAND)
        ref = ref_of(api.add_claim(resource_claim("half-gpu", [
            Alloc("share", f"gpu-{GPU}", "tdm", consumed={"compute": "50", "memory": "2Gi"})],
            configs=[Config(slice_config(compute=50, memory="2Gi"), ("share",))])))
        kubelet = FakeDraKubelet(driver.registry_dir, DRIVER)
        try:
            # Prepare, with the driver killed once the agent made the slice and before it recorded it.
            driver.start(failpoints="dra.prepare.slice_created,dra.unprepare.slice_deleted")
            await kubelet.register()
            with pytest.raises(CallFailed):
                await kubelet.prepare([ref])
            await driver.wait_killed()
            driver.start(failpoints="dra.unprepare.slice_deleted")
            await kubelet.register()
            answer = (await kubelet.prepare([ref]))[ref.uid]
            assert answer.error == "", driver.log()
            [device] = answer.devices
            [cdi_id] = device.cdi_ids

            [made] = [s for s in slice_list(node) if s["owner"]["owner_id"] == owner_id(ref.uid, 0, DRIVER, driver.checkpoint().id)]
            assert (made["mode"], made["device"]["index"], made["compute_percent"], int(made["memory_bytes"]),
                    made["state"], made["cdi_device"]) == ("tdm", GPU, 50, 2 << 30, "SLICE_STATE_READY", cdi_id)
            assert len(slice_list(node)) == 1  # the killed driver's slice was adopted, not made twice
            samples = wait_for(lambda: metric_samples(node, made["id"]), "the slice in /metrics")
            assert samples == {"runtimekit_slice_info": 1.0, "runtimekit_slice_compute_quota_ratio": 0.5,
                               "runtimekit_slice_memory_quota_bytes": float(2 << 30)}
            found = cdi_device(node.cdi_dir, cdi_id)
            assert found is not None, f"no CDI spec in {node.cdi_dir} names {cdi_id}"
            spec_path, spec_device = found
            env = spec_device["containerEdits"]["env"]
            assert "CUDA_DEVICE_SM_LIMIT=50" in env and "CUDA_DEVICE_MEMORY_LIMIT=2048m" in env, env

            # Unprepare, with the driver killed once the slice was deleted and before it forgot the claim.
            with pytest.raises(CallFailed):
                await kubelet.unprepare([ref])
            await driver.wait_killed()
            driver.start()
            await kubelet.register()
            assert await kubelet.unprepare([ref]) == {ref.uid: ""}, driver.log()
            assert slice_list(node) == []
            wait_for(lambda: not metric_samples(node, made["id"]), "the slice gone from /metrics")
            assert not spec_path.exists() and cdi_device(node.cdi_dir, cdi_id) is None
            assert ref.uid not in driver.checkpoint().claims
            await driver.stop()
        finally:
            driver.kill()
            await runner.cleanup()
