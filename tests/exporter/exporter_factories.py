"""Hand-built snapshots for the exporter tests: a healthy H100-like GPU, overridable per field."""

from __future__ import annotations

import dataclasses
from types import MappingProxyType
from typing import Any

from runtimekit.attribution.types import (
    HOST,
    AttributedProcess,
    AttributionSnapshot,
    DeviceAllocation,
    Owner,
    PodGpuUsage,
    ProcessFacts,
    SourceStatus,
)
from runtimekit.gpu.types import (
    NOT_SUPPORTED,
    Clocks,
    DriverInfo,
    Ecc,
    GpuIdentity,
    GpuLimits,
    GpuProcess,
    GpuSnapshot,
    Memory,
    Modes,
    NodeSnapshot,
    NvLink,
    Pcie,
    Power,
    RemappedRows,
    RetiredPages,
    Thermal,
    Unavailable,
    Utilization,
    XidEvent,
)
from runtimekit.state import NodeState, SamplerStats

GiB = 1024**3
MHZ = 1_000_000.0
SAMPLED_AT = 1_700_000_000.0


def uuid_for(index: int) -> str:
    return f"GPU-0000000{index}-aaaa-bbbb-cccc-dddddddddddd"


def make_nvlink(link: int, **overrides: Any) -> NvLink:
    fields: dict[str, Any] = dict(
        link=link, active=True, crc_flit_errors=1, crc_data_errors=2, replay_errors=3, recovery_errors=0,
        tx_bytes=1024 * (link + 1), rx_bytes=2048 * (link + 1),
    )
    fields.update(overrides)
    return NvLink(**fields)


def make_gpu(index: int = 0, *, link_count: int = 2, **overrides: Any) -> GpuSnapshot:
    """A healthy Hopper GPU; ``overrides`` replace top-level GpuSnapshot fields."""
    fields: dict[str, Any] = dict(
        index=index,
        identity=GpuIdentity(
            uuid=uuid_for(index), name="NVIDIA H100 80GB HBM3", pci_bus_id=f"00000000:{0x18 + index:02X}:00.0",
            serial=f"165432100{index}", vbios_version="96.00.74.00.01", board_part_number="692-2G520-0200-000",
            architecture="hopper", cuda_compute_capability="9.0",
        ),
        limits=GpuLimits(
            memory_total_bytes=80 * GiB, bar1_total_bytes=128 * GiB,
            sm_clock_max_hertz=1980 * MHZ, memory_clock_max_hertz=2619 * MHZ, graphics_clock_max_hertz=1980 * MHZ,
            temperature_slowdown_celsius=90.0, temperature_shutdown_celsius=92.0,
            temperature_gpu_max_celsius=87.0, temperature_memory_max_celsius=95.0,
            pcie_max_generation=5, pcie_max_width=16, nvlink_count=18,
        ),
        sampled_at=SAMPLED_AT,
        lost=False,
        utilization=Utilization(gpu=0.75, memory=0.5, encoder=0.0, decoder=0.0),
        memory=Memory(
            total_bytes=80 * GiB, used_bytes=10 * GiB, free_bytes=69 * GiB, reserved_bytes=1 * GiB,
            bar1_total_bytes=128 * GiB, bar1_used_bytes=1 * GiB, bar1_free_bytes=127 * GiB,
        ),
        thermal=Thermal(gpu_celsius=41.0, memory_celsius=38.0, fan_speed_ratio=NOT_SUPPORTED),
        power=Power(draw_watts=312.5, limit_watts=700.0, energy_joules=123456.789),
        clocks=Clocks(sm_hertz=1755 * MHZ, memory_hertz=2619 * MHZ, graphics_hertz=1755 * MHZ, event_reasons=0x4 | 0x20, performance_state=0),
        pcie=Pcie(generation=5, width=16, tx_bytes=1_000_000, rx_bytes=2_000_000, replay_count=0),
        ecc=Ecc(enabled=True, corrected_volatile=3, uncorrected_volatile=0, corrected_aggregate=10, uncorrected_aggregate=1),
        retired_pages=RetiredPages(single_bit_ecc=NOT_SUPPORTED, double_bit_ecc=NOT_SUPPORTED, pending=NOT_SUPPORTED),
        remapped_rows=RemappedRows(correctable=2, uncorrectable=0, pending=False, failure=False),
        nvlinks=tuple(make_nvlink(i) for i in range(link_count)),
        modes=Modes(compute_mode="default", persistence_mode=True, mig_mode_current=False, mig_mode_pending=False),
        processes=(GpuProcess(pid=4242, used_memory_bytes=9 * GiB, kind="compute"),),
        errors=(),
    )
    fields.update(overrides)
    return GpuSnapshot(**fields)


