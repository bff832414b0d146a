"""The device plugin against the kubelet's protocol (issue #11's Done-when): register, list,
preferred allocation (the agent's choice, and the fallback when the agent cannot answer),
allocate, a health change and back, a kubelet restart.

The real kubelet cannot run here (no node, no container runtime): ``dp_kubelet.FakeKubelet`` plays
its side over real unix sockets and validates what the kubelet validates (the API version
"v1beta1", the endpoint as a socket file in its directory, the resource name's format), then dials
the plugin as the device manager does. The agent is ``dp_agent.FakeAgent``, a runtimekit.v1 server
on its own socket: the plugin reaches it only through that socket.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from pathlib import Path

import grpc
import pytest
from dp_agent import MIG_CARD, FakeAgent, gpu_uuid, make_health, make_topology, mig_slice, mig_uuid
from dp_rig import Rig, start_rig, stop_rig

from runtimekit._proto.deviceplugin.v1beta1 import api_pb2

GPU = "nvidia.com/gpu"
MIG_3G, MIG_1G = "nvidia.com/mig-3g.40gb", "nvidia.com/mig-1g.10gb"
HEALTHY_GPUS = [(gpu_uuid(index), "Healthy") for index in range(MIG_CARD)]


async def list_where(rig: Rig, resource: str, wanted: Callable[[list[tuple[str, str]]], bool]) -> list[tuple[str, str]]:
    """The first ListAndWatch list of ``resource`` that is ``wanted`` (earlier ones are skipped)."""
    while True:
        devices = await rig.kubelet.next_list(resource)
        if wanted(devices):
            return devices


async def registered(rig: Rig, count: int = 3) -> dict[str, api_pb2.RegisterRequest]:
    requests = await rig.kubelet.wait_registrations(count)
    return {request.resource_name: request for request in requests}


async def test_registers_every_resource_and_lists_its_devices(rig: Rig) -> None:
    requests = await registered(rig)
    assert sorted(requests) == [GPU, MIG_1G, MIG_3G]  # one per MIG profile, as the "mixed" strategy names them
    assert rig.kubelet.refusals == []
    for resource, request in requests.items():
        assert request.version == "v1beta1"
        assert request.endpoint == "runtimekit-" + resource.replace("/", "_") + ".sock"
        assert request.options.get_preferred_allocation_available
    assert await list_where(rig, GPU, bool) == HEALTHY_GPUS  # GPU 4 is in MIG mode: not advertised whole
    assert await list_where(rig, MIG_3G, bool) == [(mig_uuid(MIG_CARD, 1), "Healthy"), (mig_uuid(MIG_CARD, 2), "Healthy")]
    assert await list_where(rig, MIG_1G, bool) == [(mig_uuid(MIG_CARD, 7), "Healthy")]
    options = rig.kubelet.connections[GPU].options
    assert options is not None and options.get_preferred_allocation_available and not options.pre_start_required


async def test_no_list_goes_out_before_the_agent_answers(short_dir: Path) -> None:
    """An empty first list would tell the kubelet the node has no GPUs (allocatable 0) until the
    next one: the stream stays silent until the agent's node is read, then carries its devices."""
    rig = await start_rig(short_dir, start_agent=False)
    try:
        await rig.kubelet.wait_registrations(1)
        with pytest.raises(TimeoutError):
            await rig.kubelet.next_list(GPU, timeout=0.5)  # polled five times meanwhile: no answer, no list
        await rig.agent.start()
        assert await rig.kubelet.next_list(GPU) == HEALTHY_GPUS  # the first list the kubelet sees
    finally:
        await stop_rig(rig)


async def test_a_node_without_gpus_is_listed_empty_once_read(short_dir: Path) -> None:
    rig = await start_rig(short_dir)
    del rig.agent.node.devices[:]  # the agent answers: no GPU at all
    try:
        await rig.kubelet.wait_registrations(1)
        assert await rig.kubelet.next_list(GPU) == []  # known to be empty: said so
    finally:
        await stop_rig(rig)


