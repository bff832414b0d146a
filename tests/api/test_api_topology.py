"""runtimekit.v1's topology calls over a real unix socket: GetTopology, AllocateDevices (its
default candidates, its refusals named by field), and GetNode's partitions of each device."""

from __future__ import annotations

import dataclasses
from types import MappingProxyType

import grpc
import grpc.aio
import pytest
from api_fakes import NOW, gpu_ref, make_gpu, uuid_for
from api_harness import Api

from runtimekit._proto.runtimekit.v1 import service_pb2, slice_pb2
from runtimekit.gpu.types import NOT_SUPPORTED, MigDevice, NodeSnapshot
from runtimekit.state import SamplerStats
from runtimekit.state.distance import links_between
from runtimekit.state.health import HEALTHY, NONE, UNHEALTHY, ActiveFault, GpuHealth, NodeHealth
from runtimekit.state.refs import MigRef
from runtimekit.state.topology import GpuPlace, Link, NicPlace, Topology

SWITCH_A, SWITCH_B = "0000:16:00.0", "0000:96:00.0"


def four_gpu_topology() -> Topology:
    """GPUs 0 and 1: 4 direct NVLinks, under switch A on NUMA node 0; GPUs 2 and 3 under switch B
    on NUMA node 1 (socket 1). One NIC under each switch."""
    gpus = (
        GpuPlace(gpu_ref(0), 0, 0, (SWITCH_A,), MappingProxyType({1: 4})),
        GpuPlace(gpu_ref(1), 0, 0, (SWITCH_A,), MappingProxyType({0: 4})),
        GpuPlace(gpu_ref(2), 1, 1, (SWITCH_B,)),
        GpuPlace(gpu_ref(3), 1, 1, (SWITCH_B,)),
    )
    nics = (NicPlace("mlx5_0", "0000:1a:00.0", 0, 0, (SWITCH_A,), 400, ("/dev/infiniband/uverbs0",)),
            NicPlace("mlx5_1", "0000:9a:00.0", 1, 1, (SWITCH_B,), 400, ("/dev/infiniband/uverbs1",)))
    gpu_links = {(a.ref.index, b.ref.index): links_between(a, b) for a in gpus for b in gpus if a.ref.index < b.ref.index}
    nic_links = {(g.ref.index, n.name): links_between(g, n) for g in gpus for n in nics}
    return Topology(gpus, nics, MappingProxyType(gpu_links), MappingProxyType(nic_links), NOW, ("NIC mlx5_9: unreadable",))


def four_gpus(api: Api, *, topology: bool = True) -> None:
    """Four sampled GPUs (GPU 1 unhealthy; FakeSlicer: GPU 1 in "mig" mode) and their topology."""
    snapshot = NodeSnapshot(sampled_at=NOW, duration_seconds=0.01, nvml_up=True, nvml_error="", driver=None,
                            device_count=4, gpus=tuple(make_gpu(i) for i in range(4)))
    api.state.publish_snapshot(snapshot, SamplerStats())
    fault = ActiveFault("xid_79", "critical", "drain_and_reset_gpu", "XID 79", "gpu_reset", NOW, NOW)
    health = tuple(GpuHealth(i, uuid_for(i), HEALTHY, since=NOW) if i != 1 else
                   GpuHealth(1, uuid_for(1), UNHEALTHY, (fault,), NOW, "drain_and_reset_gpu") for i in range(4))
    api.state.publish_health(NodeHealth(NOW, UNHEALTHY, NONE, health))
    if topology:
        api.state.publish_topology(four_gpu_topology())


def field_of(error: grpc.aio.AioRpcError) -> str | None:
    return dict(error.trailing_metadata() or ()).get("runtimekit-field")


async def allocate(api: Api, count: int, candidates: tuple[int, ...] = (), required: tuple[int, ...] = (),
                   with_nics: bool = False) -> service_pb2.AllocateDevicesResponse:
    request = service_pb2.AllocateDevicesRequest(
        count=count, candidate_device_uuids=[uuid_for(i) for i in candidates],
        required_device_uuids=[uuid_for(i) for i in required], with_nics=with_nics)
    return await api.stub.AllocateDevices(request)


async def test_get_topology_answers_places_links_and_errors(api: Api) -> None:
    four_gpus(api)
    found = (await api.stub.GetTopology(service_pb2.GetTopologyRequest())).topology
    assert [d.ref.index for d in found.devices] == [0, 1, 2, 3]
    assert found.devices[0].ref == slice_pb2.DeviceRef(kind="gpu", vendor="nvidia", uuid=uuid_for(0), index=0, pci_address="0000:18:00.0")
    assert found.devices[2].numa_node == 1 and found.devices[2].socket == 1 and list(found.devices[2].pcie_switches) == [SWITCH_B]
    links = {(link.device_index, link.peer_index): (link.level, link.links, link.cost) for link in found.device_links}
    assert links[(0, 1)] == ("interconnect", 4, Link("nvlink", 4).cost)  # vendor-neutral level name
    assert links[(2, 3)] == ("pcie_switch", 0, 50) and links[(0, 2)] == ("system", 0, 80)
    assert len(links) == 6
    assert [n.name for n in found.nics] == ["mlx5_0", "mlx5_1"]
    assert list(found.nics[1].device_nodes) == ["/dev/infiniband/uverbs1"] and found.nics[1].rate_gbps == 400
    near = [(n.device_index, n.nic, n.level) for n in found.nic_links if n.level == "pcie_switch"]
    assert near == [(0, "mlx5_0", "pcie_switch"), (1, "mlx5_0", "pcie_switch"), (2, "mlx5_1", "pcie_switch"), (3, "mlx5_1", "pcie_switch")]
    assert list(found.errors) == ["NIC mlx5_9: unreadable"] and found.discovered_at.ToSeconds() == int(NOW)


