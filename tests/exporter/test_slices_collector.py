"""The slices collector: quota against use and health per slice, each card's slicing mode — and the
series the slice alert rules read are really emitted, with the same names and labels."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from types import MappingProxyType

import yaml
from exporter_factories import TRAINER, make_attribution, make_pod_usage, make_snapshot, uuid_for
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from runtimekit.exporter.registry import COLLECTORS, build_registry
from runtimekit.healthcheck.checker import HealthChecker
from runtimekit.healthcheck.detectors import run_detectors
from runtimekit.healthcheck.thresholds import defaults
from runtimekit.state import NodeState, SamplerStats
from runtimekit.state.refs import GpuRef
from runtimekit.state.slices import DeviceModeInfo, Owner, Slice, SliceSpec, SliceTable

GiB = 1 << 30
RULES = Path(__file__).resolve().parents[2] / "alerts" / "runtimekit.rules.yml"
OVER = Slice(id="s-0123456789ab", spec=SliceSpec(mode="tdm", compute=50, memory_mib=2048,
                                                 owner=Owner(pod_uid=TRAINER.pod_uid, container=TRAINER.container)),
             gpu=GpuRef(uuid_for(0), 0), state="ready", created_at=1.0, compute=50, memory_mib=2048,
             cdi_device="runtimekit.io/slice=s-0123456789ab")
FREE = Slice(id="s-free00000000", spec=SliceSpec(mode="tdm", compute=0, memory_mib=1024, owner=Owner(owner_id="me")),
             gpu=GpuRef(uuid_for(0), 0), state="ready", created_at=1.0, compute=0, memory_mib=1024)


async def exposition(*, with_health: bool = True) -> dict[tuple[str, frozenset], float]:
    """The agent's /metrics text for a node whose slice OVER holds 3 GiB against its 2 GiB quota."""
    state = NodeState()
    state.publish_slices(SliceTable(
        slices=MappingProxyType({OVER.id: OVER, FREE.id: FREE}),
        devices=MappingProxyType({0: DeviceModeInfo(GpuRef(uuid_for(0), 0), "tdm"),
                                  1: DeviceModeInfo(GpuRef(uuid_for(1), 1), "tdm", pending="mig")}),
    ))
    snapshot = make_snapshot()
    state.publish_attribution(make_attribution(pods=(make_pod_usage(0, used_memory_bytes=3 * GiB, sm_utilization=0.4),)))
    state.publish_snapshot(snapshot, SamplerStats())
    if with_health:
        thresholds = defaults()
        thresholds["nvlink"]["expected_active_links"] = 2  # the factory's cards have 2 links: healthy cards
        checker = HealthChecker(state, run_detectors, thresholds=thresholds, clock=lambda: snapshot.sampled_at)
        assert await checker.evaluate()
        checker.close()
    text = generate_latest(build_registry(state, {name: name == "slices" for name in COLLECTORS})).decode()
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def find(series: dict[tuple[str, frozenset], float], name: str, **labels: str) -> list[float]:
    return [v for (n, ls), v in series.items() if n == name and all((k, v2) in ls for k, v2 in labels.items())]


async def test_quota_use_health_and_faults_per_slice():
    series = await exposition()
    slice_ = {"slice": OVER.id, "gpu": "0", "uuid": uuid_for(0)}
    assert find(series, "runtimekit_slice_info", **slice_, mode="tdm", pod_uid=TRAINER.pod_uid,
                container=TRAINER.container, owner_id="", gpu_instance="", cdi_device=OVER.cdi_device) == [1.0]
    assert find(series, "runtimekit_slice_compute_quota_ratio", **slice_) == [0.5]
    assert find(series, "runtimekit_slice_memory_quota_bytes", **slice_) == [2 * GiB]
    assert find(series, "runtimekit_slice_memory_used_bytes", **slice_) == [3 * GiB]
    assert find(series, "runtimekit_slice_utilization_ratio", **slice_) == [0.4]
    assert find(series, "runtimekit_slice_health", **slice_, state="suspect") == [1.0]
    assert sum(find(series, "runtimekit_slice_health", **slice_)) == 1.0  # one-hot over the four states
    assert find(series, "runtimekit_slice_fault_active", **slice_, fault="slice_memory_over_quota", severity="warning",
                action="restart_application") == [1.0]


