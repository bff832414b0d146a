"""runtimekit.v1 end to end over a real unix socket: every RPC, every error mapping, the streams."""

from __future__ import annotations

import asyncio

import grpc
import grpc.aio
import pytest
from api_fakes import MEMORY_MIB, NOW, uuid_for
from api_harness import Api

from runtimekit._proto.runtimekit.v1 import node_pb2, service_pb2, slice_pb2
from runtimekit.state.health import HEALTHY, NONE, UNHEALTHY, ActiveFault, GpuHealth, NodeHealth, SliceHealth
from runtimekit.state.slices import SliceError, SliceRequest

GiB = 1 << 30
MIB = 1 << 20


def field_of(error: grpc.aio.AioRpcError) -> str | None:
    return dict(error.trailing_metadata() or ()).get("runtimekit-field")


async def create(api: Api, **fields) -> slice_pb2.Slice:
    request = service_pb2.CreateSliceRequest(**{"mode": "tdm", "memory": "2GiB", "compute": 50, "owner_id": "me", **fields})
    return (await api.stub.CreateSlice(request)).slice


async def test_create_slice_hands_every_field_to_the_slicer_and_returns_the_slice(api: Api) -> None:
    made = await create(api, mode="tdm", compute=50, memory="2GiB", device="0", pod_uid="uid-1", container="main", owner_id="",
                        priority=3)
    assert api.slicer.calls == [("create", SliceRequest("tdm", "2GiB", 50, "0", "uid-1", "main", "", 3))]
    assert made.id.startswith("s-") and made.mode == "tdm" and made.state == slice_pb2.SLICE_STATE_READY
    assert made.device == slice_pb2.DeviceRef(kind="gpu", vendor="nvidia", uuid=uuid_for(0), index=0, pci_address="0000:18:00.0")
    assert (made.compute_percent, made.memory_bytes) == (50, 2 * GiB)
    assert (made.requested_compute_percent, made.requested_memory_bytes, made.requested_device) == (50, 2 * GiB, "any")
    assert made.owner == slice_pb2.Owner(pod_uid="uid-1", container="main")
    assert made.priority == 3 and made.cdi_device == f"runtimekit.io/slice={made.id}"
    assert made.created_at.ToSeconds() == int(NOW)
    assert not made.HasField("partition") and made.profile == ""


async def test_a_partition_slice_names_its_partition(api: Api) -> None:
    made = await create(api, mode="mig", compute=30, memory="20GiB")
    assert made.HasField("partition")
    assert made.partition == slice_pb2.Partition(gpu_instance_id=7, compute_instance_id=0, uuid="MIG-11111111-2222-3333-4444-555555555555",
                                                 profile_id=9, placement_start=4, placement_size=4, profile="3g.40gb")
    assert made.profile == "3g.40gb" and made.device.index == 1
    assert (made.compute_percent, made.memory_bytes, made.requested_memory_bytes) == (43, 20_096 * MIB, 20 * GiB)


async def test_get_list_and_delete(api: Api) -> None:
    first, second = await create(api), await create(api, mode="mig")
    assert (await api.stub.GetSlice(service_pb2.GetSliceRequest(slice_id=second.id))).slice == second
    listed = await api.stub.ListSlices(service_pb2.ListSlicesRequest())
    assert [s.id for s in listed.slices] == sorted([first.id, second.id])
    gone = await api.stub.DeleteSlice(service_pb2.DeleteSliceRequest(slice_id=first.id))
    assert gone.slice == first
    assert [s.id for s in (await api.stub.ListSlices(service_pb2.ListSlicesRequest())).slices] == [second.id]
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await api.stub.GetSlice(service_pb2.GetSliceRequest(slice_id=first.id))
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND
    assert caught.value.details() == f"slice_id: no slice {first.id!r} on this node"
    assert field_of(caught.value) == "slice_id"


@pytest.mark.parametrize("call,request_type", [("GetSlice", service_pb2.GetSliceRequest),
                                               ("DeleteSlice", service_pb2.DeleteSliceRequest)])
@pytest.mark.parametrize("slice_id,shown", [("", "''"), ("s-XYZ", "'s-XYZ'"), ("s-0123456789AB", "'s-0123456789AB'"),
                                            ("s-" + "0" * 5000, "'s-0000")])
async def test_a_slice_id_that_cannot_be_one_is_an_invalid_argument(api: Api, call: str, request_type: type, slice_id: str,
                                                                     shown: str) -> None:
    """Told from a well-formed id of no slice (NOT_FOUND), and never echoed at length."""
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await getattr(api.stub, call)(request_type(slice_id=slice_id))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    details = caught.value.details()
    assert details.startswith(f"slice_id: a slice id, s- and 12 hex digits (s-0123456789ab), got {shown}")
    assert details.endswith(shown) or len(details) < 200
    assert field_of(caught.value) == "slice_id"
    assert [name for name, _ in api.slicer.calls] == []  # refused before the slicer


