"""Framebuffer and BAR1 memory in bytes (nvmlDeviceGetMemoryInfo_v2, nvmlDeviceGetBAR1MemoryInfo)."""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client.core import Metric

from runtimekit.exporter.collectors._common import CardCollector, add, gauge, gpu_labels, live_gpus, nonempty
from runtimekit.exporter.family import Family
from runtimekit.state import NodeView


class MemoryCollector(CardCollector):
    def collect(self, view: NodeView) -> Iterable[Family | Metric]:
        used = gauge("runtimekit_gpu_memory_used_bytes", "Framebuffer memory allocated by processes, in bytes.", unit="bytes")
        free = gauge("runtimekit_gpu_memory_free_bytes", "Framebuffer memory free, in bytes.", unit="bytes")
        total = gauge("runtimekit_gpu_memory_total_bytes", "Framebuffer memory installed, in bytes.", unit="bytes")
        reserved = gauge("runtimekit_gpu_memory_reserved_bytes", "Framebuffer memory held by the driver and firmware, in bytes.", unit="bytes")
        bar1_used = gauge("runtimekit_gpu_bar1_used_bytes", "BAR1 (host-mapped) memory in use, in bytes.", unit="bytes")
        bar1_free = gauge("runtimekit_gpu_bar1_free_bytes", "BAR1 (host-mapped) memory free, in bytes.", unit="bytes")
        bar1_total = gauge("runtimekit_gpu_bar1_total_bytes", "BAR1 (host-mapped) memory size, in bytes.", unit="bytes")
        for gpu in live_gpus(view):
            labels = gpu_labels(gpu)
            m = gpu.memory
            # Totals fall back to the value read at discovery when this cycle could not read them.
            add(total, labels, gpu.memory_total_bytes)
            add(bar1_total, labels, gpu.bar1_total_bytes)
            if m is None:
                continue
            add(used, labels, m.used_bytes)
            add(free, labels, m.free_bytes)
            add(reserved, labels, m.reserved_bytes)
            add(bar1_used, labels, m.bar1_used_bytes)
            add(bar1_free, labels, m.bar1_free_bytes)
        yield from nonempty(used, free, total, reserved, bar1_used, bar1_free, bar1_total)