def make_lost_gpu(index: int = 0) -> GpuSnapshot:
    lost = Unavailable("gpu_lost")
    return make_gpu(
        index, lost=True, utilization=None, memory=None, thermal=None, power=None, clocks=None, pcie=None,
        ecc=None, retired_pages=None, remapped_rows=None, nvlinks=(), modes=None, processes=(),
        errors=(("memory", "GPU_IS_LOST"),),
        limits=GpuLimits(*([lost] * len(dataclasses.fields(GpuLimits)))),
    )


def make_snapshot(gpus: tuple[GpuSnapshot, ...] | None = None, **overrides: Any) -> NodeSnapshot:
    if gpus is None:
        gpus = (make_gpu(0), make_gpu(1))
    fields: dict[str, Any] = dict(
        sampled_at=SAMPLED_AT, duration_seconds=0.05, nvml_up=True, nvml_error="",
        driver=DriverInfo(driver_version="550.54.15", cuda_driver_version="12.4", nvml_version="12.550.54.15"),
        device_count=len(gpus), gpus=gpus,
    )
    fields.update(overrides)
    return NodeSnapshot(**fields)


def make_state(snapshot: NodeSnapshot | None = None, *, xids: dict | None = None) -> NodeState:
    """A NodeState with ``snapshot`` published and ``xids`` ({(gpu, uuid, code): count}) recorded."""
    state = NodeState()
    for (index, uuid, code), count in (xids or {}).items():
        for _ in range(count):
            state.record_xid(XidEvent(gpu_index=index, uuid=uuid, xid=code, received_at=SAMPLED_AT - 1))
    if snapshot is not None:
        # The period a sampler with the default configuration publishes: 1 s, 10 s between NVML retries.
        state.publish_snapshot(snapshot, SamplerStats(cycles_total=7, failures_total=1, last_duration_seconds=0.05,
                                                      last_cpu_seconds=0.01, period_seconds=1.0 if snapshot.nvml_up else 10.0))
    return state


def samples(families) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """{(sample name, sorted labels): value} over the families a collector yielded."""
    out = {}
    for family in families:
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(families, name: str, **labels: str) -> float | None:
    """The value of the one sample ``name`` whose labels include ``labels`` (None if absent)."""
    found = [
        s.value for f in families for s in f.samples
        if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
    ]
    assert len(found) <= 1, f"{name}{labels} matched {len(found)} samples"
    return found[0] if found else None


def names(families) -> set[str]:
    return {s.name for f in families for s in f.samples}


# --- attribution (process, pod and attribution collectors) ----------------------------------

REFRESHED_AT = SAMPLED_AT + 0.5
TRAINER = Owner(namespace="ml", pod="trainer-0", container="main", pod_uid="uid-trainer-0", container_id="c0ffee")


def make_facts(pid: int, *, owner: Owner = TRAINER, **overrides: Any) -> ProcessFacts:
    fields: dict[str, Any] = dict(
        pid=pid, name="python3", cmdline=("python3", "train.py", "--epochs=3"), cpu_seconds=120.5,
        resident_bytes=2 * GiB, owner=owner,
    )
    fields.update(overrides)
    return ProcessFacts(**fields)


def make_process(pid: int = 4242, gpu: int = 0, *, host: ProcessFacts | None | str = "default", **overrides: Any) -> AttributedProcess:
    """One process row on ``gpu``; ``host="default"`` gives it /proc facts owned by TRAINER."""
    facts = make_facts(pid) if host == "default" else host
    fields: dict[str, Any] = dict(
        gpu_index=gpu, gpu_uuid=uuid_for(gpu), pid=pid, used_memory_bytes=9 * GiB,
        sm_utilization=0.6, memory_utilization=0.3, encoder_utilization=0.0, decoder_utilization=0.0,
        gpu_instance_id=NOT_SUPPORTED, compute_instance_id=NOT_SUPPORTED,
        host=facts, owner=facts.owner if facts is not None else HOST,
    )
    fields.update(overrides)
    return AttributedProcess(**fields)


def make_pod_usage(gpu: int = 0, *, owner: Owner = TRAINER, **overrides: Any) -> PodGpuUsage:
    fields: dict[str, Any] = dict(
        owner=owner, gpu_index=gpu, gpu_uuid=uuid_for(gpu), used_memory_bytes=9 * GiB, sm_utilization=0.6, processes=1,
    )
    fields.update(overrides)
    return PodGpuUsage(**fields)


def make_allocation(gpu: int | None = 0, *, owner: Owner = TRAINER, device_id: str | None = None,
                    resource: str = "nvidia.com/gpu") -> DeviceAllocation:
    uuid = uuid_for(gpu) if gpu is not None else ""
    return DeviceAllocation(owner, resource, device_id if device_id is not None else uuid, uuid, gpu)


