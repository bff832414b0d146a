"""The agent's own health: NVML up, sampler cadence and failures, the last sample's time, build info."""

from __future__ import annotations

import platform
from collections.abc import Iterable

from prometheus_client.core import InfoMetricFamily, Metric

import runtimekit
from runtimekit.exporter.collectors._common import CardCollector, counter, gauge, gpu_labels, live_gpus, nonempty
from runtimekit.exporter.family import Family
from runtimekit.state import NodeView


class SelfCollector(CardCollector):
    """Always yields ``runtimekit_nvml_up`` (0 until the first snapshot with NVML initialised)."""

    def __init__(self, *, version: str = runtimekit.__version__, python_version: str | None = None) -> None:
        self._build = {"version": version, "python_version": python_version or platform.python_version()}

    def collect(self, view: NodeView) -> Iterable[Family | Metric]:
        snapshot = view.snapshot
        stats = view.sampler
        up = gauge("runtimekit_nvml_up", "1 when the last sampling cycle could initialise NVML, else 0 (0 until the first cycle).", labels=())
        up.add_metric([], 1.0 if snapshot is not None and snapshot.nvml_up else 0.0)
        build = InfoMetricFamily("runtimekit_build", "Version of the agent and of the Python running it; the value is always 1.", labels=[])
        build.add_metric([], self._build)
        samples = counter("runtimekit_samples_total", "Sampling cycles completed since the agent started.", labels=())
        samples.add_metric([], float(stats.cycles_total))
        failures = counter("runtimekit_sample_failures_total", "Sampling cycles in which NVML could not be used at all.", labels=())
        failures.add_metric([], float(stats.failures_total))
        yield from (up, build, samples, failures)

        if snapshot is None:
            return
        last = gauge(
            "runtimekit_last_sample_timestamp_seconds",
            "Unix time at which the last sampling cycle started (NodeSnapshot.sampled_at). A timestamp, not an "
            "age: time() - this is the samples' staleness whatever exposition is served.",
            labels=(),
            unit="seconds",
        )
        last.add_metric([], snapshot.sampled_at)
        duration = gauge("runtimekit_sample_duration_seconds", "Wall time the last sampling cycle took, in seconds.", labels=(), unit="seconds")
        duration.add_metric([], float(stats.last_duration_seconds))
        cpu = gauge("runtimekit_sample_cpu_seconds", "CPU time the last sampling cycle spent, in seconds.", labels=(), unit="seconds")
        cpu.add_metric([], float(stats.last_cpu_seconds))
        gpus = gauge("runtimekit_gpus", "GPUs NVML reports on this node (nvmlDeviceGetCount).", labels=())
        if snapshot.nvml_up:
            gpus.add_metric([], float(snapshot.device_count))
        reading_errors = gauge(
            "runtimekit_gpu_reading_errors",
            "Readings of the last cycle that NVML answered with an error (GpuSnapshot.errors; names and errors are in the logs).",
        )
        for gpu in live_gpus(view):
            reading_errors.add_metric(gpu_labels(gpu), float(len(gpu.errors)))
        yield from nonempty(last, duration, cpu, gpus, reading_errors)
