"""Two usage rows of one container on one GPU are merged into one series; an unavailable memory
reading in either (a driver that cannot tell per-process memory) adds nothing and breaks nothing."""

from __future__ import annotations

from runtimekit.exporter.collectors.pod import PodCollector
from runtimekit.gpu.types import NOT_SUPPORTED
from runtimekit.state import NodeState
from tests.exporter.exporter_factories import GiB, make_attribution, make_pod_usage, value


def collect(*pods):
    state = NodeState()
    state.publish_attribution(make_attribution(pods=pods))
    return list(PodCollector().collect(state.view()))


def test_an_unavailable_memory_reading_is_skipped_when_merging() -> None:
    families = collect(make_pod_usage(used_memory_bytes=NOT_SUPPORTED), make_pod_usage(used_memory_bytes=2 * GiB))
    assert value(families, "runtimekit_pod_gpu_memory_used_bytes", gpu="0") == 2 * GiB
    assert value(families, "runtimekit_pod_gpu_processes", gpu="0") == 2


def test_merged_readings_add_up_and_two_unavailable_give_no_sample() -> None:
    families = collect(make_pod_usage(used_memory_bytes=1 * GiB), make_pod_usage(used_memory_bytes=2 * GiB))
    assert value(families, "runtimekit_pod_gpu_memory_used_bytes", gpu="0") == 3 * GiB
    families = collect(make_pod_usage(used_memory_bytes=NOT_SUPPORTED), make_pod_usage(used_memory_bytes=NOT_SUPPORTED))
    assert value(families, "runtimekit_pod_gpu_memory_used_bytes", gpu="0") is None
    assert value(families, "runtimekit_pod_gpu_utilization_ratio", gpu="0") == 1.0