def preferred_request(available: list[str], must: list[str], size: int) -> api_pb2.PreferredAllocationRequest:
    return api_pb2.PreferredAllocationRequest(container_requests=[api_pb2.ContainerPreferredAllocationRequest(
        available_deviceIDs=available, must_include_deviceIDs=must, allocation_size=size)])


async def test_preferred_allocation_is_the_agents_choice(rig: Rig) -> None:
    await registered(rig)
    available = [gpu_uuid(index) for index in range(MIG_CARD)]
    response = await rig.kubelet.plugin(GPU).GetPreferredAllocation(preferred_request(available, [gpu_uuid(0)], 2))
    # The fake agent prefers the last candidates; the fallback would have been GPUs 0 and 1.
    assert list(response.container_responses[0].deviceIDs) == [gpu_uuid(0), gpu_uuid(3)]
    asked = rig.agent.allocations[-1]
    assert (asked.count, list(asked.candidate_device_uuids), list(asked.required_device_uuids), asked.with_nics) == (
        2, available, [gpu_uuid(0)], False)


@pytest.mark.parametrize("failure", ["agent down", "UNAVAILABLE", "INTERNAL", "an unusable answer"])
async def test_preferred_allocation_falls_back_and_never_fails(rig: Rig, failure: str) -> None:
    await registered(rig)
    await list_where(rig, GPU, bool)
    if failure == "agent down":
        await rig.agent.stop()  # its socket is removed
    elif failure == "an unusable answer":
        rig.agent.bad_allocate = True  # one device too many
    else:
        rig.agent.fail_allocate = getattr(grpc.StatusCode, failure)
    available = [gpu_uuid(index) for index in range(MIG_CARD)]
    response = await rig.kubelet.plugin(GPU).GetPreferredAllocation(preferred_request(available, [gpu_uuid(2)], 3))
    assert list(response.container_responses[0].deviceIDs) == [gpu_uuid(2), gpu_uuid(0), gpu_uuid(1)]


def allocate_request(*devices: str) -> api_pb2.AllocateRequest:
    return api_pb2.AllocateRequest(container_requests=[api_pb2.ContainerAllocateRequest(devices_ids=list(devices))])


async def test_allocate_names_the_devices_and_the_paired_nics(rig: Rig) -> None:
    await registered(rig)
    await list_where(rig, GPU, bool)
    response = await rig.kubelet.plugin(GPU).Allocate(allocate_request(gpu_uuid(1), gpu_uuid(3)))
    container = response.container_responses[0]
    assert container.envs["NVIDIA_VISIBLE_DEVICES"] == f"{gpu_uuid(1)},{gpu_uuid(3)}"
    assert [device.name for device in container.cdi_devices] == [f"nvidia.com/gpu={gpu_uuid(1)}",
                                                                 f"nvidia.com/gpu={gpu_uuid(3)}"]
    assert [(spec.host_path, spec.container_path, spec.permissions) for spec in container.devices] == [
        ("/dev/infiniband/uverbs1", "/dev/infiniband/uverbs1", "rw"),
        ("/dev/infiniband/uverbs3", "/dev/infiniband/uverbs3", "rw"),
    ]  # the NICs' own device nodes only: no rdma_cm the agent did not name (the host may have none)
    assert container.envs["NCCL_IB_HCA"] == "=mlx5_1,mlx5_3"
    asked = rig.agent.allocations[-1]
    assert asked.with_nics and list(asked.required_device_uuids) == [gpu_uuid(1), gpu_uuid(3)]

    mig = await rig.kubelet.plugin(MIG_3G).Allocate(allocate_request(mig_uuid(MIG_CARD, 2)))
    assert mig.container_responses[0].envs["NVIDIA_VISIBLE_DEVICES"] == mig_uuid(MIG_CARD, 2)
    assert [device.name for device in mig.container_responses[0].cdi_devices] == [f"nvidia.com/gpu={mig_uuid(MIG_CARD, 2)}"]
    assert list(mig.container_responses[0].devices) == []

    with pytest.raises(grpc.aio.AioRpcError) as refused:  # a device of another resource
        await rig.kubelet.plugin(MIG_3G).Allocate(allocate_request(gpu_uuid(0)))
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "container_requests[0].devices_ids" in (refused.value.details() or "")