async def test_an_unknown_numa_node_is_absent_not_zero(api: Api) -> None:
    four_gpus(api)
    topology = four_gpu_topology()
    api.state.publish_topology(dataclasses.replace(topology, gpus=(dataclasses.replace(topology.gpus[0], numa_node=None, socket=None),
                                                                   *topology.gpus[1:])))
    found = (await api.stub.GetTopology(service_pb2.GetTopologyRequest())).topology
    assert not found.devices[0].HasField("numa_node") and not found.devices[0].HasField("socket")
    assert found.devices[1].HasField("numa_node") and found.devices[1].numa_node == 0


@pytest.mark.parametrize("call,request_message", [
    ("GetTopology", service_pb2.GetTopologyRequest()),
    ("AllocateDevices", service_pb2.AllocateDevicesRequest(count=1)),
])
async def test_before_the_first_discovery_the_calls_are_unavailable(api: Api, call: str, request_message: object) -> None:
    four_gpus(api, topology=False)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await getattr(api.stub, call)(request_message)
    assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
    assert "not discovered the node's topology yet" in caught.value.details()


async def test_allocate_by_default_takes_free_whole_schedulable_devices(api: Api) -> None:
    four_gpus(api)
    # GPU 1 is unhealthy and in partition mode: the pair 0-1 (NVLink) is not a candidate; 2-3 share a switch
    answer = await allocate(api, 2)
    assert [d.device.index for d in answer.devices] == [2, 3] and answer.cost == 50
    assert all(not d.HasField("nic") for d in answer.devices)
    await api.stub.CreateSlice(service_pb2.CreateSliceRequest(mode="tdm", memory="2GiB", owner_id="me"))  # on GPU 0
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await allocate(api, 3)
    assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert caught.value.details() == "count: 3 devices asked, 2 free whole schedulable devices"
    assert field_of(caught.value) == "count"


async def test_allocate_over_given_candidates_prefers_nvlink_and_pairs_nics(api: Api) -> None:
    four_gpus(api)
    answer = await allocate(api, 2, candidates=(0, 1, 2, 3), with_nics=True)
    assert [d.device.index for d in answer.devices] == [0, 1] and answer.cost == Link("nvlink", 4).cost
    assert answer.devices[0].device.uuid == uuid_for(0)
    assert {d.nic.name for d in answer.devices} == {"mlx5_0", "mlx5_1"}  # each NIC once
    assert all(list(d.nic.device_nodes) for d in answer.devices)
    required = await allocate(api, 2, candidates=(0, 1, 2, 3), required=(2,))
    assert [d.device.index for d in required.devices] == [2, 3]


@pytest.mark.parametrize("count,candidates,required,field,details", [
    (0, (), (), "count", "count: must be at least 1 device, got 0"),
    (1, (9,), (), "candidate_device_uuids", f"candidate_device_uuids: no device {uuid_for(9)!r} on this node"),
    (1, (), (9,), "required_device_uuids", f"required_device_uuids: no device {uuid_for(9)!r} on this node"),
    (2, (), (1,), "required_device_uuids", f"required_device_uuids: device {uuid_for(1)!r} is not a candidate "
     "(it is in partition mode, holds a slice, is lost or is not schedulable)"),
    (2, (0, 2), (3,), "required_device_uuids", f"required_device_uuids: device {uuid_for(3)!r} is not a candidate"),
    (1, (0, 1, 2), (0, 1), "required_device_uuids", "required_device_uuids: 2 devices required, more than count 1"),
], ids=["count-zero", "unknown-candidate", "unknown-required", "required-not-free", "required-not-given", "too-many-required"])
async def test_allocate_refuses_a_bad_request_naming_the_field(api: Api, count: int, candidates: tuple[int, ...],
                                                               required: tuple[int, ...], field: str, details: str) -> None:
    four_gpus(api)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await allocate(api, count, candidates, required)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert caught.value.details() == details
    assert field_of(caught.value) == field


async def test_get_node_lists_each_devices_partitions(api: Api) -> None:
    migs = tuple(MigDevice(MigRef(gpu_ref(1), gi, 0, f"MIG-{gi:08d}-0000-0000-0000-000000000000"), position, profile, pid, start,
                           NOT_SUPPORTED, NOT_SUPPORTED, NOT_SUPPORTED, NOT_SUPPORTED)
                 for position, (gi, profile, pid, start) in enumerate([(2, "3g.40gb", 9, 4), (1, "3g.40gb", 9, 0)]))
    snapshot = NodeSnapshot(sampled_at=NOW, duration_seconds=0.01, nvml_up=True, nvml_error="", driver=None, device_count=2,
                            gpus=(make_gpu(0), dataclasses.replace(make_gpu(1), mig_devices=migs)))
    api.state.publish_snapshot(snapshot, SamplerStats())
    node = (await api.stub.GetNode(service_pb2.GetNodeRequest())).node
    assert list(node.devices[0].partitions) == []
    assert list(node.devices[1].partitions) == [  # by GPU-instance id
        slice_pb2.Partition(gpu_instance_id=1, compute_instance_id=0, uuid="MIG-00000001-0000-0000-0000-000000000000",
                            profile_id=9, placement_start=0, profile="3g.40gb"),
        slice_pb2.Partition(gpu_instance_id=2, compute_instance_id=0, uuid="MIG-00000002-0000-0000-0000-000000000000",
                            profile_id=9, placement_start=4, profile="3g.40gb"),
    ]
