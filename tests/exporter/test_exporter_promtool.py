"""A full exposition passes `promtool check metrics` silently, and OpenMetrics output parses."""

from __future__ import annotations

import subprocess

from exporter_factories import make_gpu, make_lost_gpu, make_snapshot, make_state, uuid_for
from prometheus_client import generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics
from prometheus_client.openmetrics.parser import text_string_to_metric_families

from runtimekit.exporter.registry import build_registry
from runtimekit.gpu.types import NOT_SUPPORTED, RetiredPages, Thermal


def full_state():
    pre_ampere = make_gpu(2, retired_pages=RetiredPages(single_bit_ecc=1, double_bit_ecc=0, pending=True))
    pcie_card = make_gpu(4, thermal=Thermal(gpu_celsius=55.0, memory_celsius=NOT_SUPPORTED, fan_speed_ratio=0.42))
    gpus = (make_gpu(0), make_gpu(1, link_count=18), pre_ampere, make_lost_gpu(3), pcie_card)
    return make_state(make_snapshot(gpus), xids={(0, uuid_for(0), 48): 1, (3, uuid_for(3), 79): 2})


def test_promtool_check_metrics_is_silent(require_tool):
    registry = build_registry(full_state(), timer=lambda: 0.0)
    text = generate_latest(registry)
    # Every family the exporter documents is present in this full exposition.
    for family in ("runtimekit_gpu_retired_pages", "runtimekit_gpu_xid_errors_total", "runtimekit_gpu_nvlink_errors_total",
                   "runtimekit_collector_success", "runtimekit_gpu_lost", "runtimekit_build_info"):
        assert f"# TYPE {family} ".encode() in text
    result = subprocess.run([require_tool("promtool"), "check", "metrics"], input=text, capture_output=True, timeout=30)
    assert (result.returncode, result.stdout, result.stderr) == (0, b"", b"")


def test_openmetrics_exposition_parses():
    registry = build_registry(full_state(), timer=lambda: 0.0)
    families = {f.name: f for f in text_string_to_metric_families(generate_openmetrics(registry).decode())}
    assert families["runtimekit_gpu"].type == "info"
    assert families["runtimekit_gpu_energy_joules"].type == "counter"
    assert families["runtimekit_gpu_memory_used_bytes"].unit == "bytes"


def test_no_hostname_labels_anywhere():
    registry = build_registry(full_state(), timer=lambda: 0.0)
    for family in registry.collect():
        for sample in family.samples:
            assert not {"hostname", "host", "instance", "node"} & set(sample.labels)
