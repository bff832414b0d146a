"""Which pod and container hold which device: the kubelet pod-resources API (v1), over its socket.

    async with PodResourcesClient("/var/lib/kubelet/pod-resources/kubelet.sock") as kubelet:
        rows = await kubelet.list()        # [PodDevices(pod_name="train-0", ..., device_ids=("GPU-…",))]
        ids = await kubelet.allocatable()  # ["GPU-…", "MIG-…", ...]

The kubelet serves ``v1.PodResourcesLister`` on ``<kubelet root>/pod-resources/kubelet.sock``
(KEP-606 / KEP-2043; proto in proto/podresources/v1/api.proto). It lists devices that device
plugins allocated (``nvidia.com/gpu``, ``nvidia.com/mig-1g.10gb``, ...) per container; devices
allocated through DRA (``dynamic_resources``) are not reported here. It names pods by namespace
and name only: the pod UID comes from the CRI (``cri.CriClient``) or the cgroup path.

Mount the ``pod-resources`` directory, not the socket file, into a container running this: the
kubelet re-creates the socket when it restarts, and a bind-mounted file would keep the old inode.
"""

from __future__ import annotations

import builtins
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Protocol

import grpc.aio

from runtimekit._proto.podresources.v1 import api_pb2 as pb
from runtimekit._proto.podresources.v1 import api_pb2_grpc as pb_grpc

from .errors import SourceError, SourceUnavailable, UnixRpcClient

__all__ = [
    "DEFAULT_SOCKET",
    "PodDevices",
    "PodResourcesClient",
    "SourceError",
    "SourceUnavailable",
]

DEFAULT_SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"


@dataclass(frozen=True, slots=True)
class PodDevices:
    """The devices of one resource allocated to one container (one row per container×resource).

    ``device_ids`` are what the device plugin advertised: GPU UUIDs ("GPU-…"), MIG device UUIDs
    ("MIG-…"), or plugin-specific ids for shared GPUs (time-slicing replicas "GPU-…::2").
    ``numa_nodes`` are the NUMA nodes the kubelet reports for them (empty when unknown).
    """

    pod_name: str
    namespace: str
    container_name: str
    resource_name: str
    device_ids: tuple[str, ...]
    numa_nodes: tuple[int, ...] = ()


class _PodResourcesListerStub(Protocol):
    """The calls this client makes on the generated ``PodResourcesListerStub`` (which is untyped:
    its methods are ``grpc.aio`` unary-unary callables set in ``__init__``)."""

    def List(
        self, request: pb.ListPodResourcesRequest, *, timeout: float
    ) -> Awaitable[pb.ListPodResourcesResponse]: ...

    def Get(self, request: pb.GetPodResourcesRequest, *, timeout: float) -> Awaitable[pb.GetPodResourcesResponse]: ...

    def GetAllocatableResources(
        self, request: pb.AllocatableResourcesRequest, *, timeout: float
    ) -> Awaitable[pb.AllocatableResourcesResponse]: ...


class PodResourcesClient(UnixRpcClient[_PodResourcesListerStub]):
    """Async client of the kubelet pod-resources API on a unix socket.

    Every call has a deadline of ``timeout`` seconds. Failures raise ``SourceUnavailable`` (no
    socket, refused, deadline) or ``SourceError`` (the kubelet answered with an error, e.g.
    UNIMPLEMENTED from a kubelet too old for ``GetAllocatableResources``). The channel is opened on
    the first call and re-opened after the kubelet restarts.
    """

    source = "kubelet pod-resources"

    def __init__(self, socket_path: str = DEFAULT_SOCKET, timeout: float = 5.0) -> None:
        super().__init__(socket_path, timeout)
        # The last List answer and its rows: asked every sampling cycle, the kubelet mostly answers
        # the same, and comparing two messages (in C) is cheaper than turning one into rows.
        self._last_list: tuple[pb.ListPodResourcesResponse, list[PodDevices]] | None = None

    def _make_stub(self, channel: grpc.aio.Channel) -> _PodResourcesListerStub:
        return pb_grpc.PodResourcesListerStub(channel)

    async def list(self) -> list[PodDevices]:
        """Devices of every container of every pod on the node (``List``).

        Containers without devices produce no row; a resource listed twice for one container is
        merged into one row.
        """
        response = await self._call(
            "List", lambda stub, timeout: stub.List(pb.ListPodResourcesRequest(), timeout=timeout)
        )
        if self._last_list is not None and self._last_list[0] == response:
            return list(self._last_list[1])
        rows: list[PodDevices] = []
        for pod in response.pod_resources:
            rows.extend(_pod_rows(pod))
        self._last_list = (response, rows)
        return list(rows)

    # ``builtins.list``: in this class body ``list`` is the method above.
    async def get(self, namespace: str, pod_name: str) -> builtins.list[PodDevices] | None:
        """Devices of one pod's containers (``Get``), or None when the kubelet does not know the pod.

        Needs a kubelet with ``Get`` (1.27+, feature gate KubeletPodResourcesGet, beta in 1.34).
        """
        request = pb.GetPodResourcesRequest(pod_name=pod_name, pod_namespace=namespace)
        try:
            response = await self._call("Get", lambda stub, timeout: stub.Get(request, timeout=timeout))
        except SourceError as exc:
            # A real kubelet answers an unknown pod with a plain Go error, so status UNKNOWN and
            # "pod <name> in namespace <ns> not found"; NOT_FOUND is accepted as well.
            if exc.code == "NOT_FOUND" or (exc.code == "UNKNOWN" and exc.reason.endswith(" not found")):
                return None
            raise
        return _pod_rows(response.pod_resources)

    async def allocatable(self, resource_name: str | None = None) -> builtins.list[str]:
        """Ids of every device the kubelet can allocate (``GetAllocatableResources``), in its order.

        With ``resource_name`` ("nvidia.com/gpu"), only that resource's devices.
        """
        response = await self._call(
            "GetAllocatableResources",
            lambda stub, timeout: stub.GetAllocatableResources(
                pb.AllocatableResourcesRequest(), timeout=timeout
            ),
        )
        ids: list[str] = []
        for devices in response.devices:
            if resource_name is None or devices.resource_name == resource_name:
                ids.extend(devices.device_ids)
        return ids


def _pod_rows(pod: pb.PodResources) -> list[PodDevices]:
    rows: list[PodDevices] = []
    for container in pod.containers:
        merged: dict[str, tuple[list[str], list[int]]] = {}
        for devices in container.devices:
            ids, numa = merged.setdefault(devices.resource_name, ([], []))
            ids.extend(i for i in devices.device_ids if i not in ids)
            numa.extend(n.ID for n in devices.topology.nodes if n.ID not in numa)
        for resource_name, (ids, numa) in merged.items():
            if not ids:
                continue
            rows.append(
                PodDevices(
                    pod_name=pod.name,
                    namespace=pod.namespace,
                    container_name=container.name,
                    resource_name=resource_name,
                    device_ids=tuple(ids),
                    numa_nodes=tuple(sorted(numa)),
                )
            )
    return rows
