"""A fake node agent: a runtimekit.v1 server on a real unix socket, with a node the tests change.

It answers GetNode (``node`` with the current ``health``), WatchHealth (the health now, then after
every ``set_health``) and AllocateDevices (recorded in ``allocations``; the choice is the
candidates in reverse order, so a test can tell the agent's choice from the plugin's fallback,
which takes them in order; each device paired with ``mlx5_<index>`` when NICs are asked for).
``fail_allocate`` makes AllocateDevices answer that status; ``bad_allocate`` makes it answer one
device too many; ``nic_nodes`` names each paired NIC's device nodes (its ``{n}`` the NIC's number).
GetNode counts its calls in ``node_reads``; ListSlices answers ``slices``; GetTopology answers
``topology`` (``make_topology``), counting the calls in ``topology_reads``, or UNAVAILABLE (as
before the agent's first discovery) while it is None.

Cards: GPU 0-3 whole; GPU 4 in MIG mode with two 3g.40gb devices and one 1g.10gb device. NUMA
nodes (``NUMA``): GPU 0 and 1 on node 0, GPU 2 and the MIG card on node 1, GPU 3 unknown.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import grpc
import grpc.aio
from google.protobuf.timestamp_pb2 import Timestamp

from runtimekit._proto.runtimekit.v1 import node_pb2, service_pb2, service_pb2_grpc, slice_pb2
from runtimekit.grpc_unix import UnixGrpcServer

WHOLE = 4


def gpu_uuid(index: int) -> str:
    return f"GPU-{index:08d}-aaaa-bbbb-cccc-dddddddddddd"


def mig_uuid(index: int, gpu_instance: int) -> str:
    return f"MIG-{index:04d}{gpu_instance:04d}-aaaa-bbbb-cccc-dddddddddddd"


MIG_CARD = WHOLE  # the index of the card in MIG mode
MIG_DEVICES = ((1, "3g.40gb"), (2, "3g.40gb"), (7, "1g.10gb"))  # (GPU-instance id, profile)
NUMA: dict[int, int | None] = {0: 0, 1: 0, 2: 1, 3: None, MIG_CARD: 1}  # by card index; None: unknown


def make_topology() -> node_pb2.Topology:
    """Every card's place: its NUMA node from ``NUMA`` (absent when None)."""
    topology = node_pb2.Topology()
    for index, numa in NUMA.items():
        ref = slice_pb2.DeviceRef(kind="gpu", vendor="nvidia", uuid=gpu_uuid(index), index=index)
        place = topology.devices.add(ref=ref)
        if numa is not None:
            place.numa_node = numa
    return topology


def mig_slice(slice_id: str, gpu_instance: int) -> slice_pb2.Slice:
    """A ready "mig" slice made of the MIG card's partition ``gpu_instance``."""
    ref = slice_pb2.DeviceRef(kind="gpu", vendor="nvidia", uuid=gpu_uuid(MIG_CARD), index=MIG_CARD)
    return slice_pb2.Slice(id=slice_id, mode="mig", state=slice_pb2.SLICE_STATE_READY, device=ref,
                           partition=slice_pb2.Partition(gpu_instance_id=gpu_instance,
                                                         uuid=mig_uuid(MIG_CARD, gpu_instance)))


def make_node() -> node_pb2.Node:
    node = node_pb2.Node()
    for index in range(WHOLE + 1):
        ref = slice_pb2.DeviceRef(kind="gpu", vendor="nvidia", uuid=gpu_uuid(index), index=index)
        device = node.devices.add(ref=ref, model="NVIDIA H100 80GB HBM3", mode="mig" if index == MIG_CARD else "tdm")
        if index == MIG_CARD:
            for gpu_instance, profile in MIG_DEVICES:
                device.partitions.add(gpu_instance_id=gpu_instance, compute_instance_id=0,
                                      uuid=mig_uuid(index, gpu_instance), profile=profile)
    return node


