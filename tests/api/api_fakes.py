"""A fake slicer (implements runtimekit.state.slices.SliceService) and a real NodeState with a
sampled two-GPU node, for the gRPC API's tests. The fake publishes its table to the state as the
real slicer does, so WatchSlices sees its changes."""

from __future__ import annotations

import itertools
from dataclasses import replace
from types import MappingProxyType

from runtimekit.gpu.types import NOT_SUPPORTED, DriverInfo, GpuIdentity, GpuLimits, GpuSnapshot, NodeSnapshot
from runtimekit.state import NodeState, SamplerStats
from runtimekit.state.health import HEALTHY, NONE, UNHEALTHY, ActiveFault, GpuHealth, NodeHealth
from runtimekit.state.refs import GpuRef, MigRef, PciAddress
from runtimekit.state.slices import DeviceModeInfo, DeviceSelector, Owner, Slice, SliceError, SliceRequest, SliceSpec, SliceTable

GiB = 1 << 30
NOW = 1_700_000_000.0
MEMORY_MIB = 81_920  # an 80 GiB card


def uuid_for(index: int) -> str:
    return f"GPU-0000000{index}-aaaa-bbbb-cccc-dddddddddddd"


def gpu_ref(index: int) -> GpuRef:
    return GpuRef(uuid_for(index), index, PciAddress(0, 0x18 + index, 0, 0))


def make_gpu(index: int) -> GpuSnapshot:
    limits = dict.fromkeys(GpuLimits.__dataclass_fields__, NOT_SUPPORTED) | {"memory_total_bytes": 80 * GiB}
    return GpuSnapshot(
        index=index,
        identity=GpuIdentity(
            uuid=uuid_for(index), name="NVIDIA H100 80GB HBM3", pci_bus_id=str(gpu_ref(index).pci), serial=NOT_SUPPORTED,
            vbios_version=NOT_SUPPORTED, board_part_number=NOT_SUPPORTED, architecture="hopper",
            cuda_compute_capability="9.0",
        ),
        limits=GpuLimits(**limits), sampled_at=NOW, lost=False, utilization=None, memory=None, thermal=None,
        power=None, clocks=None, pcie=None, ecc=None, retired_pages=None, remapped_rows=None, nvlinks=(), modes=None,
        processes=(),
    )


def make_state(gpus: int = 2) -> NodeState:
    """A NodeState with one sample of ``gpus`` H100s and a verdict: GPU 1 unhealthy (XID 79)."""
    state = NodeState(clock=lambda: NOW)
    driver = DriverInfo(driver_version="550.54.15", cuda_driver_version="12.4", nvml_version="12.550.54.15")
    snapshot = NodeSnapshot(sampled_at=NOW, duration_seconds=0.01, nvml_up=True, nvml_error="", driver=driver,
                            device_count=gpus, gpus=tuple(make_gpu(i) for i in range(gpus)))
    state.publish_snapshot(snapshot, SamplerStats())
    fault = ActiveFault("xid_79", "critical", "drain_and_reset_gpu", "XID 79: fell off the bus", "gpu_reset", NOW, NOW)
    health = tuple(GpuHealth(i, uuid_for(i), HEALTHY, since=NOW) for i in range(gpus))
    if gpus > 1:
        health = (health[0], GpuHealth(1, uuid_for(1), UNHEALTHY, (fault,), NOW, "drain_and_reset_gpu"), *health[2:])
    state.publish_health(NodeHealth(NOW, UNHEALTHY if gpus > 1 else HEALTHY, NONE, health))
    return state


class FakeSlicer:
    """A SliceService over a dict: GPU 0 is a "tdm" card, GPU 1 a "mig" card. ``fail_next`` makes
    the next call raise that exception (a refusal, or a bug). It parses only what the tests send."""

    def __init__(self, state: NodeState) -> None:
        self.state = state
        self.fail_next: Exception | None = None
        self.calls: list[tuple[str, object]] = []
        self._ids = itertools.count(1)
        self._slices: dict[str, Slice] = {}
        self._modes = {0: "tdm", 1: "mig"}
        self._publish()

    def _info(self, index: int) -> DeviceModeInfo:
        on = [s for s in self._slices.values() if s.gpu.index == index]
        used = sum(s.memory_mib for s in on)
        return DeviceModeInfo(
            gpu=gpu_ref(index), mode=self._modes[index], mig_capable=True, memory_mib=MEMORY_MIB,
            usable_memory_mib=MEMORY_MIB - 1024, compute_free=100 - sum(s.compute for s in on),
            memory_free_mib=MEMORY_MIB - 1024 - used, slices=tuple(s.id for s in on),
        )

    def _publish(self) -> None:
        self.state.publish_slices(self.table())

    def _check(self, name: str, argument: object) -> None:
        self.calls.append((name, argument))
        error, self.fail_next = self.fail_next, None
        if error is not None:
            raise error

    def table(self) -> SliceTable:
        return SliceTable(MappingProxyType(dict(self._slices)), MappingProxyType({i: self._info(i) for i in self._modes}))

    async def create(self, request: SliceRequest) -> Slice:
        self._check("create", request)
        if request.mode not in ("tdm", "mig"):
            raise SliceError("invalid_argument", "mode", f"must be tdm or mig, got {request.mode!r}")
        number, unit = request.memory[:-3], request.memory[-3:]
        if not number.isdigit() or unit not in ("GiB", "MiB"):
            raise SliceError("invalid_argument", "memory", f"must be NGiB or NMiB, got {request.memory!r}")
        memory_mib = int(number) * (1024 if unit == "GiB" else 1)
        index = 1 if request.mode == "mig" else 0
        owner = Owner(request.pod_uid, request.container, request.owner_id)
        spec = SliceSpec(request.mode, request.compute, memory_mib, DeviceSelector(), owner, request.priority)
        slice_id = f"s-{next(self._ids):012x}"
        made = Slice(slice_id, spec, gpu_ref(index), "ready", NOW, request.compute, memory_mib, cdi_device=f"runtimekit.io/slice={slice_id}")
        if request.mode == "mig":
            mig = MigRef(gpu_ref(1), 7, 0, "MIG-11111111-2222-3333-4444-555555555555")
            made = replace(made, compute=43, memory_mib=20_096, mig=mig, profile="3g.40gb", profile_id=9, placement=(4, 4), cdi_device="")
        self._slices[slice_id] = made
        self._publish()
        return made

    async def delete(self, slice_id: str) -> Slice:
        self._check("delete", slice_id)
        gone = self._slices.pop(slice_id, None)
        if gone is None:
            raise SliceError("not_found", "slice_id", f"no slice {slice_id!r}")
        self._publish()
        return gone

    async def set_device_mode(self, device: str, mode: str) -> DeviceModeInfo:
        self._check("set_device_mode", (device, mode))
        index = int(device)
        if any(s.gpu.index == index for s in self._slices.values()):
            raise SliceError("failed_precondition", "device", f"GPU {index} has slices; delete them first")
        self._modes[index] = mode
        self._publish()
        return replace(self._info(index), pending=mode if mode == "mig" else None)