def make_attribution(
    processes: tuple[AttributedProcess, ...] | None = None,
    pods: tuple[PodGpuUsage, ...] | None = None,
    allocations: tuple[DeviceAllocation, ...] | None = None,
    *,
    sources: dict[str, SourceStatus] | None = None,
    dropped: dict[tuple[int, str], int] | None = None,
    refreshed_at: float = REFRESHED_AT,
) -> AttributionSnapshot:
    """Default: one TRAINER process on GPU 0, its pod usage and allocation, all three sources up."""
    if sources is None:
        sources = {name: SourceStatus(True, last_success=refreshed_at) for name in ("kubelet", "cri", "procfs")}
    return AttributionSnapshot(
        refreshed_at=refreshed_at,
        processes=(make_process(),) if processes is None else processes,
        pods=(make_pod_usage(),) if pods is None else pods,
        allocations=(make_allocation(0),) if allocations is None else allocations,
        sources=MappingProxyType(dict(sources)),
        dropped_total=MappingProxyType(dict(dropped or {})),
    )


SECRET_CMDLINE = (
    "python3", "serve.py", "--password=hunter2", "--token", "tok-123", "--db.password", "two words",
    "AWS_SECRET_ACCESS_KEY=AKIAsecret", "api_key=k-42", "--dsn", "postgres://bob:pg-pass@db:5432/app",
    "--model", "monkey", "--epochs=3",
)


def make_full_attribution() -> AttributionSnapshot:
    """Attribution exercising every process/pod/attribution family, for the GPUs 0, 1, 2, 4 of a node
    whose GPU 3 is lost (test_exporter_promtool's full node): a process on two GPUs with a secret-laden
    command line, a MIG process, a host process, one unknown to /proc, an allocated idle GPU, a MIG
    allocation, a source down and dropped rows. Render with ``options={"process": {"cmdline": True}}``
    to get ``runtimekit_process_info`` too."""
    idle = Owner(namespace="ml", pod="idle-0", container="main")
    processes = (
        make_process(4242, 0, host=make_facts(4242, cmdline=SECRET_CMDLINE)),
        make_process(4242, 1, used_memory_bytes=1 * GiB),
        make_process(5151, 2, gpu_instance_id=1, compute_instance_id=0, sm_utilization=NOT_SUPPORTED),
        make_process(777, 4, host=make_facts(777, name="Xorg", owner=HOST)),
        make_process(999, 4, host=None),
    )
    pods = (make_pod_usage(0), make_pod_usage(1, used_memory_bytes=1 * GiB))
    allocations = (make_allocation(0), make_allocation(1), make_allocation(4, owner=idle),
                   make_allocation(None, owner=idle, device_id="MIG-11111111-2222-3333-4444-555555555555"))
    sources = {"kubelet": SourceStatus(True), "cri": SourceStatus(False, "unavailable"), "procfs": SourceStatus(True)}
    return make_attribution(processes, pods, allocations, sources=sources, dropped={(0, uuid_for(0)): 5})


# --- health (health collector) -------------------------------------------------------------------

EVALUATED_AT = SAMPLED_AT + 0.2


def make_health(**overrides: Any):
    """A verdict exercising every health family: GPU 0 healthy, GPU 1 unhealthy with a sticky XID 79
    and a clearing warning, a node-level fault, counters."""
    from runtimekit.healthcheck.types import ActiveFault, GpuHealth, NodeHealth

    xid79 = ActiveFault("xid_79", "critical", "reboot_node", "XID 79 at 22:13:20 UTC", "node_reboot",
                        first_seen=EVALUATED_AT - 60, last_seen=EVALUATED_AT - 60)
    thermal = ActiveFault("thermal_slowdown", "warning", "none", "HW slowdown 0x40", "clean_samples",
                          first_seen=EVALUATED_AT - 30, last_seen=EVALUATED_AT - 1, clean_samples=1)
    fields: dict[str, Any] = dict(
        evaluated_at=EVALUATED_AT, state="unhealthy", action="reboot_node",
        gpus=(GpuHealth(0, uuid_for(0), "healthy", since=EVALUATED_AT - 300),
              GpuHealth(1, uuid_for(1), "unhealthy", (xid79, thermal), since=EVALUATED_AT - 60, action="reboot_node")),
        transitions_total={(uuid_for(1), "healthy", "unhealthy"): 1},
        fault_events_total={(uuid_for(1), "xid_79", "critical"): 1, (uuid_for(1), "thermal_slowdown", "warning"): 2},
        node_fault_events_total={("gpu_count_low", "critical"): 1},
        detector_seconds=0.0015,
        faults=(ActiveFault("gpu_count_low", "critical", "reboot_node", "7 of 8 expected GPUs", "node_reboot",
                            first_seen=EVALUATED_AT - 60, last_seen=EVALUATED_AT),),
    )
    fields.update(overrides)
    return NodeHealth(**fields)