async def test_allocate_passes_rdma_cm_once_when_the_agent_names_it(rig: Rig) -> None:
    rig.agent.nic_nodes = ("/dev/infiniband/uverbs{n}", "/dev/infiniband/rdma_cm")  # a host with rdma_ucm loaded
    await registered(rig)
    await list_where(rig, GPU, bool)
    response = await rig.kubelet.plugin(GPU).Allocate(allocate_request(gpu_uuid(0), gpu_uuid(2)))
    assert [spec.host_path for spec in response.container_responses[0].devices] == [
        "/dev/infiniband/uverbs0", "/dev/infiniband/rdma_cm", "/dev/infiniband/uverbs2"]


async def test_allocate_without_cdi_or_nics_when_configured_off(short_dir: Path) -> None:
    rig = await start_rig(short_dir, cdi=False, with_nics=False)
    try:
        await registered(rig)
        await list_where(rig, GPU, bool)
        response = await rig.kubelet.plugin(GPU).Allocate(allocate_request(gpu_uuid(0)))
        container = response.container_responses[0]
        assert (dict(container.envs), list(container.cdi_devices), list(container.devices)) == (
            {"NVIDIA_VISIBLE_DEVICES": gpu_uuid(0)}, [], [])
        assert rig.agent.allocations == []
    finally:
        await stop_rig(rig)


async def test_list_and_watch_carries_each_devices_numa_node(rig: Rig) -> None:
    await registered(rig)
    await list_where(rig, GPU, bool)
    await list_where(rig, MIG_1G, bool)

    def numa(resource: str) -> dict[str, list[int]]:
        return {device.ID: [node.ID for node in device.topology.nodes] if device.HasField("topology") else []
                for device in rig.kubelet.connections[resource].devices}

    assert numa(GPU) == {gpu_uuid(0): [0], gpu_uuid(1): [0], gpu_uuid(2): [1], gpu_uuid(3): []}  # GPU 3: unknown
    assert numa(MIG_1G) == {mig_uuid(MIG_CARD, 7): [1]}  # a MIG device: its card's node
    reads = rig.agent.topology_reads
    for _ in range(3):  # GetPreferredAllocation and Allocate never read the topology
        await rig.kubelet.plugin(GPU).GetPreferredAllocation(preferred_request([gpu_uuid(0), gpu_uuid(1)], [], 1))
        await rig.kubelet.plugin(GPU).Allocate(allocate_request(gpu_uuid(0)))
    assert rig.agent.topology_reads == reads


async def test_the_topology_is_read_until_known_then_only_when_the_gpus_change(short_dir: Path) -> None:
    rig = await start_rig(short_dir)
    rig.agent.topology = None  # the agent's first discovery is not done
    try:
        await registered(rig)
        assert await list_where(rig, GPU, bool) == HEALTHY_GPUS  # devices go out without a topology
        assert not any(device.HasField("topology") for device in rig.kubelet.connections[GPU].devices)
        rig.agent.topology = make_topology()
        await list_where(rig, GPU, lambda devices: rig.kubelet.connections[GPU].devices[0].HasField("topology"))
        reads = rig.agent.topology_reads
        await rig.agent.set_health(make_health(unhealthy=(1,), evaluated_at=2))  # GetNode polls go on
        await list_where(rig, GPU, lambda devices: devices[1][1] == "Unhealthy")
        polls = rig.agent.node_reads
        while rig.agent.node_reads < polls + 2:
            await asyncio.sleep(0.05)
        assert rig.agent.topology_reads == reads  # the same GPUs: the topology is not read again
        del rig.agent.node.devices[3]  # GPU 3 fell off the node: the GPUs changed
        await list_where(rig, GPU, lambda devices: len(devices) == 3)
        assert rig.agent.topology_reads == reads + 1
    finally:
        await stop_rig(rig)


