"""Power draw and limit (nvmlDeviceGetPowerUsage / GetEnforcedPowerLimit, mW -> W) and energy
(nvmlDeviceGetTotalEnergyConsumption, mJ -> J, a counter since driver load)."""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client.core import Metric

from runtimekit.exporter.collectors._common import CardCollector, add, counter, gauge, gpu_labels, live_gpus, nonempty
from runtimekit.exporter.family import Family
from runtimekit.state import NodeView


class PowerCollector(CardCollector):
    def collect(self, view: NodeView) -> Iterable[Family | Metric]:
        draw = gauge("runtimekit_gpu_power_draw_watts", "Power draw in watts (NVML's averaged reading; prefer rate(runtimekit_gpu_energy_joules_total)).", unit="watts")
        limit = gauge("runtimekit_gpu_power_limit_watts", "Enforced power limit in watts.", unit="watts")
        energy = counter("runtimekit_gpu_energy_joules_total", "Energy consumed since the driver was loaded, in joules (resets on driver reload).", unit="joules")
        for gpu in live_gpus(view):
            p = gpu.power
            if p is None:
                continue
            labels = gpu_labels(gpu)
            add(draw, labels, p.draw_watts)
            add(limit, labels, p.limit_watts)
            add(energy, labels, p.energy_joules)
        yield from nonempty(draw, limit, energy)
