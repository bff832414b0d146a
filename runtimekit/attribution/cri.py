"""Which pod a container id belongs to, and which pods are live: the container runtime's CRI API
(runtime.v1), over its socket.

    async with CriClient("/run/containerd/containerd.sock") as runtime:
        for c in await runtime.list_containers():   # running containers only
            c.container_id, c.pod_namespace, c.pod_name, c.pod_uid, c.container_name
        for s in await runtime.list_pod_sandboxes():  # every pod sandbox, ready or not
            s.pod_uid, s.ready

/proc/<pid>/cgroup gives a process's container id; ``ListContainers`` maps the id to its pod. The
pod fields come from the labels the kubelet puts on every container it creates
(``io.kubernetes.pod.name``, ``io.kubernetes.pod.namespace``, ``io.kubernetes.pod.uid``,
``io.kubernetes.container.name``, k8s.io/kubelet pkg/types/labels.go); containers without them (not
created by the kubelet) are skipped.

``ListPodSandbox`` says whether a pod still runs: its sandbox is SANDBOX_READY from the kubelet's
RunPodSandbox until the kubelet stops it (StopPodSandbox) — when the pod has finished for good
(phase Succeeded or Failed) or is being deleted — and it stays listed, NOTREADY, with the pod's exited
containers until the pod is deleted. A crash-looping container does not stop its sandbox. The pod
comes from the sandbox's metadata (name, namespace, UID: the kubelet's PodSandboxConfig); sandboxes
without a UID are skipped. Proto subset in proto/cri/runtime/v1/api.proto.

Sockets: containerd ``/run/containerd/containerd.sock``, CRI-O ``/var/run/crio/crio.sock``.
"""

from __future__ import annotations

from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Protocol

import grpc.aio

from runtimekit._proto.cri.runtime.v1 import api_pb2 as pb
from runtimekit._proto.cri.runtime.v1 import api_pb2_grpc as pb_grpc

from .errors import SourceError, SourceUnavailable, UnixRpcClient

__all__ = [
    "CONTAINER_NAME_LABEL",
    "ContainerInfo",
    "CriClient",
    "DEFAULT_SOCKET",
    "POD_NAMESPACE_LABEL",
    "POD_NAME_LABEL",
    "POD_UID_LABEL",
    "RuntimeVersion",
    "SandboxInfo",
    "SourceError",
    "SourceUnavailable",
]

DEFAULT_SOCKET = "/run/containerd/containerd.sock"

# The kubelet's labels on CRI containers (k8s.io/kubelet/pkg/types/labels.go).
POD_NAME_LABEL = "io.kubernetes.pod.name"
POD_NAMESPACE_LABEL = "io.kubernetes.pod.namespace"
POD_UID_LABEL = "io.kubernetes.pod.uid"
CONTAINER_NAME_LABEL = "io.kubernetes.container.name"

# runtime.v1.ContainerState -> our state names.
_STATES = {
    pb.CONTAINER_CREATED: "created",
    pb.CONTAINER_RUNNING: "running",
    pb.CONTAINER_EXITED: "exited",
    pb.CONTAINER_UNKNOWN: "unknown",
}


@dataclass(frozen=True, slots=True)
class ContainerInfo:
    """One kubelet-managed container as the runtime lists it.

    ``container_id`` is the runtime's full id (64 hex for containerd and CRI-O), the one found in
    cgroup paths; ``state`` is "created", "running", "exited" or "unknown".
    """

    container_id: str
    container_name: str
    pod_name: str
    pod_namespace: str
    pod_uid: str
    state: str


@dataclass(frozen=True, slots=True)
class SandboxInfo:
    """One pod sandbox as the runtime lists it: the pod it was made for and whether it is ready
    (SANDBOX_READY: the pod runs, or restarts its containers; SANDBOX_NOTREADY: stopped)."""

    sandbox_id: str
    pod_name: str
    pod_namespace: str
    pod_uid: str
    ready: bool


