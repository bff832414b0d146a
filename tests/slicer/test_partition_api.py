"""runtimekit.v1 over a real unix socket with the real Slicer on a simulated dgx-a100 (GPUs 0 and 1
in MIG mode): GetNode lists each device's partition profiles with every placement, its memory and
compute slices in all, and its architecture; CreateSlice takes a profile and a placement, and its
refusals arrive as the status codes the API documents, naming the field."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import pytest

from runtimekit import config as config_module
from runtimekit._proto.runtimekit.v1 import service_pb2, service_pb2_grpc
from runtimekit.api import ApiServer
from runtimekit.api.servicer import FIELD_METADATA_KEY
from runtimekit.topology.allocator import allocate

GiB = 1 << 30


@pytest.fixture
async def stub(rig) -> AsyncIterator[tuple[Any, Any]]:
    """(AgentService stub, simulated node) over the started slicer; the socket in a short folder
    (a unix socket's path must fit in 108 bytes)."""
    slicer, state, node = rig
    directory = Path(tempfile.mkdtemp(prefix="rk-part-"))
    server = ApiServer(state, slicer, config_module.load(None, {"state_dir": str(directory)}), allocate)
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"unix:{server.socket_path}") as channel:
            yield service_pb2_grpc.AgentServiceStub(channel), node
    finally:
        await server.stop()
        shutil.rmtree(directory, ignore_errors=True)


async def test_get_node_lists_profiles_with_placements_and_slices_in_all(stub) -> None:
    agent, _ = stub
    devices = (await agent.GetNode(service_pb2.GetNodeRequest())).node.devices
    mig = devices[0]
    assert (mig.mode, mig.partition_capable, mig.architecture) == ("mig", True, "ampere")
    assert (mig.partition_memory_slices, mig.partition_compute_slices) == (8, 7)
    profiles = [(p.profile_id, p.name, p.compute_slices, p.memory_slices, p.memory_bytes, list(p.placements))
                for p in mig.partition_profiles]
    assert profiles == [  # by profile id; every allowed start, free or not, ascending
        (0, "7g.80gb", 7, 8, 80384 << 20, [0]),
        (5, "4g.40gb", 4, 4, 40192 << 20, [0]),
        (9, "3g.40gb", 3, 4, 40192 << 20, [0, 4]),
        (14, "2g.20gb", 2, 2, 19968 << 20, [0, 2, 4]),
        (15, "1g.20gb", 1, 2, 19968 << 20, [0, 2, 4, 6]),
        (19, "1g.10gb", 1, 1, 9856 << 20, [0, 1, 2, 3, 4, 5, 6]),
        (20, "1g.10gb+me", 1, 1, 9856 << 20, [0, 1, 2, 3, 4, 5, 6]),
    ]
    whole = devices[2]  # a MIG-capable A100 in tdm mode that the agent has not seen in MIG mode
    assert (whole.mode, whole.partition_capable, whole.architecture) == ("tdm", True, "ampere")
    assert (list(whole.partition_profiles), whole.partition_memory_slices, whole.partition_compute_slices) == ([], 0, 0)


async def test_create_slice_with_a_profile_and_placement_and_its_partition(stub) -> None:
    agent, node = stub
    made = (await agent.CreateSlice(service_pb2.CreateSliceRequest(
        mode="mig", device="1", profile="1g.10gb", placement_start=6, owner_id="dra:claim:0"))).slice
    assert (made.profile, made.partition.profile_id, made.partition.placement_start, made.partition.placement_size) == (
        "1g.10gb", 19, 6, 1)
    assert (made.memory_bytes, made.compute_percent, made.requested_memory_bytes) == (9856 << 20, 14, 0)
    assert [(gi.profile.id, gi.start) for gi in node.gpu_instances(1)] == [(19, 6)]
    listed = (await agent.GetNode(service_pb2.GetNodeRequest())).node.devices[1]
    assert list(listed.slice_ids) == [made.id] and listed.capacity.compute_percent_free == 100 * 6 // 7


@pytest.mark.parametrize(("fields", "code", "field"), [
    ({"profile": "1g.5gb"}, grpc.StatusCode.INVALID_ARGUMENT, "profile"),
    ({"profile": "3g.40gb", "placement_start": 1}, grpc.StatusCode.INVALID_ARGUMENT, "placement_start"),
    ({"profile": "1g.10gb", "device": "any"}, grpc.StatusCode.INVALID_ARGUMENT, "profile"),
    ({"profile": "1g.10gb", "mode": "tdm"}, grpc.StatusCode.INVALID_ARGUMENT, "profile"),
    ({"profile": "", "placement_start": 0, "memory": "1GiB"}, grpc.StatusCode.INVALID_ARGUMENT, "placement_start"),
    ({"profile": "1g.10gb", "memory": "20GiB"}, grpc.StatusCode.INVALID_ARGUMENT, "memory"),
    ({"profile": "7g.80gb", "placement_start": 0}, grpc.StatusCode.FAILED_PRECONDITION, "placement_start"),  # 2g at 2 holds it
])
async def test_create_slice_refusals_are_the_documented_codes(stub, fields: dict[str, Any], code: grpc.StatusCode,
                                                              field: str) -> None:
    agent, node = stub
    await agent.CreateSlice(service_pb2.CreateSliceRequest(mode="mig", device="0", profile="2g.20gb", placement_start=2,
                                                           owner_id="first"))
    request = service_pb2.CreateSliceRequest(**{"mode": "mig", "device": "0", "owner_id": "me", **fields})
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await agent.CreateSlice(request)
    assert refused.value.code() == code and refused.value.details().startswith(f"{field}: ")
    assert dict(refused.value.trailing_metadata() or ())[FIELD_METADATA_KEY] == field
    assert len(node.gpu_instances(0)) == 1
