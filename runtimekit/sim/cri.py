"""The simulated node's container runtime: a real CRI ``runtime.v1.RuntimeService`` on a unix socket.

    server = FakeCriServer(lambda: pods, "/tmp/sim/containerd.sock")
    await server.start()
    ...
    await server.stop()

One ``PodSandbox`` per pod of the current pods (``pods()`` is called per request) and one
``Container`` per ``SimContainer``, carrying the labels and annotations the kubelet puts on what it
creates, so the agent's ``attribution.cri`` reads it as it reads containerd. A running pod's sandbox
is SANDBOX_READY and its containers CONTAINER_RUNNING; a finished pod's (``SimPod.phase`` Succeeded
or Failed) sandbox is SANDBOX_NOTREADY, stopped by the kubelet, and its containers CONTAINER_EXITED,
both still listed, as the kubelet keeps them until the pod is deleted; a deleted pod's are gone.
``ListContainers`` honours the whole ``ContainerFilter`` and ``ListPodSandbox`` the whole
``PodSandboxFilter`` as containerd does: ``id`` and ``pod_sandbox_id`` match a full id or an
unambiguous prefix of one, ``state`` the exact state, ``label_selector`` every key/value pair. Only
``Version``, ``ListPodSandbox`` and ``ListContainers`` are served (a subset of the API); other RPCs
are not part of the proto subset and answer UNIMPLEMENTED.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Iterable, Sequence
from typing import TypeVar

import grpc.aio

from runtimekit import __version__
from runtimekit._proto.cri.runtime.v1 import api_pb2 as pb
from runtimekit._proto.cri.runtime.v1 import api_pb2_grpc as pb_grpc

from .kubelet import FakeUnixGrpcServer
from .pods import SimContainer, SimPod

__all__ = [
    "FakeCriServer",
    "container_of",
    "filter_containers",
    "filter_sandboxes",
    "kubelet_labels",
    "sandbox_id",
    "sandbox_of",
]

RUNTIME_NAME = "runtimekit-sim"


def sandbox_id(pod: SimPod) -> str:
    """The pod sandbox's 64-hex id, stable per pod UID."""
    return hashlib.sha256(f"sandbox:{pod.uid}".encode()).hexdigest()


def kubelet_labels(pod: SimPod, container: SimContainer | None = None) -> dict[str, str]:
    """The labels the kubelet sets on a container, or on the pod's sandbox without ``container``
    (k8s.io/kubelet pkg/types/labels.go)."""
    labels = {
        "io.kubernetes.pod.name": pod.name,
        "io.kubernetes.pod.namespace": pod.namespace,
        "io.kubernetes.pod.uid": pod.uid,
    }
    if container is not None:
        labels["io.kubernetes.container.name"] = container.name
    return labels


def _image_digest(image: str) -> str:
    return "sha256:" + hashlib.sha256(image.encode()).hexdigest()


def sandbox_of(pod: SimPod, created_at_ns: int) -> pb.PodSandbox:
    """The CRI ``PodSandbox`` of a simulated pod (attempt 0): ready while the pod runs."""
    return pb.PodSandbox(
        id=sandbox_id(pod),
        metadata=pb.PodSandboxMetadata(name=pod.name, uid=pod.uid, namespace=pod.namespace, attempt=0),
        state=pb.SANDBOX_NOTREADY if pod.finished else pb.SANDBOX_READY,
        created_at=created_at_ns,
        labels=kubelet_labels(pod),
        annotations={"kubernetes.io/config.source": "api"},
    )


def container_of(pod: SimPod, container: SimContainer, created_at_ns: int) -> pb.Container:
    """The CRI ``Container`` of a simulated container (attempt 0): running, exited once its pod
    has finished."""
    digest = _image_digest(container.image)
    return pb.Container(
        id=container.container_id,
        pod_sandbox_id=sandbox_id(pod),
        metadata=pb.ContainerMetadata(name=container.name, attempt=0),
        image=pb.ImageSpec(image=digest, user_specified_image=container.image),
        image_ref=digest,
        image_id=digest,
        state=pb.CONTAINER_EXITED if pod.finished else pb.CONTAINER_RUNNING,
        created_at=created_at_ns,
        labels=kubelet_labels(pod, container),
        annotations={
            "io.kubernetes.container.restartCount": "0",
            "io.kubernetes.container.terminationMessagePath": "/dev/termination-log",
            "io.kubernetes.container.terminationMessagePolicy": "File",
            "io.kubernetes.pod.terminationGracePeriod": "30",
        },
    )


