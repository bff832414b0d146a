"""The MIG collector and the MIG instance labels of the process and pod series."""

from __future__ import annotations

import subprocess

import pytest
from exporter_factories import (
    GiB,
    make_allocation,
    make_attribution,
    make_gpu,
    make_lost_gpu,
    make_pod_usage,
    make_process,
    make_snapshot,
    make_state,
    uuid_for,
)
from prometheus_client import generate_latest

from runtimekit.exporter.collectors.mig import MigCollector
from runtimekit.exporter.registry import COLLECTORS, build_registry
from runtimekit.gpu.types import NOT_SUPPORTED, MigDevice, Modes, Unavailable
from runtimekit.state.refs import GpuRef, MigRef

MIG_MODE = Modes(compute_mode="default", persistence_mode=True, mig_mode_current=True, mig_mode_pending=True)
G0 = {"gpu": "0", "uuid": uuid_for(0)}


def mig_device(gpu: int, gi: int, ci: int, profile: str = "3g.40gb", used: object = 5 * GiB, **overrides) -> MigDevice:
    fields = dict(
        ref=MigRef(GpuRef(uuid_for(gpu), gpu), gi, ci, f"MIG-{gpu}{gi}{ci}000000-0000-0000-0000-000000000000"),
        index=0, profile=profile, profile_id=9, placement_start=0, compute_slices=3, multiprocessors=42,
        memory_total_bytes=40 * GiB, memory_used_bytes=used,
    )
    fields.update(overrides)
    return MigDevice(**fields)


def mig_gpu(index: int = 0, devices: tuple[MigDevice, ...] = (), errors: tuple[tuple[str, str], ...] = ()):
    return make_gpu(index, modes=MIG_MODE, mig_devices=devices, utilization=None, processes=(), errors=errors)


def node_with_mig():
    """GPU 0 in MIG mode: a 3g.40gb split in two compute instances (GI 1) and a 1g.10gb (GI 2);
    GPU 1 a whole GPU."""
    devices = (
        mig_device(0, 1, 0),
        mig_device(0, 1, 1),
        mig_device(0, 2, 0, "1g.10gb", used=NOT_SUPPORTED, memory_total_bytes=10 * GiB, compute_slices=1),
    )
    return make_state(make_snapshot((mig_gpu(0, devices), make_gpu(1))))


def samples(state, name):
    return [s for family in MigCollector().collect(state.view()) for s in family.samples if s.name == name]


def test_one_identity_series_per_mig_device():
    info = samples(node_with_mig(), "runtimekit_gpu_mig_device_info")
    assert [s.labels for s in info] == [
        {**G0, "gpu_instance": "1", "compute_instance": "0", "mig_uuid": "MIG-010000000-0000-0000-0000-000000000000", "profile": "3g.40gb"},
        {**G0, "gpu_instance": "1", "compute_instance": "1", "mig_uuid": "MIG-011000000-0000-0000-0000-000000000000", "profile": "3g.40gb"},
        {**G0, "gpu_instance": "2", "compute_instance": "0", "mig_uuid": "MIG-020000000-0000-0000-0000-000000000000", "profile": "1g.10gb"},
    ]
    assert {s.value for s in info} == {1.0}
    assert [(s.labels, s.value) for s in samples(node_with_mig(), "runtimekit_gpu_mig_devices")] == [(G0, 3.0)]


def test_memory_and_slices_once_per_gpu_instance_and_missing_memory_is_omitted():
    state = node_with_mig()
    total = {s.labels["gpu_instance"]: s.value for s in samples(state, "runtimekit_gpu_mig_memory_total_bytes")}
    assert total == {"1": 40 * GiB, "2": 10 * GiB}  # GI 1's two compute instances share its memory: one series
    used = {s.labels["gpu_instance"]: s.value for s in samples(state, "runtimekit_gpu_mig_memory_used_bytes")}
    assert used == {"1": 5 * GiB}  # GI 2's reading is unavailable: absent, never 0
    assert {s.labels["gpu_instance"]: s.value for s in samples(state, "runtimekit_gpu_mig_compute_slices")} == {"1": 3, "2": 1}
    assert all(set(s.labels) == {"gpu", "uuid", "gpu_instance"} for s in samples(state, "runtimekit_gpu_mig_memory_used_bytes"))


def test_mig_mode_without_instances_counts_zero_and_other_gpus_have_no_mig_series():
    state = make_state(make_snapshot((mig_gpu(0), make_gpu(1), make_lost_gpu(2))))
    families = list(MigCollector().collect(state.view()))
    assert [(f.name, [(s.labels, s.value) for s in f.samples]) for f in families] == [("runtimekit_gpu_mig_devices", [(G0, 0.0)])]
    assert list(MigCollector().collect(make_state(make_snapshot()).view())) == []  # no GPU in MIG mode



def test_a_gpu_instance_takes_each_value_from_the_first_of_its_devices_that_has_it():
    memory, profile = (Unavailable("error", f"{call}: NVML_ERROR_UNKNOWN")
                       for call in ("nvmlDeviceGetMemoryInfo", "nvmlDeviceGetGpuInstanceProfileInfoByIdV"))
    devices = (mig_device(0, 1, 0, used=memory, compute_slices=profile), mig_device(0, 1, 1, used=7 * GiB))
    state = make_state(make_snapshot((mig_gpu(0, devices),)))
    assert [s.value for s in samples(state, "runtimekit_gpu_mig_compute_slices")] == [3]
    assert [s.value for s in samples(state, "runtimekit_gpu_mig_memory_used_bytes")] == [7 * GiB]


