"""runtimekit.v1's partition fields: CreateSlice hands profile and placement_start to the slicer
(an absent placement_start as None), GetNode's devices carry their architecture, partition profiles
(by profile id, placements ascending) and memory/compute slices in all. Over a real unix socket
with the fake slicer (api_fakes.py); the conversion alone where the fake cannot hold profiles."""

from __future__ import annotations

from dataclasses import replace

import grpc
import grpc.aio
import pytest
from api_fakes import gpu_ref, make_gpu
from api_harness import Api

from runtimekit._proto.runtimekit.v1 import service_pb2, slice_pb2
from runtimekit.api.convert import device_message
from runtimekit.gpu.mig import MigProfile
from runtimekit.gpu.reader import ARCHITECTURES
from runtimekit.gpu.types import ARCHITECTURE_NAMES
from runtimekit.state.slices import DeviceModeInfo, SliceError

MIB = 1 << 20


@pytest.mark.parametrize(("fields", "start"), [({"placement_start": 3}, 3), ({"placement_start": 0}, 0), ({}, None)])
async def test_create_slice_hands_profile_and_placement_to_the_slicer(api: Api, fields: dict[str, int],
                                                                     start: int | None) -> None:
    api.slicer.fail_next = SliceError("failed_precondition", "placement_start", "held by GPU instance 1")
    request = service_pb2.CreateSliceRequest(mode="mig", device="1", profile="1g.10gb", owner_id="me", **fields)
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await api.stub.CreateSlice(request)
    assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert refused.value.details() == "placement_start: held by GPU instance 1"
    (_, handed), = api.slicer.calls
    assert (handed.profile, handed.placement_start, handed.memory, handed.compute) == ("1g.10gb", start, "", 0)


async def test_get_node_names_each_devices_architecture(api: Api) -> None:
    node = (await api.stub.GetNode(service_pb2.GetNodeRequest())).node
    assert [d.architecture for d in node.devices] == ["hopper", "hopper"]
    assert [list(d.partition_profiles) for d in node.devices] == [[], []]  # the fake slicer knows none


async def test_without_a_slicer_no_profiles_are_listed_and_the_architecture_is(api_without_slicer: Api) -> None:
    device = (await api_without_slicer.stub.GetNode(service_pb2.GetNodeRequest())).node.devices[0]
    assert (device.architecture, list(device.partition_profiles), device.partition_memory_slices) == ("hopper", [], 0)


def test_the_names_the_api_passes_are_those_the_reader_gives() -> None:
    assert set(ARCHITECTURES.values()) == set(ARCHITECTURE_NAMES)


@pytest.mark.parametrize(("reported", "shown"), [("blackwell", "blackwell"), ("arch12", "")])
def test_an_architecture_nvml_names_later_is_unknown(reported: str, shown: str) -> None:
    gpu = make_gpu(0)
    gpu = replace(gpu, identity=replace(gpu.identity, architecture=reported))
    assert device_message(gpu_ref(0), gpu, None, None).architecture == shown


PROFILES = (  # as the driver lists them: enum order, placements as NVML returns them
    MigProfile(19, "1g.10gb", 1, 1, 9856, (6, 0, 1, 2, 3, 4, 5)),
    MigProfile(9, "3g.40gb", 3, 4, 40192, (0, 4)),
    MigProfile(0, "7g.80gb", 7, 8, 80384, (0,)),
)


def test_device_lists_profiles_by_id_with_placements_ascending_and_its_slices_in_all() -> None:
    info = DeviceModeInfo(gpu_ref(0), "mig", mig_capable=True, memory_mib=81920, profiles=PROFILES, memory_slices=8,
                          compute_slices=7)
    device = device_message(gpu_ref(0), make_gpu(0), info, None)
    assert list(device.partition_profiles) == [
        slice_pb2.PartitionProfile(profile_id=0, name="7g.80gb", compute_slices=7, memory_slices=8, memory_bytes=80384 * MIB,
                                   placements=[0]),
        slice_pb2.PartitionProfile(profile_id=9, name="3g.40gb", compute_slices=3, memory_slices=4, memory_bytes=40192 * MIB,
                                   placements=[0, 4]),
        slice_pb2.PartitionProfile(profile_id=19, name="1g.10gb", compute_slices=1, memory_slices=1, memory_bytes=9856 * MIB,
                                   placements=[0, 1, 2, 3, 4, 5, 6]),
    ]
    assert (device.partition_memory_slices, device.partition_compute_slices) == (8, 7)


def test_a_device_that_cannot_partition_lists_no_profiles() -> None:
    info = DeviceModeInfo(gpu_ref(0), "tdm", mig_capable=False, memory_mib=81920, profiles=PROFILES, memory_slices=8,
                          compute_slices=7)
    device = device_message(gpu_ref(0), make_gpu(0), info, None)
    assert (list(device.partition_profiles), device.partition_memory_slices, device.partition_compute_slices) == ([], 0, 0)