class FakeCriServer(FakeUnixGrpcServer):
    """CRI ``RuntimeService`` (Version, ListPodSandbox, ListContainers) over a unix socket,
    answering from ``pods()``.

    ``created_at_ns`` is every sandbox's and container's creation time (default: when the server
    was built).
    """

    def __init__(
        self,
        pods: Callable[[], Sequence[SimPod]],
        socket_path: str,
        *,
        created_at_ns: int | None = None,
    ) -> None:
        super().__init__(socket_path)
        self.pods = pods
        self.created_at_ns = time.time_ns() if created_at_ns is None else created_at_ns
        self.calls: dict[str, int] = {"Version": 0, "ListPodSandbox": 0, "ListContainers": 0}

    def sandboxes(self) -> list[pb.PodSandbox]:
        return [sandbox_of(pod, self.created_at_ns) for pod in self.pods()]

    def containers(self) -> list[pb.Container]:
        return [
            container_of(pod, c, self.created_at_ns) for pod in self.pods() for c in pod.containers
        ]

    def _add_servicers(self, server: grpc.aio.Server) -> None:
        pb_grpc.add_RuntimeServiceServicer_to_server(_RuntimeServicer(self), server)


def _resolve(wanted: str, ids: Iterable[str]) -> str | None:
    """containerd's truncindex: the full id ``wanted`` names, exactly or as a unique prefix."""
    ids = set(ids)
    if wanted in ids:
        return wanted
    matches = [i for i in ids if i.startswith(wanted)]
    return matches[0] if len(matches) == 1 else None


def filter_containers(containers: list[pb.Container], f: pb.ContainerFilter) -> list[pb.Container]:
    """Apply a CRI ``ContainerFilter`` (all fields ANDed), as containerd's ListContainers does."""
    out = _by_id(containers, f)
    if f.pod_sandbox_id:
        full = _resolve(f.pod_sandbox_id, (c.pod_sandbox_id for c in out))
        out = [c for c in out if c.pod_sandbox_id == full]
    return _by_state_and_labels(out, f)


def filter_sandboxes(sandboxes: list[pb.PodSandbox], f: pb.PodSandboxFilter) -> list[pb.PodSandbox]:
    """Apply a CRI ``PodSandboxFilter`` (all fields ANDed), as containerd's ListPodSandbox does."""
    return _by_state_and_labels(_by_id(sandboxes, f), f)


_Listed = TypeVar("_Listed", pb.Container, pb.PodSandbox)


def _by_id(items: list[_Listed], f: pb.ContainerFilter | pb.PodSandboxFilter) -> list[_Listed]:
    """The filter's ``id`` (a unique prefix, as the runtime resolves it), when set."""
    if not f.id:
        return items
    full = _resolve(f.id, (item.id for item in items))
    return [item for item in items if item.id == full]


def _by_state_and_labels(items: list[_Listed], f: pb.ContainerFilter | pb.PodSandboxFilter) -> list[_Listed]:
    """The filter's ``state`` and ``label_selector``, when set (both filters have them)."""
    out = items
    if f.HasField("state"):
        out = [item for item in out if item.state == f.state.state]
    if f.label_selector:
        out = [item for item in out if all(item.labels.get(k) == v for k, v in f.label_selector.items())]
    return out


class _RuntimeServicer(pb_grpc.RuntimeServiceServicer):
    """Translates only: requests in, messages built from the fake's pods out."""

    def __init__(self, fake: FakeCriServer) -> None:
        self._fake = fake

    async def Version(self, request, context):
        self._fake.calls["Version"] += 1
        await self._fake._answer_delay()
        return pb.VersionResponse(
            version="0.1.0",  # the kubelet runtime API version CRI servers report
            runtime_name=RUNTIME_NAME,
            runtime_version=__version__,
            runtime_api_version="v1",
        )

    async def ListPodSandbox(self, request, context):
        self._fake.calls["ListPodSandbox"] += 1
        await self._fake._answer_delay()
        sandboxes = self._fake.sandboxes()
        if request.HasField("filter"):
            sandboxes = filter_sandboxes(sandboxes, request.filter)
        return pb.ListPodSandboxResponse(items=sandboxes)

    async def ListContainers(self, request, context):
        self._fake.calls["ListContainers"] += 1
        await self._fake._answer_delay()
        containers = self._fake.containers()
        if request.HasField("filter"):
            containers = filter_containers(containers, request.filter)
        return pb.ListContainersResponse(containers=containers)