async def test_devices_that_hold_slices_are_not_listed(rig: Rig) -> None:
    await registered(rig)
    assert await list_where(rig, MIG_1G, bool) == [(mig_uuid(MIG_CARD, 7), "Healthy")]
    rig.agent.node.devices[1].slice_ids.append("s-000000000001")  # a "tdm" slice on GPU 1
    rig.agent.node.devices[MIG_CARD].slice_ids.append("s-000000000002")
    rig.agent.slices = [mig_slice("s-000000000002", 7)]  # a "mig" slice made of the 1g.10gb partition
    assert await list_where(rig, MIG_1G, lambda devices: not devices) == []
    assert await list_where(rig, GPU, lambda devices: len(devices) == 3) == [
        (gpu_uuid(index), "Healthy") for index in (0, 2, 3)]
    assert await list_where(rig, MIG_3G, bool) == [(mig_uuid(MIG_CARD, 1), "Healthy"), (mig_uuid(MIG_CARD, 2), "Healthy")]


async def test_a_health_change_and_back_reach_list_and_watch(rig: Rig) -> None:
    await registered(rig)
    assert await list_where(rig, GPU, bool) == HEALTHY_GPUS
    await rig.agent.set_health(make_health(unhealthy=(1,), evaluated_at=2))
    sick = await list_where(rig, GPU, lambda devices: devices != HEALTHY_GPUS)
    assert sick == [(gpu_uuid(0), "Healthy"), (gpu_uuid(1), "Unhealthy"), (gpu_uuid(2), "Healthy"),
                    (gpu_uuid(3), "Healthy")]
    await rig.agent.set_health(make_health(evaluated_at=3))
    assert await rig.kubelet.next_list(GPU) == HEALTHY_GPUS  # the very next list: Healthy again

    await rig.agent.set_health(make_health(unhealthy=(MIG_CARD,), evaluated_at=4))  # the MIG card's verdict
    assert await list_where(rig, MIG_1G, lambda devices: devices[0][1] == "Unhealthy") == [
        (mig_uuid(MIG_CARD, 7), "Unhealthy")]


async def test_registers_again_when_the_kubelet_restarts(rig: Rig) -> None:
    first = await registered(rig)
    assert await list_where(rig, GPU, bool) == HEALTHY_GPUS
    await rig.kubelet.restart()  # the kubelet socket made again, the plugin sockets deleted
    again = {request.resource_name: request for request in (await rig.kubelet.wait_registrations(6))[3:]}
    assert sorted(again) == sorted(first)
    for resource, request in again.items():
        assert os.path.exists(os.path.join(rig.kubelet.directory, request.endpoint)), f"{resource}: socket not made again"
    assert await list_where(rig, GPU, bool) == HEALTHY_GPUS  # the new kubelet's stream, on the new socket
    response = await rig.kubelet.plugin(GPU).Allocate(allocate_request(gpu_uuid(2)))
    assert response.container_responses[0].envs["NVIDIA_VISIBLE_DEVICES"] == gpu_uuid(2)


async def test_a_restarted_agent_is_read_again(rig: Rig) -> None:
    await registered(rig)
    assert await list_where(rig, GPU, bool) == HEALTHY_GPUS
    await rig.agent.stop()
    agent = FakeAgent(rig.agent.socket_path)  # back, with GPU 0 unhealthy
    agent.health = make_health(unhealthy=(0,), evaluated_at=5)
    await agent.start()
    rig.agent = agent
    assert (await list_where(rig, GPU, lambda devices: devices != HEALTHY_GPUS))[0] == (gpu_uuid(0), "Unhealthy")