def test_the_device_count_is_absent_when_the_listing_failed_never_0():
    listing = ("mig_devices", "nvmlDeviceGetMaxMigDeviceCount: NVML_ERROR_UNKNOWN")
    state = make_state(make_snapshot((mig_gpu(0, errors=(listing,)), mig_gpu(1, (mig_device(1, 1, 0),), errors=(listing,)))))
    assert samples(state, "runtimekit_gpu_mig_devices") == []
    assert [s.labels["gpu"] for s in samples(state, "runtimekit_gpu_mig_device_info")] == ["1"]  # what was read stays
    field = ("mig_devices[0].profile", "nvmlDeviceGetGpuInstanceProfileInfoByIdV: NVML_ERROR_UNKNOWN")
    state = make_state(make_snapshot((mig_gpu(0, (mig_device(0, 1, 0),), errors=(field,)),)))
    assert [s.value for s in samples(state, "runtimekit_gpu_mig_devices")] == [1.0]  # a device's field: listed all the same

def test_no_utilization_series_for_mig_devices_nor_processes_in_them():
    state = node_with_mig()
    inside = make_process(5151, 0, gpu_instance_id=1, compute_instance_id=1, sm_utilization=NOT_SUPPORTED,
                          memory_utilization=NOT_SUPPORTED, encoder_utilization=NOT_SUPPORTED, decoder_utilization=NOT_SUPPORTED)
    state.publish_attribution(make_attribution((inside, make_process(4242, 1)), pods=(), allocations=()))
    for family in build_registry(state, timer=lambda: 0.0).collect():
        for sample in family.samples:
            if "utilization" in sample.name:
                assert sample.labels.get("gpu") != "0" and sample.labels.get("gpu_instance", "") == "", sample
    assert COLLECTORS["mig"].enabled_by_default


def test_process_series_name_the_mig_instance_of_a_mig_device():
    state = node_with_mig()
    inside = make_process(5151, 0, gpu_instance_id=1, compute_instance_id=1, sm_utilization=NOT_SUPPORTED)
    state.publish_attribution(make_attribution((inside,), pods=(), allocations=()))
    text = generate_latest(build_registry(state, timer=lambda: 0.0)).decode()
    process = f'runtimekit_process_gpu_memory_bytes{{compute_instance="1",container="main",gpu="0",gpu_instance="1",namespace="ml",pid="5151",pod="trainer-0",process="python3",uuid="{uuid_for(0)}"}} 9.663676416e+09'
    assert process in text
    # The same (uuid, gpu_instance, compute_instance) names the MIG device: a join finds its UUID and profile.
    assert f'compute_instance="1",gpu="0",gpu_instance="1",mig_uuid="MIG-011000000-0000-0000-0000-000000000000",profile="3g.40gb",uuid="{uuid_for(0)}"}} 1.0' in text


def test_pod_series_name_the_mig_instance():
    state = node_with_mig()
    device = mig_device(0, 2, 0)
    allocation = make_allocation(0, device_id=device.uuid, resource="nvidia.com/mig-1g.10gb")
    pods = (make_pod_usage(0, gpu_instance_id=2, compute_instance_id=0, sm_utilization=NOT_SUPPORTED),
            make_pod_usage(1, used_memory_bytes=1 * GiB))
    allocations = (
        type(allocation)(allocation.owner, allocation.resource_name, allocation.device_id, uuid_for(0), 0, device.ref),
        make_allocation(1),
    )
    state.publish_attribution(make_attribution((), pods, allocations))
    series = {(s.name, s.labels["gpu"], s.labels["gpu_instance"], s.labels["compute_instance"]): s.value
              for f in build_registry(state, timer=lambda: 0.0).collect() for s in f.samples if s.name.startswith("runtimekit_pod_")}
    assert series[("runtimekit_pod_gpu_memory_used_bytes", "0", "2", "0")] == 9 * GiB
    assert series[("runtimekit_pod_gpu_memory_used_bytes", "1", "", "")] == 1 * GiB
    assert ("runtimekit_pod_gpu_utilization_ratio", "0", "2", "0") not in series  # not attributable in MIG
    assert series[("runtimekit_pod_gpu_allocated", "0", "2", "0")] == 1
    assert series[("runtimekit_pod_gpu_allocated", "1", "", "")] == 1


@pytest.mark.tool("promtool")
def test_promtool_check_metrics_is_silent_with_mig_series(require_tool):
    state = node_with_mig()
    inside = make_process(5151, 0, gpu_instance_id=1, compute_instance_id=1, sm_utilization=NOT_SUPPORTED)
    state.publish_attribution(make_attribution((inside,), pods=(make_pod_usage(0, gpu_instance_id=1, compute_instance_id=1),)))
    text = generate_latest(build_registry(state, timer=lambda: 0.0))
    for family in ("runtimekit_gpu_mig_device_info", "runtimekit_gpu_mig_memory_used_bytes", "runtimekit_gpu_mig_devices"):
        assert f"# TYPE {family} gauge".encode() in text, family
    result = subprocess.run([require_tool("promtool"), "check", "metrics"], input=text, capture_output=True, timeout=30)
    assert (result.returncode, result.stdout, result.stderr) == (0, b"", b"")


def test_an_unavailable_profile_is_an_empty_label():
    state = make_state(make_snapshot((mig_gpu(0, (mig_device(0, 1, 0, Unavailable("error", "x")),)),)))
    [info] = samples(state, "runtimekit_gpu_mig_device_info")
    assert info.labels["profile"] == ""
