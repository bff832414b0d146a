"""The Kubernetes side of a simulated node: pods, their containers and the devices they hold.

These plain records are what the fake kubelet pod-resources server, the fake CRI server and the
fixture /proc tree are all generated from, so the three always agree, as they do on a real node.
"""

from __future__ import annotations

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


@dataclass(frozen=True, slots=True)
class SimPod:
    name: str
    namespace: str
    uid: str  # the pod UID (a UUID with dashes)
    containers: tuple[SimContainer, ...] = field(default_factory=tuple)
    qos_class: str = "burstable"  # "guaranteed", "burstable" or "besteffort" (cgroup path component)

    def container(self, name: str) -> SimContainer | None:
        return next((c for c in self.containers if c.name == name), None)
