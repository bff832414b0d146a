"""Process, pod and attribution-health collectors: values, labels, vanishing rows, cmdline redaction,
and a full exposition (card + attribution families) that promtool accepts and docs/metrics.md lists."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from types import MappingProxyType

import pytest
from exporter_factories import (
    REFRESHED_AT,
    SECRET_CMDLINE,
    GiB,
    make_allocation,
    make_attribution,
    make_facts,
    make_full_attribution,
    make_gpu,
    make_health,
    make_lost_gpu,
    make_pod_usage,
    make_process,
    make_snapshot,
    make_state,
    uuid_for,
)
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics
from prometheus_client.openmetrics.parser import text_string_to_metric_families

from runtimekit.attribution.types import HOST, Owner, SourceStatus
from runtimekit.exporter.collectors.attribution import AttributionCollector
from runtimekit.exporter.collectors.pod import PodCollector
from runtimekit.exporter.collectors.process import REDACTED, CommandRedactor, ProcessCollector
from runtimekit.exporter.exposition import ExpositionCache
from runtimekit.exporter.registry import COLLECTORS, ViewCollector, build_collector_set, build_registry
from runtimekit.exporter.timing import CollectorSet
from runtimekit.gpu.types import NOT_SUPPORTED, MigDevice, Modes, RetiredPages, Thermal, Unavailable
from runtimekit.state import ComponentStatus
from runtimekit.state.health import ActiveFault, SliceHealth
from runtimekit.state.refs import GpuRef, MigRef
from runtimekit.state.slices import DeviceModeInfo, Slice, SliceSpec, SliceTable
from runtimekit.state.slices import Owner as SliceOwner
from runtimekit.state.topology import GpuPlace, Link, NicPlace, Topology

PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"
DOCS = Path(__file__).parents[2] / "docs" / "metrics.md"
GPU_PROCESS_FAMILIES = (
    "runtimekit_process_gpu_memory_bytes",
    "runtimekit_process_gpu_sm_utilization_ratio",
    "runtimekit_process_gpu_memory_utilization_ratio",
    "runtimekit_process_gpu_encoder_utilization_ratio",
    "runtimekit_process_gpu_decoder_utilization_ratio",
)
TRAINER_LABELS = {"namespace": "ml", "pod": "trainer-0", "container": "main"}
NO_OWNER = {"namespace": "", "pod": "", "container": ""}


def render(state, **options) -> dict[str, list]:
    """{sample name: [samples]} of the three collectors over the state's view, through a fresh CollectorRegistry."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ViewCollector(state, CollectorSet({
        "process": ProcessCollector(**options),
        "pod": PodCollector(),
        "attribution": AttributionCollector(),
    }, timer=lambda: 0.0)))
    out: dict[str, list] = {}
    for family in registry.collect():
        for sample in family.samples:
            if not sample.name.startswith("runtimekit_collector_"):
                out.setdefault(sample.name, []).append(sample)
    return out


def one(series, name, **labels):
    """The value of the one sample ``name`` whose labels include ``labels`` (None if absent)."""
    found = [s for s in series.get(name, []) if all(s.labels.get(k) == v for k, v in labels.items())]
    assert len(found) <= 1, f"{name}{labels} matched {len(found)} samples"
    return found[0].value if found else None


def state_with(attribution, gpus=None):
    state = make_state(make_snapshot(gpus))
    state.publish_attribution(attribution)
    return state


# --- process level -----------------------------------------------------------------------------


def test_process_gpu_families_values_and_full_label_set():
    series = render(state_with(make_attribution()))
    labels = {"gpu": "0", "uuid": uuid_for(0), "gpu_instance": "", "compute_instance": "", "pid": "4242",
              "process": "python3", **TRAINER_LABELS}
    assert [s.labels for s in series["runtimekit_process_gpu_memory_bytes"]] == [labels]
    assert one(series, "runtimekit_process_gpu_memory_bytes", **labels) == 9 * GiB
    assert one(series, "runtimekit_process_gpu_sm_utilization_ratio", **labels) == 0.6
    assert one(series, "runtimekit_process_gpu_memory_utilization_ratio", **labels) == 0.3
    assert one(series, "runtimekit_process_gpu_encoder_utilization_ratio", **labels) == 0.0
    assert one(series, "runtimekit_process_gpu_decoder_utilization_ratio", **labels) == 0.0
    per_process = {"pid": "4242", "process": "python3", **TRAINER_LABELS}
    assert [s.labels for s in series["runtimekit_process_cpu_seconds_total"]] == [per_process]
    assert one(series, "runtimekit_process_cpu_seconds_total") == 120.5
    assert one(series, "runtimekit_process_resident_memory_bytes", **per_process) == 2 * GiB


