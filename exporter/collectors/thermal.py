"""Temperatures, thermal thresholds and fan speed.

GPU temperature: nvmlDeviceGetTemperature(NVML_TEMPERATURE_GPU); HBM: NVML_FI_DEV_MEMORY_TEMP;
thresholds: nvmlDeviceGetTemperatureThreshold; fan: nvmlDeviceGetFanSpeed (% -> 0..1).
"""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client.core import Metric

from runtimekit.exporter.collectors._common import GPU_LABELS, CardCollector, add, gauge, gpu_labels, live_gpus, nonempty
from runtimekit.exporter.family import Family
from runtimekit.state import NodeView


class ThermalCollector(CardCollector):
    def collect(self, view: NodeView) -> Iterable[Family | Metric]:
        temp = gauge("runtimekit_gpu_temperature_celsius", "GPU die temperature in degrees Celsius.", unit="celsius")
        mem_temp = gauge("runtimekit_gpu_memory_temperature_celsius", "HBM temperature in degrees Celsius.", unit="celsius")
        threshold = gauge(
            "runtimekit_gpu_temperature_threshold_celsius",
            "Thermal thresholds in degrees Celsius: slowdown, shutdown, gpu_max and memory_max (maximum operating temperatures).",
            labels=(*GPU_LABELS, "threshold"),
            unit="celsius",
        )
        fan = gauge("runtimekit_gpu_fan_speed_ratio", "Fan speed as a fraction of its maximum (0..1); absent on passively cooled boards.", unit="ratio")
        for gpu in live_gpus(view):
            labels = gpu_labels(gpu)
            limits = gpu.limits
            add(threshold, [*labels, "slowdown"], limits.temperature_slowdown_celsius)
            add(threshold, [*labels, "shutdown"], limits.temperature_shutdown_celsius)
            add(threshold, [*labels, "gpu_max"], limits.temperature_gpu_max_celsius)
            add(threshold, [*labels, "memory_max"], limits.temperature_memory_max_celsius)
            t = gpu.thermal
            if t is None:
                continue
            add(temp, labels, t.gpu_celsius)
            add(mem_temp, labels, t.memory_celsius)
            add(fan, labels, t.fan_speed_ratio)
        yield from nonempty(temp, mem_temp, threshold, fan)