def make_health(unhealthy: tuple[int, ...] = (), evaluated_at: int = 1) -> node_pb2.NodeHealth:
    """A verdict at ``evaluated_at`` (seconds): the cards of ``unhealthy`` UNHEALTHY with an XID 79."""
    health = node_pb2.NodeHealth(state=node_pb2.HEALTH_STATE_HEALTHY, evaluated_at=Timestamp(seconds=evaluated_at))
    for index in range(WHOLE + 1):
        entry = health.devices.add(ref=slice_pb2.DeviceRef(kind="gpu", vendor="nvidia", uuid=gpu_uuid(index), index=index))
        if index in unhealthy:
            entry.health.state = node_pb2.HEALTH_STATE_UNHEALTHY
            entry.health.faults.add(fault="xid_79", severity="critical", action="drain_and_reset_gpu")
        else:
            entry.health.state, entry.health.schedulable = node_pb2.HEALTH_STATE_HEALTHY, True
    return health


class FakeAgent(UnixGrpcServer, service_pb2_grpc.AgentServiceServicer):
    def __init__(self, socket_path: str) -> None:
        UnixGrpcServer.__init__(self, socket_path)
        self.node = make_node()
        self.health = make_health()
        self.allocations: list[service_pb2.AllocateDevicesRequest] = []
        self.fail_allocate: grpc.StatusCode | None = None
        self.bad_allocate = False
        self.nic_nodes: tuple[str, ...] = ("/dev/infiniband/uverbs{n}",)
        self.slices: list[slice_pb2.Slice] = []
        self.topology: node_pb2.Topology | None = make_topology()
        self.topology_reads = 0
        self.node_reads = 0
        self._changed = asyncio.Condition()
        self._version = 0

    def _add_servicers(self, server: grpc.aio.Server) -> None:
        service_pb2_grpc.add_AgentServiceServicer_to_server(self, server)

    async def set_health(self, health: node_pb2.NodeHealth) -> None:
        async with self._changed:
            self.health = health
            self._version += 1
            self._changed.notify_all()

    async def GetNode(self, request: service_pb2.GetNodeRequest, context: grpc.aio.ServicerContext
                      ) -> service_pb2.GetNodeResponse:
        self.node_reads += 1
        node = node_pb2.Node()
        node.CopyFrom(self.node)
        node.health.CopyFrom(self.health)
        return service_pb2.GetNodeResponse(node=node)

    async def ListSlices(self, request: service_pb2.ListSlicesRequest, context: grpc.aio.ServicerContext
                         ) -> service_pb2.ListSlicesResponse:
        return service_pb2.ListSlicesResponse(slices=self.slices)

    async def GetTopology(self, request: service_pb2.GetTopologyRequest, context: grpc.aio.ServicerContext
                          ) -> service_pb2.GetTopologyResponse:
        self.topology_reads += 1
        if self.topology is None:
            await context.abort(grpc.StatusCode.UNAVAILABLE, "no topology yet")
        return service_pb2.GetTopologyResponse(topology=self.topology)

    async def WatchHealth(self, request: service_pb2.WatchHealthRequest, context: grpc.aio.ServicerContext
                          ) -> AsyncIterator[service_pb2.WatchHealthResponse]:
        seen = -1
        while True:
            async with self._changed:
                await self._changed.wait_for(lambda last=seen: self._version != last)
                seen, health = self._version, self.health
            yield service_pb2.WatchHealthResponse(health=health)

    async def AllocateDevices(self, request: service_pb2.AllocateDevicesRequest, context: grpc.aio.ServicerContext
                              ) -> service_pb2.AllocateDevicesResponse:
        self.allocations.append(request)
        if self.fail_allocate is not None:
            await context.abort(self.fail_allocate, "the fake agent refuses")
        required = list(request.required_device_uuids)
        others = [uuid for uuid in reversed(request.candidate_device_uuids) if uuid not in required]
        count = request.count + (1 if self.bad_allocate else 0)
        response = service_pb2.AllocateDevicesResponse()
        for uuid in sorted((required + others)[:count]):
            index = int(uuid[4:12])
            chosen = response.devices.add(device=slice_pb2.DeviceRef(kind="gpu", vendor="nvidia", uuid=uuid, index=index))
            if request.with_nics:
                chosen.nic.CopyFrom(node_pb2.Nic(name=f"mlx5_{index}",
                                                  device_nodes=[node.format(n=index) for node in self.nic_nodes]))
        return response
