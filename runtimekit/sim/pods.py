"""The Kubernetes side of a simulated node: pods, their containers and the devices they hold.

These plain records are what the fake kubelet pod-resources server, the fake CRI server and the
fixture /proc tree are all generated from, so the three always agree, as they do on a real node.
"""

from __future__ import annotations

import hashlib
import uuid as uuid_module
from dataclasses import dataclass, field

GPU_RESOURCE = "nvidia.com/gpu"


@dataclass(frozen=True, slots=True)
class SimDevice:
    """One device allocated to a container, as the kubelet's pod-resources API lists it."""

    resource_name: str  # "nvidia.com/gpu", "nvidia.com/mig-1g.10gb", ...
    device_id: str  # a GPU UUID ("GPU-…") or MIG device UUID ("MIG-…")


@dataclass(frozen=True, slots=True)
class SimContainer:
    """A container of a pod. ``container_id`` is the runtime's 64-hex id."""

    name: str
    container_id: str
    devices: tuple[SimDevice, ...] = ()
    image: str = "registry.example/train:latest"
    idle: bool = False  # holds its devices but starts no GPU process on them


@dataclass(frozen=True, slots=True)
class SimPod:
    """A pod on the node. ``phase`` is "Running" or, once its containers have exited for good,
    "Succeeded" or "Failed": the kubelet has then stopped its sandbox, and its exited containers
    stay listed by the runtime until the pod is deleted."""

    name: str
    namespace: str
    uid: str  # the pod UID (a UUID with dashes)
    containers: tuple[SimContainer, ...] = field(default_factory=tuple)
    qos_class: str = "burstable"  # "guaranteed", "burstable" or "besteffort" (cgroup path component)
    phase: str = "Running"

    @property
    def finished(self) -> bool:
        """Its containers have exited for good (phase Succeeded or Failed)."""
        return self.phase in FINISHED_PHASES

    def container(self, name: str) -> SimContainer | None:
        return next((c for c in self.containers if c.name == name), None)


@dataclass(frozen=True, slots=True)
class KubernetesSpec:
    """How the simulated node runs containers, and the pods it starts with."""

    runtime: str = "containerd"  # "containerd", "cri-o" or "docker"
    cgroup_driver: str = "systemd"  # "systemd" or "cgroupfs"
    cgroup_version: int = 2
    pods: tuple[SimPod, ...] = ()


RUNTIMES = ("containerd", "cri-o", "docker")
CGROUP_DRIVERS = ("systemd", "cgroupfs")
QOS_CLASSES = ("guaranteed", "burstable", "besteffort")
FINISHED_PHASES = ("Succeeded", "Failed")  # the terminal pod phases (core/v1 PodPhase)


def container_id_for(namespace: str, pod: str, container: str, salt: str = "") -> str:
    """A stable 64-hex container id for a simulated container (runtimes use 64 hex ids)."""
    return hashlib.sha256(f"{salt}/{namespace}/{pod}/{container}".encode()).hexdigest()


def pod_uid_for(namespace: str, pod: str, salt: str = "") -> str:
    """A stable pod UID (a UUID, as the API server assigns) for a simulated pod."""
    return str(uuid_module.uuid5(uuid_module.NAMESPACE_URL, f"runtimekit-sim:{salt}/{namespace}/{pod}"))
