"""Memory repair: retired pages (pre-Ampere, nvmlDeviceGetRetiredPages / GetRetiredPagesPendingStatus)
and row remapping (Ampere and later, nvmlDeviceGetRemappedRows). Absent where unsupported."""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client.core import Metric

from runtimekit.exporter.collectors._common import GPU_LABELS, CardCollector, add, gauge, gpu_labels, live_gpus, nonempty
from runtimekit.exporter.family import Family
from runtimekit.state import NodeView


class RemapCollector(CardCollector):
    def collect(self, view: NodeView) -> Iterable[Family | Metric]:
        retired = gauge(
            "runtimekit_gpu_retired_pages",
            "Framebuffer pages retired, by cause (single_bit_ecc, double_bit_ecc).",
            labels=(*GPU_LABELS, "cause"),
        )
        retired_pending = gauge("runtimekit_gpu_retired_pages_pending", "1 when a page retirement waits for the next driver reload.")
        rows = gauge(
            "runtimekit_gpu_remapped_rows",
            "Memory rows remapped, by the error type that caused it (correctable, uncorrectable).",
            labels=(*GPU_LABELS, "type"),
        )
        rows_pending = gauge("runtimekit_gpu_remapped_rows_pending", "1 when a row remap waits for a GPU reset to take effect.")
        rows_failure = gauge("runtimekit_gpu_remapped_rows_failure", "1 when a row remap has failed (the GPU needs service).")
        for gpu in live_gpus(view):
            labels = gpu_labels(gpu)
            rp = gpu.retired_pages
            if rp is not None:
                add(retired, [*labels, "single_bit_ecc"], rp.single_bit_ecc)
                add(retired, [*labels, "double_bit_ecc"], rp.double_bit_ecc)
                add(retired_pending, labels, rp.pending)
            rr = gpu.remapped_rows
            if rr is not None:
                add(rows, [*labels, "correctable"], rr.correctable)
                add(rows, [*labels, "uncorrectable"], rr.uncorrectable)
                add(rows_pending, labels, rr.pending)
                add(rows_failure, labels, rr.failure)
        yield from nonempty(retired, retired_pending, rows, rows_pending, rows_failure)