def test_unavailable_readings_are_omitted():
    row = make_process(sm_utilization=NOT_SUPPORTED, memory_utilization=Unavailable("no_permission"),
                       encoder_utilization=NOT_SUPPORTED, decoder_utilization=NOT_SUPPORTED,
                       used_memory_bytes=Unavailable("error", "NVML_ERROR_UNKNOWN"))
    series = render(state_with(make_attribution((row,))))
    assert not set(GPU_PROCESS_FAMILIES) & set(series)
    assert one(series, "runtimekit_process_cpu_seconds_total", pid="4242") == 120.5  # the host's view is still there


def test_host_process_has_empty_owner_labels():
    host_process = make_process(777, host=make_facts(777, name="Xorg", owner=HOST))
    series = render(state_with(make_attribution((host_process,), pods=(), allocations=())))
    assert one(series, "runtimekit_process_gpu_memory_bytes", pid="777", process="Xorg", **NO_OWNER) == 9 * GiB
    assert one(series, "runtimekit_process_resident_memory_bytes", pid="777", **NO_OWNER) == 2 * GiB
    assert "runtimekit_pod_gpu_memory_used_bytes" not in series


def test_process_unknown_to_proc_has_no_host_series():
    row = make_process(999, host=None)
    series = render(state_with(make_attribution((row,), pods=())))
    assert one(series, "runtimekit_process_gpu_memory_bytes", pid="999", process="", **NO_OWNER) == 9 * GiB
    assert "runtimekit_process_cpu_seconds_total" not in series
    assert "runtimekit_process_resident_memory_bytes" not in series


def test_container_known_only_by_id_has_empty_owner_labels():
    # The CRI runtime was down: the cgroup gave ids, no names. No half-filled label set.
    facts = make_facts(4242, owner=Owner(pod_uid="uid-1", container_id="abc"))
    series = render(state_with(make_attribution((make_process(host=facts),), pods=())))
    assert one(series, "runtimekit_process_gpu_memory_bytes", pid="4242", **NO_OWNER) == 9 * GiB


def test_process_on_two_gpus_counted_once_per_process():
    rows = (make_process(4242, 0), make_process(4242, 1, used_memory_bytes=3 * GiB))
    series = render(state_with(make_attribution(rows)))
    assert one(series, "runtimekit_process_gpu_memory_bytes", gpu="1", pid="4242") == 3 * GiB
    assert one(series, "runtimekit_process_gpu_memory_bytes", gpu="0", pid="4242") == 9 * GiB
    assert len(series["runtimekit_process_cpu_seconds_total"]) == 1
    assert len(series["runtimekit_process_resident_memory_bytes"]) == 1


def test_compute_and_graphics_listing_of_one_process_is_one_series():
    rows = (make_process(4242, 0), make_process(4242, 0))  # NVML's "C+G": in both lists
    series = render(state_with(make_attribution(rows)))
    assert len(series["runtimekit_process_gpu_memory_bytes"]) == 1


def test_mig_instance_labels():
    mig = make_process(5151, 0, gpu_instance_id=1, compute_instance_id=0, sm_utilization=NOT_SUPPORTED)
    plain = make_process(4242, 1)
    series = render(state_with(make_attribution((mig, plain))))
    assert one(series, "runtimekit_process_gpu_memory_bytes", pid="5151", gpu_instance="1", compute_instance="0") == 9 * GiB
    assert one(series, "runtimekit_process_gpu_memory_bytes", pid="4242", gpu_instance="", compute_instance="") == 9 * GiB
    assert one(series, "runtimekit_process_gpu_sm_utilization_ratio", pid="5151") is None  # MIG: NVML cannot tell
    # One set of label names per family, MIG or not.
    assert len({tuple(sorted(s.labels)) for s in series["runtimekit_process_gpu_memory_bytes"]}) == 1