@dataclass(frozen=True, slots=True)
class RuntimeVersion:
    """What the runtime says it is (``Version``): e.g. ("containerd", "v2.0.0", "v1")."""

    runtime_name: str
    runtime_version: str
    runtime_api_version: str


class _RuntimeServiceStub(Protocol):
    """The calls this client makes on the generated ``RuntimeServiceStub`` (which is untyped: its
    methods are ``grpc.aio`` unary-unary callables set in ``__init__``)."""

    def ListContainers(
        self, request: pb.ListContainersRequest, *, timeout: float
    ) -> Awaitable[pb.ListContainersResponse]: ...

    def ListPodSandbox(
        self, request: pb.ListPodSandboxRequest, *, timeout: float
    ) -> Awaitable[pb.ListPodSandboxResponse]: ...

    def Version(self, request: pb.VersionRequest, *, timeout: float) -> Awaitable[pb.VersionResponse]: ...


class CriClient(UnixRpcClient[_RuntimeServiceStub]):
    """Async client of a container runtime's CRI ``RuntimeService`` on a unix socket.

    Every call has a deadline of ``timeout`` seconds. Failures raise ``SourceUnavailable`` (no
    socket, refused, deadline) or ``SourceError`` (the runtime answered with an error).
    """

    source = "CRI runtime"

    def __init__(self, socket_path: str = DEFAULT_SOCKET, timeout: float = 5.0) -> None:
        super().__init__(socket_path, timeout)

    def _make_stub(self, channel: grpc.aio.Channel) -> _RuntimeServiceStub:
        return pb_grpc.RuntimeServiceStub(channel)

    async def list_containers(self, *, running_only: bool = True) -> list[ContainerInfo]:
        """Kubelet-managed containers (``ListContainers``), only running ones unless told otherwise.

        The running filter is sent to the runtime and applied again here.
        """
        request = pb.ListContainersRequest()
        if running_only:
            request.filter.state.state = pb.CONTAINER_RUNNING
        response = await self._call(
            "ListContainers", lambda stub, timeout: stub.ListContainers(request, timeout=timeout)
        )
        out: list[ContainerInfo] = []
        for container in response.containers:
            if running_only and container.state != pb.CONTAINER_RUNNING:
                continue
            info = _container_info(container)
            if info is not None:
                out.append(info)
        return out

    async def list_pod_sandboxes(self) -> list[SandboxInfo]:
        """Every pod sandbox (``ListPodSandbox``, no filter), ready or not."""
        request = pb.ListPodSandboxRequest()
        response = await self._call(
            "ListPodSandbox", lambda stub, timeout: stub.ListPodSandbox(request, timeout=timeout)
        )
        return [
            SandboxInfo(
                sandbox_id=sandbox.id,
                pod_name=sandbox.metadata.name,
                pod_namespace=sandbox.metadata.namespace,
                pod_uid=sandbox.metadata.uid,
                ready=sandbox.state == pb.SANDBOX_READY,
            )
            for sandbox in response.items
            if sandbox.metadata.uid
        ]

    async def version(self) -> RuntimeVersion:
        """The runtime's name and versions (``Version``); a cheap liveness probe."""
        response = await self._call(
            "Version",
            lambda stub, timeout: stub.Version(pb.VersionRequest(version="v1"), timeout=timeout),
        )
        return RuntimeVersion(
            runtime_name=response.runtime_name,
            runtime_version=response.runtime_version,
            runtime_api_version=response.runtime_api_version,
        )


def _container_info(container: pb.Container) -> ContainerInfo | None:
    labels = container.labels
    pod_uid = labels.get(POD_UID_LABEL, "")
    pod_name = labels.get(POD_NAME_LABEL, "")
    if not pod_uid or not pod_name:
        return None  # not created by the kubelet: nothing to attribute it to
    return ContainerInfo(
        container_id=container.id,
        container_name=labels.get(CONTAINER_NAME_LABEL) or container.metadata.name,
        pod_name=pod_name,
        pod_namespace=labels.get(POD_NAMESPACE_LABEL, ""),
        pod_uid=pod_uid,
        state=_STATES.get(container.state, "unknown"),
    )