@pytest.mark.parametrize("code,status", [
    ("invalid_argument", grpc.StatusCode.INVALID_ARGUMENT),
    ("failed_precondition", grpc.StatusCode.FAILED_PRECONDITION),
    ("resource_exhausted", grpc.StatusCode.RESOURCE_EXHAUSTED),
    ("not_found", grpc.StatusCode.NOT_FOUND),
    ("unavailable", grpc.StatusCode.UNAVAILABLE),
])
async def test_every_refusal_maps_to_its_status_with_the_field_named(api: Api, code: str, status: grpc.StatusCode) -> None:
    api.slicer.fail_next = SliceError(code, "memory", "the rule, in words")
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await create(api)
    assert caught.value.code() == status
    assert caught.value.details() == "memory: the rule, in words"
    assert field_of(caught.value) == "memory"


async def test_a_refusal_about_no_field_has_no_field_metadata(api: Api) -> None:
    api.slicer.fail_next = SliceError("resource_exhausted", "", "no GPU has 8 GiB free")
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await create(api)
    assert (caught.value.code(), caught.value.details()) == (grpc.StatusCode.RESOURCE_EXHAUSTED, "no GPU has 8 GiB free")
    assert field_of(caught.value) is None


async def test_the_slicers_own_validation_reaches_the_caller(api: Api) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await create(api, memory="2 gigs")
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert caught.value.details() == "memory: must be NGiB or NMiB, got '2 gigs'"


async def test_an_unexpected_error_is_internal_and_the_server_keeps_serving(api: Api) -> None:
    api.slicer.fail_next = KeyError("boom")
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await create(api)
    assert caught.value.code() == grpc.StatusCode.INTERNAL
    assert caught.value.details() == "internal error: KeyError: 'boom'"
    assert (await create(api)).id


async def test_set_device_mode_answers_the_device_with_its_pending_mode(api: Api) -> None:
    answer = await api.stub.SetDeviceMode(service_pb2.SetDeviceModeRequest(device="0", mode="mig"))
    assert api.slicer.calls[-1] == ("set_device_mode", ("0", "mig"))
    device = answer.device
    assert (device.ref.index, device.ref.uuid, device.model) == (0, uuid_for(0), "NVIDIA H100 80GB HBM3")
    assert (device.mode, device.pending_mode, device.partition_capable) == ("mig", "mig", True)
    assert device.health.state == node_pb2.HEALTH_STATE_HEALTHY


async def test_set_device_mode_on_a_card_with_slices_is_a_failed_precondition(api: Api) -> None:
    await create(api)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await api.stub.SetDeviceMode(service_pb2.SetDeviceModeRequest(device="0", mode="mig"))
    assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert caught.value.details() == "device: GPU 0 has slices; delete them first"
    assert field_of(caught.value) == "device"


async def test_get_node_shows_devices_modes_capacities_and_health(api: Api) -> None:
    made = await create(api, compute=30, memory="4GiB")
    node = (await api.stub.GetNode(service_pb2.GetNodeRequest())).node
    assert node.slicer_enabled and node.driver_version == "550.54.15" and node.sampled_at.ToSeconds() == int(NOW)
    assert [d.ref.index for d in node.devices] == [0, 1]
    tdm, mig = node.devices
    assert tdm.ref == slice_pb2.DeviceRef(kind="gpu", vendor="nvidia", uuid=uuid_for(0), index=0, pci_address="0000:18:00.0")
    assert (tdm.model, tdm.memory_bytes, tdm.lost, tdm.mode, mig.mode) == ("NVIDIA H100 80GB HBM3", 80 * GiB, False, "tdm", "mig")
    assert list(tdm.slice_ids) == [made.id]
    assert tdm.capacity == node_pb2.Capacity(
        compute_percent_total=100, compute_percent_free=70, memory_bytes_total=MEMORY_MIB * MIB,
        memory_bytes_usable=(MEMORY_MIB - 1024) * MIB, memory_bytes_free=(MEMORY_MIB - 1024 - 4096) * MIB)
    assert tdm.health.state == node_pb2.HEALTH_STATE_HEALTHY and tdm.health.schedulable
    assert mig.health.state == node_pb2.HEALTH_STATE_UNHEALTHY and not mig.health.schedulable
    assert [(f.fault, f.severity, f.action, f.HasField("partition_gpu_instance_id")) for f in mig.health.faults] == [
        ("xid_79", "critical", "drain_and_reset_gpu", False)]
    assert node.health.state == node_pb2.HEALTH_STATE_UNHEALTHY
    assert [(e.ref.index, e.ref.pci_address, e.health.state) for e in node.health.devices] == [
        (0, "0000:18:00.0", node_pb2.HEALTH_STATE_HEALTHY), (1, "0000:19:00.0", node_pb2.HEALTH_STATE_UNHEALTHY)]