def test_vanished_process_vanishes_from_exposition():
    state = state_with(make_attribution((make_process(4242), make_process(5151))))
    before = {s.labels["pid"] for s in render(state)["runtimekit_process_gpu_memory_bytes"]}
    assert before == {"4242", "5151"}
    state.publish_attribution(make_attribution((make_process(4242),)))
    after = render(state)
    assert {s.labels["pid"] for s in after["runtimekit_process_gpu_memory_bytes"]} == {"4242"}
    assert {s.labels["pid"] for s in after["runtimekit_process_cpu_seconds_total"]} == {"4242"}


def test_no_attribution_yields_nothing():
    state = make_state(make_snapshot())
    for cls in (ProcessCollector, PodCollector, AttributionCollector):
        assert list(cls().collect(state.view())) == [], cls.__name__


def test_dropped_counter_per_gpu_starts_at_zero_for_live_gpus():
    gpus = (make_gpu(0), make_gpu(1), make_lost_gpu(2))
    attribution = make_attribution(dropped={(0, uuid_for(0)): 17, (2, uuid_for(2)): 3})
    state = state_with(attribution, gpus)
    family = next(f for f in ProcessCollector().collect(state.view()) if f.name == "runtimekit_processes_dropped")
    assert family.type == "counter"
    got = {(s.labels["gpu"], s.labels["uuid"]): s.value for s in family.samples}
    assert got == {("0", uuid_for(0)): 17, ("1", uuid_for(1)): 0, ("2", uuid_for(2)): 3}


# --- command line --------------------------------------------------------------------------------


def test_cmdline_off_by_default():
    facts = make_facts(4242, cmdline=SECRET_CMDLINE)
    series = render(state_with(make_attribution((make_process(host=facts),))))
    assert "runtimekit_process_info" not in series
    text = generate_latest(build_registry(state_with(make_attribution((make_process(host=facts),))))).decode()
    assert "runtimekit_process_info" not in text and "hunter2" not in text


def test_cmdline_on_is_redacted():
    facts = make_facts(4242, cmdline=SECRET_CMDLINE)
    series = render(state_with(make_attribution((make_process(host=facts),))), cmdline=True)
    [info] = series["runtimekit_process_info"]
    assert info.value == 1
    command = info.labels.pop("command")
    assert info.labels == {"pid": "4242", "process": "python3", **TRAINER_LABELS}
    for secret in ("hunter2", "tok-123", "two", "words", "AKIAsecret", "k-42", "pg-pass"):
        assert secret not in command, secret
    assert command == (
        f"python3 serve.py --password={REDACTED} --token {REDACTED} --db.password {REDACTED} "
        f"AWS_SECRET_ACCESS_KEY={REDACTED} api_key={REDACTED} --dsn postgres://bob:{REDACTED}@db:5432/app "
        "--model monkey --epochs=3"
    )


def test_cmdline_truncated_after_redaction():
    long = ("python3", "-c", "x" * 1000, "--secret=s3")
    facts = make_facts(4242, cmdline=long)
    series = render(state_with(make_attribution((make_process(host=facts),))), cmdline=True, cmdline_max_length=64)
    command = series["runtimekit_process_info"][0].labels["command"]
    assert len(command) == 64 and command.endswith("...") and command.startswith("python3 -c xxx")
    assert len(CommandRedactor()(long)) == 256  # the default


def test_cmdline_custom_redaction_regex():
    facts = make_facts(4242, cmdline=("app", "--user", "alice", "--password=kept-by-this-regex"))
    series = render(state_with(make_attribution((make_process(host=facts),))), cmdline=True,
                    cmdline_redact=r"--user\s+(?P<value>\S+)")
    assert series["runtimekit_process_info"][0].labels["command"] == f"app --user {REDACTED} --password=kept-by-this-regex"
    whole = CommandRedactor(r"alice")(("app", "alice", "bob"))
    assert whole == f"app {REDACTED} bob"  # no value group: the whole match goes


