"""The plugin's only way to the node agent: runtimekit.v1 over the agent's unix socket.

Unary calls (GetNode, ListSlices, GetTopology, AllocateDevices) go through ``runtimekit.grpc_unix.UnixRpcClient``: a
deadline on every call (``agent_timeout_seconds``) and one error mapping, ``AgentUnavailable``
when nothing answered (no socket, UNAVAILABLE, the deadline) and ``AgentError`` when the agent
answered with another status. The health stream (WatchHealth) has a channel of its own that
lives as long as the stream. docs/api.md describes the calls.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Sequence
from dataclasses import dataclass
from typing import Protocol

import grpc
import grpc.aio

from runtimekit._proto.runtimekit.v1 import node_pb2, service_pb2, service_pb2_grpc, slice_pb2
from runtimekit.grpc_unix import UnixRpcClient, UnixRpcError, UnixRpcUnavailable, unix_channel


class AgentError(UnixRpcError):
    """The agent answered with an error status (``code`` names it)."""


class AgentUnavailable(UnixRpcUnavailable):
    """Nothing answered on the agent's socket (missing, refused, or no answer before the deadline)."""


@dataclass(frozen=True, slots=True)
class Nic:
    """An RDMA NIC the agent paired with a chosen GPU."""

    name: str  # the RDMA device's name ("mlx5_0")
    device_nodes: tuple[str, ...]  # its character devices ("/dev/infiniband/uverbs0")


@dataclass(frozen=True, slots=True)
class Choice:
    """The agent's answer to AllocateDevices: the chosen devices' UUIDs and their NICs."""

    devices: tuple[str, ...]
    nics: tuple[Nic, ...]


class _AgentStub(Protocol):
    """The calls made on the generated (untyped) ``AgentServiceStub``."""

    def GetNode(self, request: service_pb2.GetNodeRequest, *, timeout: float) -> Awaitable[service_pb2.GetNodeResponse]: ...

    def ListSlices(self, request: service_pb2.ListSlicesRequest, *, timeout: float
                   ) -> Awaitable[service_pb2.ListSlicesResponse]: ...

    def GetTopology(self, request: service_pb2.GetTopologyRequest, *, timeout: float
                    ) -> Awaitable[service_pb2.GetTopologyResponse]: ...

    def AllocateDevices(
        self, request: service_pb2.AllocateDevicesRequest, *, timeout: float
    ) -> Awaitable[service_pb2.AllocateDevicesResponse]: ...


class AgentClient(UnixRpcClient[_AgentStub]):
    """Async client of the node agent's runtimekit.v1 API on its unix socket."""

    source = "runtimekit agent"
    error_type = AgentError
    unavailable_type = AgentUnavailable

    def _make_stub(self, channel: grpc.aio.Channel) -> _AgentStub:
        return service_pb2_grpc.AgentServiceStub(channel)

    async def get_node(self) -> node_pb2.Node:
        """The node's devices, their modes, partitions and health (GetNode)."""
        response = await self._call(
            "GetNode", lambda stub, timeout: stub.GetNode(service_pb2.GetNodeRequest(), timeout=timeout)
        )
        node: node_pb2.Node = response.node
        return node

    async def list_slices(self) -> list[slice_pb2.Slice]:
        """Every slice of the node (ListSlices; UNAVAILABLE when the agent's slicer is disabled)."""
        response: service_pb2.ListSlicesResponse = await self._call(
            "ListSlices", lambda stub, timeout: stub.ListSlices(service_pb2.ListSlicesRequest(), timeout=timeout)
        )
        return list(response.slices)

    async def get_topology(self) -> node_pb2.Topology:
        """Where each device and NIC sits (GetTopology; UNAVAILABLE before the agent's first discovery)."""
        response: service_pb2.GetTopologyResponse = await self._call(
            "GetTopology", lambda stub, timeout: stub.GetTopology(service_pb2.GetTopologyRequest(), timeout=timeout)
        )
        topology: node_pb2.Topology = response.topology
        return topology

    async def allocate(self, count: int, candidates: Sequence[str], required: Sequence[str], with_nics: bool) -> Choice:
        """The agent's best ``count`` devices among ``candidates`` (UUIDs), ``required`` included,
        each with its nearest RDMA NIC when ``with_nics`` (AllocateDevices: the topology allocator)."""
        request = service_pb2.AllocateDevicesRequest(
            count=count, candidate_device_uuids=list(candidates), required_device_uuids=list(required),
            with_nics=with_nics,
        )
        response: service_pb2.AllocateDevicesResponse = await self._call(
            "AllocateDevices", lambda stub, timeout: stub.AllocateDevices(request, timeout=timeout)
        )
        return Choice(
            devices=tuple(chosen.device.uuid for chosen in response.devices),
            nics=tuple(Nic(chosen.nic.name, tuple(chosen.nic.device_nodes)) for chosen in response.devices
                       if chosen.HasField("nic")),
        )

    async def watch_health(self) -> AsyncIterator[node_pb2.NodeHealth]:
        """The node's health now, then after each new verdict (WatchHealth), until the stream
        breaks: then ``AgentUnavailable`` or ``AgentError``, as the unary calls raise."""
        self._check_socket()
        channel = unix_channel(self.socket_path)
        try:
            stream = service_pb2_grpc.AgentServiceStub(channel).WatchHealth(service_pb2.WatchHealthRequest())
            async for response in stream:
                yield response.health
            raise AgentUnavailable(self.source, self.socket_path, "WatchHealth ended (the agent stopped)")
        except grpc.aio.AioRpcError as exc:
            code = exc.code()
            reason = f"WatchHealth failed: {code.name}: {exc.details()}"
            if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED):
                raise AgentUnavailable(self.source, self.socket_path, reason, code.name) from None
            raise AgentError(self.source, self.socket_path, reason, code.name) from None
        finally:
            await channel.close()
