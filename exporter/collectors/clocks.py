"""Clocks (nvmlDeviceGetClockInfo / GetMaxClockInfo, MHz -> Hz), clock event ("throttle") reasons
(nvmlDeviceGetCurrentClocksEventReasons bitmask) and the performance state (nvmlDeviceGetPerformanceState)."""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client.core import Metric

from runtimekit.exporter.collectors._common import GPU_LABELS, CardCollector, add, gauge, gpu_labels, live_gpus, nonempty
from runtimekit.exporter.family import Family
from runtimekit.gpu.types import is_available
from runtimekit.state import NodeView

# nvmlClocksEventReason* bits, one series per reason (a stable, bounded label set).
CLOCK_EVENT_REASONS: tuple[tuple[str, int], ...] = (
    ("gpu_idle", 0x1),  # nothing is running; clocks dropped
    ("applications_clocks_setting", 0x2),  # clocks held by the application clocks setting
    ("sw_power_cap", 0x4),  # software power capping (power limit reached)
    ("hw_slowdown", 0x8),  # hardware slowdown (thermal, power brake or external signal)
    ("sync_boost", 0x10),  # clocks synchronised with other GPUs in a sync-boost group
    ("sw_thermal_slowdown", 0x20),  # software thermal slowdown
    ("hw_thermal_slowdown", 0x40),  # hardware thermal slowdown
    ("hw_power_brake_slowdown", 0x80),  # external power brake assertion
    ("display_clock_setting", 0x100),  # clocks held by the display clock setting
)


class ClocksCollector(CardCollector):
    def collect(self, view: NodeView) -> Iterable[Family | Metric]:
        clock_labels = (*GPU_LABELS, "clock")
        current = gauge("runtimekit_gpu_clock_hertz", "Current clock frequency in hertz, by clock domain (sm, memory, graphics).", labels=clock_labels, unit="hertz")
        maximum = gauge("runtimekit_gpu_clock_max_hertz", "Maximum clock frequency in hertz, by clock domain.", labels=clock_labels, unit="hertz")
        event = gauge(
            "runtimekit_gpu_clock_event_active",
            "1 while the clock event (throttle) reason is active, else 0 (nvmlClocksEventReason bits).",
            labels=(*GPU_LABELS, "reason"),
        )
        pstate = gauge("runtimekit_gpu_performance_state", "Performance state: 0 (maximum) to 15 (minimum).")
        for gpu in live_gpus(view):
            labels = gpu_labels(gpu)
            limits = gpu.limits
            add(maximum, [*labels, "sm"], limits.sm_clock_max_hertz)
            add(maximum, [*labels, "memory"], limits.memory_clock_max_hertz)
            add(maximum, [*labels, "graphics"], limits.graphics_clock_max_hertz)
            c = gpu.clocks
            if c is None:
                continue
            add(current, [*labels, "sm"], c.sm_hertz)
            add(current, [*labels, "memory"], c.memory_hertz)
            add(current, [*labels, "graphics"], c.graphics_hertz)
            if is_available(c.event_reasons):
                mask = int(c.event_reasons)
                for reason, bit in CLOCK_EVENT_REASONS:
                    event.add_metric([*labels, reason], 1.0 if mask & bit else 0.0)
            add(pstate, labels, c.performance_state)
        yield from nonempty(current, maximum, event, pstate)