@pytest.mark.parametrize("options, message", [
    ({"cmdline_redact": "(unclosed"}, "cmdline_redact"),
    ({"cmdline_max_length": 2}, "cmdline_max_length"),
    ({"cmdline": "yes"}, "cmdline"),
])
def test_bad_options_fail_at_construction(options, message):
    with pytest.raises(ValueError, match=message):
        build_registry(make_state(), options={"process": options})


def test_non_utf8_cmdline_does_not_break_the_exposition():
    facts = make_facts(4242, name="tr\udce9in", cmdline=("tr\udce9in", "--token=\udcff\udcfe"))
    state = state_with(make_attribution((make_process(host=facts),)))
    text = generate_latest(build_registry(state, options={"process": {"cmdline": True}})).decode()
    assert 'process="tr?in"' in text and f'command="tr?in --token={REDACTED}"' in text


# --- pod level -----------------------------------------------------------------------------------


def test_pod_usage_families():
    usage = make_pod_usage(0, used_memory_bytes=12 * GiB, sm_utilization=0.85, processes=3)
    series = render(state_with(make_attribution(pods=(usage,))))
    labels = {**TRAINER_LABELS, "gpu": "0", "uuid": uuid_for(0), "gpu_instance": "", "compute_instance": ""}
    assert [s.labels for s in series["runtimekit_pod_gpu_memory_used_bytes"]] == [labels]
    assert one(series, "runtimekit_pod_gpu_memory_used_bytes", **labels) == 12 * GiB
    assert one(series, "runtimekit_pod_gpu_utilization_ratio", **labels) == 0.85
    assert one(series, "runtimekit_pod_gpu_processes", **labels) == 3


def test_pod_utilization_unavailable_is_omitted():
    usage = make_pod_usage(0, sm_utilization=NOT_SUPPORTED)
    series = render(state_with(make_attribution(pods=(usage,))))
    assert "runtimekit_pod_gpu_utilization_ratio" not in series
    assert one(series, "runtimekit_pod_gpu_memory_used_bytes", pod="trainer-0") == 9 * GiB


def test_pod_rows_with_one_label_set_are_merged():
    restarted = Owner(namespace="ml", pod="trainer-0", container="main", container_id="new")
    pods = (make_pod_usage(0, used_memory_bytes=1 * GiB, sm_utilization=0.25),
            make_pod_usage(0, owner=restarted, used_memory_bytes=2 * GiB, sm_utilization=0.5, processes=2))
    series = render(state_with(make_attribution(pods=pods)))
    assert one(series, "runtimekit_pod_gpu_memory_used_bytes", gpu="0") == 3 * GiB
    assert one(series, "runtimekit_pod_gpu_utilization_ratio", gpu="0") == 0.75
    assert one(series, "runtimekit_pod_gpu_processes", gpu="0") == 3


def test_allocation_without_processes_shows_allocated_but_no_usage():
    idle = Owner(namespace="ml", pod="idle-0", container="main")
    mig = Owner(namespace="ml", pod="mig-0", container="worker")
    allocations = (
        make_allocation(0),
        make_allocation(1, owner=idle, device_id=f"{uuid_for(1)}::3"),
        make_allocation(None, owner=mig, device_id="MIG-11111111-2222-3333-4444-555555555555", resource="nvidia.com/mig-1g.10gb"),
    )
    series = render(state_with(make_attribution(allocations=allocations)))
    assert one(series, "runtimekit_pod_gpu_allocated", pod="trainer-0", gpu="0", uuid=uuid_for(0),
               device_id=uuid_for(0), resource="nvidia.com/gpu") == 1
    assert one(series, "runtimekit_pod_gpu_allocated", pod="idle-0", gpu="1", device_id=f"{uuid_for(1)}::3") == 1
    assert one(series, "runtimekit_pod_gpu_allocated", pod="mig-0", gpu="", uuid="", resource="nvidia.com/mig-1g.10gb") == 1
    usage_pods = {s.labels["pod"] for s in series["runtimekit_pod_gpu_memory_used_bytes"]}
    assert usage_pods == {"trainer-0"}  # idle-0 holds GPU 1 and runs nothing: allocated only
    assert one(series, "runtimekit_pod_gpu_utilization_ratio", pod="idle-0") is None
    assert len({tuple(sorted(s.labels)) for s in series["runtimekit_pod_gpu_allocated"]}) == 1