async def test_watch_slices_sends_the_current_list_then_each_change(api: Api) -> None:
    before = await create(api)
    stream = api.stub.WatchSlices(service_pb2.WatchSlicesRequest())
    first = await asyncio.wait_for(stream.read(), 5)
    assert [s.id for s in first.slices] == [before.id]
    after = await create(api, mode="mig")
    second = await asyncio.wait_for(stream.read(), 5)
    assert [s.id for s in second.slices] == sorted([before.id, after.id])
    await api.stub.DeleteSlice(service_pb2.DeleteSliceRequest(slice_id=before.id))
    third = await asyncio.wait_for(stream.read(), 5)
    assert [s.id for s in third.slices] == [after.id]
    stream.cancel()


async def test_watch_health_sends_the_verdict_then_each_new_one(api: Api) -> None:
    stream = api.stub.WatchHealth(service_pb2.WatchHealthRequest())
    first = await asyncio.wait_for(stream.read(), 5)
    assert first.health.state == node_pb2.HEALTH_STATE_UNHEALTHY
    assert [e.health.state for e in first.health.devices] == [node_pb2.HEALTH_STATE_HEALTHY, node_pb2.HEALTH_STATE_UNHEALTHY]
    api.state.publish_health(NodeHealth(NOW + 5, HEALTHY, NONE))
    second = await asyncio.wait_for(stream.read(), 5)
    assert second.health.state == node_pb2.HEALTH_STATE_HEALTHY
    assert second.health.evaluated_at.ToSeconds() == int(NOW) + 5
    stream.cancel()


SLICE_CALLS = [
    ("CreateSlice", service_pb2.CreateSliceRequest(mode="tdm", memory="2GiB")),
    ("DeleteSlice", service_pb2.DeleteSliceRequest(slice_id="s-000000000001")),
    ("GetSlice", service_pb2.GetSliceRequest(slice_id="s-000000000001")),
    ("ListSlices", service_pb2.ListSlicesRequest()),
    ("SetDeviceMode", service_pb2.SetDeviceModeRequest(device="0", mode="mig")),
]


@pytest.mark.parametrize("call,request_message", SLICE_CALLS, ids=[c for c, _ in SLICE_CALLS])
async def test_without_a_slicer_slice_calls_are_unavailable_naming_the_setting(
    api_without_slicer: Api, call: str, request_message: object
) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await getattr(api_without_slicer.stub, call)(request_message)
    assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
    assert "slicer.enabled" in caught.value.details()


async def test_without_a_slicer_watch_slices_is_unavailable_and_the_node_is_served(api_without_slicer: Api) -> None:
    stream = api_without_slicer.stub.WatchSlices(service_pb2.WatchSlicesRequest())
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await asyncio.wait_for(stream.read(), 5)
    assert caught.value.code() == grpc.StatusCode.UNAVAILABLE and "slicer.enabled" in caught.value.details()
    node = (await api_without_slicer.stub.GetNode(service_pb2.GetNodeRequest())).node
    assert not node.slicer_enabled and len(node.devices) == 2
    assert node.devices[0].mode == "" and not node.devices[0].HasField("capacity")


async def test_a_partitions_fault_is_its_own_and_reaches_its_slices_health(api: Api) -> None:
    fault = ActiveFault("xid_109", "critical", "restart_application", "XID 109 in GPU instance 3", "clean_samples", NOW, NOW,
                        gpu_instance_id=3, scope="instance")
    gpu = GpuHealth(0, uuid_for(0), HEALTHY, (), NOW, instance_faults=(fault,))
    faulty = SliceHealth("s-00000000000a", 0, uuid_for(0), 3, UNHEALTHY, (fault,), NOW, "restart_application")
    measured = SliceHealth("s-00000000000b", 0, uuid_for(0), None, HEALTHY, memory_used_bytes=GiB, utilization=0.25)
    api.state.publish_health(NodeHealth(NOW, HEALTHY, NONE, (gpu,), slices=(measured, faulty)))
    node = (await api.stub.GetNode(service_pb2.GetNodeRequest())).node
    health = node.devices[0].health
    assert health.state == node_pb2.HEALTH_STATE_HEALTHY and not health.faults
    (raised,) = health.partition_faults
    assert raised.HasField("partition_gpu_instance_id") and raised.partition_gpu_instance_id == 3
    assert (raised.fault, raised.clears, raised.first_seen.ToSeconds()) == ("xid_109", "clean_samples", int(NOW))
    first, second = node.health.slices
    assert (first.slice_id, first.state, first.ref.index, first.HasField("partition_gpu_instance_id")) == (
        "s-00000000000a", node_pb2.HEALTH_STATE_UNHEALTHY, 0, True)
    assert [f.fault for f in first.faults] == ["xid_109"] and not first.HasField("memory_used_bytes")
    assert (second.state, second.memory_used_bytes, second.utilization) == (node_pb2.HEALTH_STATE_HEALTHY, GiB, 0.25)
    assert not second.HasField("partition_gpu_instance_id")
