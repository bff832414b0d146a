"""Hand-built runtimekit.v1 messages for the DRA publishing tests: GPUs in TDM and MIG mode, their
places, NVLink, RDMA NICs and slices, as GetNode, GetTopology and ListSlices answer them.

MIG profiles are an A100 40 GB's (NVIDIA MIG user guide, "Supported MIG Profiles"; NVML GPU
instance profile ids): 8 memory slices, 7 compute slices.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from runtimekit._proto.runtimekit.v1 import node_pb2, slice_pb2

GiB = 2**30
MiB = 2**20
DRIVER = "gpu.runtimekit.io"
NODE = "node-a"

# (profile id, name, compute slices, memory slices, memory bytes, placements)
A100_40GB_PROFILES = (
    (19, "1g.5gb", 1, 1, 4864 * MiB, (0, 1, 2, 3, 4, 5, 6)),
    (20, "1g.5gb+me", 1, 1, 4864 * MiB, (0, 1, 2, 3, 4, 5, 6)),
    (15, "1g.10gb", 1, 2, 9856 * MiB, (0, 2, 4, 6)),
    (14, "2g.10gb", 2, 2, 9856 * MiB, (0, 2, 4)),
    (9, "3g.20gb", 3, 4, 19968 * MiB, (0, 4)),
    (5, "4g.20gb", 4, 4, 19968 * MiB, (0,)),
    (0, "7g.40gb", 7, 8, 40192 * MiB, (0,)),
)
A100_PLACEMENTS = sum(len(profile[5]) for profile in A100_40GB_PROFILES)  # 25


def uuid_of(index: int) -> str:
    return f"GPU-{index:08x}-1111-2222-3333-444444444444"


def ref(index: int) -> slice_pb2.DeviceRef:
    return slice_pb2.DeviceRef(kind="gpu", vendor="nvidia", uuid=uuid_of(index), index=index,
                               pci_address=f"0000:{0x18 + 0x10 * index:02x}:00.0")


def tdm_gpu(index: int, usable: int = 79 * GiB, model: str = "NVIDIA H100 80GB HBM3") -> node_pb2.Device:
    capacity = node_pb2.Capacity(compute_percent_total=100, compute_percent_free=100, memory_bytes_total=80 * GiB,
                                 memory_bytes_usable=usable, memory_bytes_free=usable)
    return node_pb2.Device(ref=ref(index), model=model, memory_bytes=80 * GiB, mode="tdm", partition_capable=True,
                           capacity=capacity, architecture="hopper")


def mig_gpu(index: int, partitions: Iterable[slice_pb2.Partition] = ()) -> node_pb2.Device:
    device = node_pb2.Device(ref=ref(index), model="NVIDIA A100-SXM4-40GB", memory_bytes=40 * GiB, mode="mig",
                             partition_capable=True, architecture="ampere", partition_memory_slices=8,
                             partition_compute_slices=7, partitions=list(partitions))
    for profile_id, name, compute, memory, size, placements in A100_40GB_PROFILES:
        device.partition_profiles.add(profile_id=profile_id, name=name, compute_slices=compute, memory_slices=memory,
                                      memory_bytes=size, placements=placements)
    return device


def health(state: int, schedulable: bool, *faults: str) -> node_pb2.DeviceHealth:
    return node_pb2.DeviceHealth(state=state, schedulable=schedulable,
                                 faults=[node_pb2.Fault(fault=name, severity="critical") for name in faults])


def unhealthy() -> node_pb2.DeviceHealth:
    return health(node_pb2.HEALTH_STATE_UNHEALTHY, False, "xid_79")


def node(*devices: node_pb2.Device, driver_version: str = "570.124.06") -> node_pb2.Node:
    return node_pb2.Node(devices=list(devices), slicer_enabled=True, driver_version=driver_version)


def place(index: int, numa: int | None = None, socket: int | None = None, root: str = "") -> node_pb2.DevicePlace:
    found = node_pb2.DevicePlace(ref=ref(index), pcie_root=root or f"pci0000:{0x10 + 0x10 * index:02x}")
    if numa is not None:
        found.numa_node = numa
    if socket is not None:
        found.socket = socket
    return found


def nic(name: str, root: str, numa: int = 0, rate: int = 400) -> node_pb2.Nic:
    return node_pb2.Nic(name=name, pci_address=f"0000:{0x1a + int(name[-1]):02x}:00.0", numa_node=numa, socket=numa // 4,
                        rate_gbps=rate, device_nodes=[f"/dev/infiniband/uverbs{name[-1]}"], pcie_root=root)


def topology(indices: Iterable[int], links: Iterable[tuple[int, int]] = (), nics: Iterable[node_pb2.Nic] = ()
             ) -> node_pb2.Topology:
    """Each GPU on NUMA node index // 2 (socket index // 4) under its own root; ``links`` the pairs
    joined by NVLink ("interconnect"), every other pair "system"."""
    indices = sorted(indices)
    joined = {tuple(sorted(pair)) for pair in links}
    found = node_pb2.Topology(devices=[place(i, i // 2, i // 4) for i in indices], nics=list(nics))
    for a in indices:
        for b in indices:
            if a < b:
                level = "interconnect" if (a, b) in joined else "system"
                found.device_links.add(device_index=a, peer_index=b, level=level, links=18 if level == "interconnect" else 0)
    return found


def tdm_slice(index: int, owner: str, compute: int, memory: int, slice_id: str = "s-000000000001") -> slice_pb2.Slice:
    return slice_pb2.Slice(id=slice_id, mode="tdm", state=slice_pb2.SLICE_STATE_READY, device=ref(index),
                           compute_percent=compute, memory_bytes=memory, requested_compute_percent=compute,
                           requested_memory_bytes=memory, owner=slice_pb2.Owner(owner_id=owner))


def mig_slice(index: int, owner: str, gpu_instance: int, slice_id: str = "s-000000000002") -> slice_pb2.Slice:
    return slice_pb2.Slice(id=slice_id, mode="mig", state=slice_pb2.SLICE_STATE_READY, device=ref(index),
                           partition=slice_pb2.Partition(gpu_instance_id=gpu_instance), owner=slice_pb2.Owner(owner_id=owner))


def partition(gpu_instance: int, profile_id: int, start: int, size: int = 0) -> slice_pb2.Partition:
    return slice_pb2.Partition(gpu_instance_id=gpu_instance, compute_instance_id=0, uuid=f"MIG-{gpu_instance:08x}",
                               profile_id=profile_id, placement_start=start, placement_size=size)


@dataclass
class AgentView:
    """What a fake agent answers; ``snapshot`` is the publisher's callable. ``failing`` makes it raise."""

    node: node_pb2.Node
    topology: node_pb2.Topology
    slices: list[slice_pb2.Slice] = field(default_factory=list)
    failing: bool = False
    reads: int = 0

    async def snapshot(self) -> tuple[node_pb2.Node, node_pb2.Topology, list[slice_pb2.Slice]]:
        self.reads += 1
        if self.failing:
            raise ConnectionError("the agent does not answer")
        return self.node, self.topology, list(self.slices)


def dra_owner(n: int = 0) -> str:
    return f"dra:0b5e3c1a-1111-4222-8333-44445555{n:04x}:0"