async def test_unmeasurable_and_unlimited_are_absent_not_zero():
    series = await exposition()
    free = {"slice": FREE.id}
    assert find(series, "runtimekit_slice_compute_quota_ratio", **free) == []  # compute 0: unlimited
    assert find(series, "runtimekit_slice_memory_used_bytes", **free) == []  # a free owner: no processes to tell
    assert find(series, "runtimekit_slice_health", **free, state="healthy") == [1.0]


async def test_device_modes_are_one_hot_with_the_pending_mode():
    series = await exposition()
    assert find(series, "runtimekit_device_mode", gpu="1", mode="tdm") == [1.0]
    assert find(series, "runtimekit_device_mode", gpu="1", mode="mig") == [0.0]
    assert find(series, "runtimekit_device_mode_pending", gpu="1", mode="mig") == [1.0]
    assert find(series, "runtimekit_device_mode_pending", gpu="0", mode="mig") == [0.0]


async def test_no_health_series_before_the_first_verdict():
    series = await exposition(with_health=False)
    assert find(series, "runtimekit_slice_info", slice=OVER.id) == [1.0]
    assert find(series, "runtimekit_slice_health") == [] and find(series, "runtimekit_slice_memory_used_bytes") == []


def _slice_rules() -> dict[str, str]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return {r["alert"]: r["expr"] for g in groups if g["name"] == "runtimekit.slices" for r in g["rules"]}


async def test_the_series_the_slice_alerts_read_are_emitted_with_their_labels():
    """Every selector of the slice alert rules matches a series the agent emits for a slice over its
    quota, and the labels the rules join on and template with are on those series."""
    series = await exposition()
    rules = _slice_rules()
    assert set(rules) == {"RuntimeKitSliceMemoryOverQuota", "RuntimeKitSliceComputeOverShare", "RuntimeKitSliceUnhealthy"}
    memory = rules["RuntimeKitSliceMemoryOverQuota"]
    for name, matchers in re.findall(r"(runtimekit_[a-z_]+)(?:\{([^}]*)\})?", memory):
        wanted = dict(re.findall(r'([a-z_]+)="([^"]*)"', matchers or ""))
        assert find(series, name, **wanted, slice=OVER.id), f"{name}{{{matchers}}}: not emitted"
    joined = set(re.search(r"group_left \(([^)]*)\)", memory).group(1).replace(" ", "").split(","))  # type: ignore[union-attr]
    info_labels = {k for (n, ls) in series if n == "runtimekit_slice_info" for k, _ in ls}
    assert joined <= info_labels
    # the other two rules read the same families, under the labels the slice health verdict has
    for name in ("RuntimeKitSliceComputeOverShare", "RuntimeKitSliceUnhealthy"):
        for family, _ in re.findall(r"(runtimekit_[a-z_]+)(?:\{([^}]*)\})?", rules[name]):
            assert any(n == family for n, _ in series), (name, family)


def test_promtool_is_silent(tmp_path, require_tool):
    import asyncio

    promtool = require_tool("promtool")
    state_text = asyncio.run(_text())
    result = subprocess.run([promtool, "check", "metrics"], input=state_text, capture_output=True, timeout=30)
    assert (result.returncode, result.stdout, result.stderr) == (0, b"", b"")


async def _text() -> bytes:
    state = NodeState()
    state.publish_slices(SliceTable(slices=MappingProxyType({OVER.id: OVER}),
                                    devices=MappingProxyType({0: DeviceModeInfo(GpuRef(uuid_for(0), 0), "tdm")})))
    state.publish_snapshot(make_snapshot(), SamplerStats())
    return generate_latest(build_registry(state, {name: name == "slices" for name in COLLECTORS}))