def test_vanished_pod_vanishes():
    state = state_with(make_attribution())
    assert "runtimekit_pod_gpu_allocated" in render(state)
    state.publish_attribution(make_attribution((), (), ()))
    series = render(state)
    assert not {"runtimekit_pod_gpu_allocated", "runtimekit_pod_gpu_memory_used_bytes", "runtimekit_process_gpu_memory_bytes"} & set(series)


# --- attribution health --------------------------------------------------------------------------


def test_source_up_gauges_and_last_refresh_timestamp():
    sources = {"procfs": SourceStatus(True), "kubelet": SourceStatus(False, "connection refused"), "cri": SourceStatus(True)}
    series = render(state_with(make_attribution(sources=sources)))
    assert [(s.labels["source"], s.value) for s in series["runtimekit_attribution_source_up"]] == [
        ("kubelet", 0.0), ("cri", 1.0), ("procfs", 1.0)]
    assert one(series, "runtimekit_attribution_last_refresh_timestamp_seconds") == REFRESHED_AT  # not an age
    assert "runtimekit_attribution_age_seconds" not in series


def test_only_sources_present_are_exported():
    series = render(state_with(make_attribution(sources={"procfs": SourceStatus(True)})))
    assert [s.labels["source"] for s in series["runtimekit_attribution_source_up"]] == ["procfs"]


# --- registry, promtool, docs --------------------------------------------------------------------


def full_state():
    """The card test suite's full node, plus attribution exercising every new family."""
    pre_ampere = make_gpu(2, retired_pages=RetiredPages(single_bit_ecc=1, double_bit_ecc=0, pending=True))
    pcie_card = make_gpu(4, thermal=Thermal(gpu_celsius=55.0, memory_celsius=NOT_SUPPORTED, fan_speed_ratio=0.42))
    mig_device = MigDevice(
        ref=MigRef(GpuRef(uuid_for(5), 5), 1, 0, "MIG-11111111-2222-3333-4444-555555555555"), index=0, profile="1g.10gb",
        profile_id=19, placement_start=0, compute_slices=1, multiprocessors=14, memory_total_bytes=10 * GiB, memory_used_bytes=GiB,
    )
    mig_card = make_gpu(5, modes=Modes(compute_mode="default", persistence_mode=True, mig_mode_current=True, mig_mode_pending=True),
                        utilization=None, processes=(), mig_devices=(mig_device,))
    gpus = (make_gpu(0), make_gpu(1, link_count=18), pre_ampere, make_lost_gpu(3), pcie_card, mig_card)
    state = make_state(make_snapshot(gpus), xids={(0, uuid_for(0), 48): 1, (3, uuid_for(3), 79): 2})
    state.publish_attribution(make_full_attribution())
    over = ActiveFault("slice_memory_over_quota", "warning", "restart_application", "3 GiB held, 2 GiB quota", "clean_samples",
                       first_seen=1.0, last_seen=2.0, fault_class="isolation")
    state.publish_health(make_health(slices=(SliceHealth(SLICE.id, 0, uuid_for(0), None, "suspect", (over,),
                                                         memory_used_bytes=3 * GiB, utilization=0.2),)))  # in full
    state.publish_slices(SliceTable(slices=MappingProxyType({SLICE.id: SLICE}),
                                    devices=MappingProxyType({0: DeviceModeInfo(GpuRef(uuid_for(0), 0), "tdm")})))
    state.publish_topology(TOPOLOGY)
    return state


# GPUs 0 and 1 linked by NVLink under one PCIe switch with a NIC; GPU 2 on the other socket.
_PLACES = (GpuPlace(GpuRef(uuid_for(0), 0), 0, 0, ("0000:16:00.0",), MappingProxyType({1: 18}), nvswitch=True),
           GpuPlace(GpuRef(uuid_for(1), 1), 0, 0, ("0000:16:00.0",), MappingProxyType({0: 18}), nvswitch=True),
           GpuPlace(GpuRef(uuid_for(2), 2), 1, 1, ("0000:96:00.0",)))
