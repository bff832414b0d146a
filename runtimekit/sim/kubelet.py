"""The simulated node's kubelet: a real ``v1.PodResourcesLister`` gRPC server on a unix socket.

    server = FakePodResourcesServer(lambda: pods, "/tmp/sim/pod-resources/kubelet.sock",
                                    allocatable=lambda: gpu_uuids)
    await server.start()     # removes a stale socket file first, so a restart works
    ...
    await server.stop()

It answers from the current pods on every call (``pods()`` is called per request), with the
kubelet's shapes: every pod and every container is listed, containers without devices included;
devices are one ``ContainerDevices`` per resource; ``GetAllocatableResources`` lists one
``ContainerDevices`` per device, as the kubelet's device manager does; ``Get`` of a pod the
kubelet does not know fails. It is a stand-in for the kubelet, not a copy of our client: the
agent's ``attribution.podresources`` speaks to it exactly as to a real kubelet.

``FakeUnixGrpcServer`` is the lifecycle both fake servers share (``sim.cri`` uses it too),
built on ``runtimekit.grpc_unix.UnixGrpcServer``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

import grpc
import grpc.aio

from runtimekit._proto.podresources.v1 import api_pb2 as pb
from runtimekit._proto.podresources.v1 import api_pb2_grpc as pb_grpc
from runtimekit.grpc_unix import UnixGrpcServer

from .pods import GPU_RESOURCE, SimContainer, SimDevice, SimPod

__all__ = ["FakePodResourcesServer", "FakeUnixGrpcServer", "pod_resources_of"]


class FakeUnixGrpcServer(UnixGrpcServer):
    """The lifecycle both fake servers share: ``grpc_unix.UnixGrpcServer`` (start, stop, start
    again; stale socket removal) plus ``delay_s``, which makes every answer late (a slow or hung
    source, for deadline tests and fault injection)."""

    def __init__(self, socket_path: str) -> None:
        super().__init__(socket_path)
        self.delay_s = 0.0

    async def _answer_delay(self) -> None:
        if self.delay_s > 0:
            await asyncio.sleep(self.delay_s)


def _container_resources(container: SimContainer) -> pb.ContainerResources:
    by_resource: dict[str, list[str]] = {}
    for device in container.devices:
        by_resource.setdefault(device.resource_name, []).append(device.device_id)
    return pb.ContainerResources(
        name=container.name,
        devices=[
            pb.ContainerDevices(resource_name=name, device_ids=ids) for name, ids in by_resource.items()
        ],
    )


def pod_resources_of(pod: SimPod) -> pb.PodResources:
    """The kubelet's ``PodResources`` message for a simulated pod."""
    return pb.PodResources(
        name=pod.name,
        namespace=pod.namespace,
        containers=[_container_resources(c) for c in pod.containers],
    )


class FakePodResourcesServer(FakeUnixGrpcServer):
    """The kubelet pod-resources API (v1) over a unix socket, answering from ``pods()``.

    ``allocatable()`` gives the devices the kubelet could allocate: device ids (of
    ``resource_name``) or ``SimDevice``s (their own resource names).
    """

    def __init__(
        self,
        pods: Callable[[], Sequence[SimPod]],
        socket_path: str,
        allocatable: Callable[[], Sequence[str | SimDevice]] = lambda: (),
        *,
        resource_name: str = GPU_RESOURCE,
    ) -> None:
        super().__init__(socket_path)
        self.pods = pods
        self.allocatable = allocatable
        self.resource_name = resource_name
        self.calls: dict[str, int] = {"List": 0, "GetAllocatableResources": 0, "Get": 0}

    def _add_servicers(self, server: grpc.aio.Server) -> None:
        pb_grpc.add_PodResourcesListerServicer_to_server(_PodResourcesServicer(self), server)


class _PodResourcesServicer(pb_grpc.PodResourcesListerServicer):
    """Translates only: requests in, messages built from the fake's pods out."""

    def __init__(self, fake: FakePodResourcesServer) -> None:
        self._fake = fake

    async def List(self, request, context):
        self._fake.calls["List"] += 1
        await self._fake._answer_delay()
        return pb.ListPodResourcesResponse(
            pod_resources=[pod_resources_of(p) for p in self._fake.pods()]
        )

    async def GetAllocatableResources(self, request, context):
        self._fake.calls["GetAllocatableResources"] += 1
        await self._fake._answer_delay()
        devices = []
        for item in self._fake.allocatable():
            if isinstance(item, SimDevice):
                resource, device_id = item.resource_name, item.device_id
            else:
                resource, device_id = self._fake.resource_name, item
            # The kubelet lists one ContainerDevices per device (per NUMA node of the device).
            devices.append(pb.ContainerDevices(resource_name=resource, device_ids=[device_id]))
        return pb.AllocatableResourcesResponse(devices=devices)

    async def Get(self, request, context):
        self._fake.calls["Get"] += 1
        await self._fake._answer_delay()
        for pod in self._fake.pods():
            if pod.name == request.pod_name and pod.namespace == request.pod_namespace:
                return pb.GetPodResourcesResponse(pod_resources=pod_resources_of(pod))
        # The kubelet's own message; it sends it with status UNKNOWN (a plain Go error), the fake
        # with NOT_FOUND. Clients must accept both.
        await context.abort(
            grpc.StatusCode.NOT_FOUND,
            f"pod {request.pod_name} in namespace {request.pod_namespace} not found",
        )
