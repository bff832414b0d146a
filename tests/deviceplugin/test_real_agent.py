"""The device plugin against the agent's real runtimekit.v1 server (runtimekit.api.ApiServer over a
real NodeState, tests/api's fake slicer) instead of the fake agent: the verdicts the health checker
publishes reach the kubelet's ListAndWatch with the topology's NUMA nodes, and the topology
allocator's choice reaches GetPreferredAllocation and Allocate. The kubelet is
dp_kubelet.FakeKubelet (the real one cannot run here), on real unix sockets."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import MappingProxyType

from api_fakes import NOW, FakeSlicer, gpu_ref, make_gpu, make_state, uuid_for
from api_harness import api_config
from dp_kubelet import FakeKubelet

from runtimekit._proto.deviceplugin.v1beta1 import api_pb2
from runtimekit.api import ApiServer
from runtimekit.gpu.types import NodeSnapshot
from runtimekit.kube.deviceplugin.config import load
from runtimekit.kube.deviceplugin.service import DevicePluginService
from runtimekit.state import NodeState, SamplerStats
from runtimekit.state.distance import links_between
from runtimekit.state.health import HEALTHY, NONE, UNHEALTHY, ActiveFault, GpuHealth, NodeHealth
from runtimekit.state.topology import GpuPlace, NicPlace, Topology
from runtimekit.topology.allocator import allocate as allocator

GPU = "nvidia.com/gpu"
SWITCH_A, SWITCH_B = "0000:16:00.0", "0000:96:00.0"


def publish_node(state: NodeState) -> None:
    """Four GPUs: 0 and 1 under PCIe switch A with NIC mlx5_0; 2 and 3 under switch B with mlx5_1
    and mlx5_2. No NVLink. (The fake slicer holds GPU 1 in "mig" mode: it is not advertised whole.)"""
    snapshot = NodeSnapshot(sampled_at=NOW, duration_seconds=0.01, nvml_up=True, nvml_error="", driver=None,
                            device_count=4, gpus=tuple(make_gpu(i) for i in range(4)))
    state.publish_snapshot(snapshot, SamplerStats())
    gpus = tuple(GpuPlace(gpu_ref(i), i // 2, i // 2, (SWITCH_A if i < 2 else SWITCH_B,)) for i in range(4))
    nics = tuple(NicPlace(f"mlx5_{n}", f"0000:{0x1a + n:02x}:00.0", 0 if n == 0 else 1, 0 if n == 0 else 1,
                          (SWITCH_A if n == 0 else SWITCH_B,), 400, (f"/dev/infiniband/uverbs{n}",)) for n in range(3))
    gpu_links = {(a.ref.index, b.ref.index): links_between(a, b) for a in gpus for b in gpus if a.ref.index < b.ref.index}
    nic_links = {(g.ref.index, n.name): links_between(g, n) for g in gpus for n in nics}
    state.publish_topology(Topology(gpus, nics, MappingProxyType(gpu_links), MappingProxyType(nic_links), NOW, ()))


def publish_health(state: NodeState, unhealthy: int | None) -> None:
    fault = ActiveFault("xid_79", "critical", "drain_and_reset_gpu", "XID 79", "gpu_reset", NOW, NOW)
    verdicts = tuple(GpuHealth(i, uuid_for(i), UNHEALTHY, (fault,), NOW, "drain_and_reset_gpu") if i == unhealthy
                     else GpuHealth(i, uuid_for(i), HEALTHY, since=NOW) for i in range(4))
    state.publish_health(NodeHealth(NOW, UNHEALTHY if unhealthy is not None else HEALTHY, NONE, verdicts))


async def test_the_real_agents_health_and_topology_reach_the_kubelet(short_dir: Path) -> None:
    state = make_state()
    publish_node(state)
    publish_health(state, unhealthy=3)
    server = ApiServer(state, FakeSlicer(state), api_config(short_dir), allocator)
    await server.start()
    kubelet = FakeKubelet(str(short_dir / "device-plugins"))
    await kubelet.start()
    config = load(None, {"agent_socket": server.socket_path, "kubelet_socket": kubelet.socket_path,
                         "health_poll_seconds": 0.1, "kubelet_poll_seconds": 0.05})
    service = DevicePluginService(config)
    task = asyncio.create_task(service.run())
    try:
        await kubelet.wait_registrations(1)
        wanted = [(uuid_for(0), "Healthy"), (uuid_for(2), "Healthy"), (uuid_for(3), "Unhealthy")]
        while (devices := await kubelet.next_list(GPU)) != wanted:
            assert len(devices) <= 3, devices
        assert {device.ID: [node.ID for node in device.topology.nodes] for device in kubelet.connections[GPU].devices
                } == {uuid_for(0): [0], uuid_for(2): [1], uuid_for(3): [1]}  # GetTopology's NUMA nodes
        publish_health(state, unhealthy=None)  # the health checker's next verdict: recovered
        assert await kubelet.next_list(GPU) == [(uuid_for(i), "Healthy") for i in (0, 2, 3)]

        request = api_pb2.PreferredAllocationRequest(container_requests=[api_pb2.ContainerPreferredAllocationRequest(
            available_deviceIDs=[uuid_for(i) for i in (0, 2, 3)], allocation_size=2)])
        preferred = await kubelet.plugin(GPU).GetPreferredAllocation(request)
        assert list(preferred.container_responses[0].deviceIDs) == [uuid_for(2), uuid_for(3)]  # one PCIe switch

        allocate = api_pb2.AllocateRequest(container_requests=[api_pb2.ContainerAllocateRequest(
            devices_ids=[uuid_for(2), uuid_for(3)])])
        container = (await kubelet.plugin(GPU).Allocate(allocate)).container_responses[0]
        assert sorted(spec.host_path for spec in container.devices) == [
            "/dev/infiniband/uverbs1", "/dev/infiniband/uverbs2"]  # the NICs on their switch, their nodes only
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await kubelet.stop()
        await server.stop()