_NIC = NicPlace("mlx5_0", "0000:1a:00.0", 0, 0, ("0000:16:00.0",), 400, ("/dev/infiniband/uverbs0",))
TOPOLOGY = Topology(_PLACES, (_NIC,), MappingProxyType({(0, 1): Link("nvlink", 18), (0, 2): Link("system"), (1, 2): Link("system")}),
                    MappingProxyType({(0, "mlx5_0"): Link("pcie_switch"), (1, "mlx5_0"): Link("pcie_switch"),
                                      (2, "mlx5_0"): Link("system")}), 1.0, ("GPU 3: lost; its NVLinks were not read",))


SLICE = Slice(id="s-00000000000a", spec=SliceSpec(mode="tdm", compute=50, memory_mib=2048, owner=SliceOwner(owner_id="docs")),
              gpu=GpuRef(uuid_for(0), 0), state="ready", created_at=1.0, compute=50, memory_mib=2048)


def full_registry():
    return build_registry(full_state(), timer=lambda: 0.0, options={"process": {"cmdline": True}})


def test_registered_and_enabled_by_default():
    for name in ("process", "pod", "attribution"):
        assert COLLECTORS[name].enabled_by_default
    text = generate_latest(build_registry(full_state(), timer=lambda: 0.0)).decode()
    for name in ("process", "pod", "attribution"):
        assert f'runtimekit_collector_success{{collector="{name}"}} 1.0' in text
    assert "runtimekit_process_info" not in text  # cmdline stays off unless the options say so
    assert "runtimekit_process_gpu_memory_bytes" in text


def test_registry_options_switch_cmdline_on():
    text = generate_latest(full_registry()).decode()
    assert "runtimekit_process_info{" in text and REDACTED in text and "hunter2" not in text
    assert 'runtimekit_collector_success{collector="process"} 1.0' in text


@pytest.mark.tool("promtool")
def test_promtool_check_metrics_is_silent_with_attribution_families():
    text = generate_latest(full_registry())
    for family in ("runtimekit_process_gpu_memory_bytes", "runtimekit_process_cpu_seconds_total", "runtimekit_process_info",
                   "runtimekit_processes_dropped_total", "runtimekit_pod_gpu_allocated", "runtimekit_pod_gpu_utilization_ratio",
                   "runtimekit_attribution_source_up", "runtimekit_attribution_last_refresh_timestamp_seconds"):
        assert f"# TYPE {family} ".encode() in text, family
    result = subprocess.run([PROMTOOL, "check", "metrics"], input=text, capture_output=True, timeout=30)
    assert (result.returncode, result.stdout, result.stderr) == (0, b"", b"")


def test_openmetrics_types_and_units():
    families = {f.name: f for f in text_string_to_metric_families(generate_openmetrics(full_registry()).decode())}
    assert families["runtimekit_process"].type == "info"
    assert families["runtimekit_process_cpu_seconds"].type == "counter"
    assert families["runtimekit_process_cpu_seconds"].unit == "seconds"
    assert families["runtimekit_processes_dropped"].type == "counter"
    assert families["runtimekit_pod_gpu_memory_used_bytes"].unit == "bytes"


async def test_docs_table_lists_exactly_the_exported_families_with_attribution():
    """Every family /metrics serves (the collectors' and the exposition cache's own) is documented."""
    state = full_state()
    state.publish_components({"health": ComponentStatus("health", up=True)})  # as the supervisor does
    cache = ExpositionCache(state, build_collector_set(timer=lambda: 0.0, options={"process": {"cmdline": True}}))
    exported = set(re.findall(r"^# TYPE (\S+)", (await cache.render("text")).decode(), re.M))
    documented = set(re.findall(r"^\| `(runtimekit_[a-z0-9_]+)`", DOCS.read_text(), re.M))
    assert exported == documented


def test_docs_collector_table_lists_the_new_collectors():
    doc = DOCS.read_text()
    for name in ("process", "pod", "attribution"):
        assert f"| `{name}` |" in doc
