"""ECC mode (nvmlDeviceGetEccMode) and error counts (nvmlDeviceGetTotalEccErrors).

``runtimekit_gpu_ecc_errors`` is a *gauge*, on purpose: it mirrors counts NVML keeps, not events
we count. The ``counter`` label carries two overlapping views of the same errors ("volatile" since
driver load, which resets on driver reload; "aggregate" for the board's life, kept in the InfoROM,
updated lazily and clearable by an operator), so summing over it double-counts, and neither is a
clean monotonic counter of ours. Alert on ``> 0`` or on ``delta(...[1h]) > 0``.
"""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client.core import Metric

from runtimekit.exporter.collectors._common import GPU_LABELS, CardCollector, add, gauge, gpu_labels, live_gpus, nonempty
from runtimekit.exporter.family import Family
from runtimekit.state import NodeView


class EccCollector(CardCollector):
    def collect(self, view: NodeView) -> Iterable[Family | Metric]:
        enabled = gauge("runtimekit_gpu_ecc_enabled", "1 when ECC is enabled (current mode), else 0.")
        errors = gauge(
            "runtimekit_gpu_ecc_errors",
            "ECC error counts as NVML keeps them, by type (corrected, uncorrected) and counter "
            "(volatile: since driver load; aggregate: board lifetime). Do not sum over counter.",
            labels=(*GPU_LABELS, "type", "counter"),
        )
        for gpu in live_gpus(view):
            e = gpu.ecc
            if e is None:
                continue
            labels = gpu_labels(gpu)
            add(enabled, labels, e.enabled)
            add(errors, [*labels, "corrected", "volatile"], e.corrected_volatile)
            add(errors, [*labels, "uncorrected", "volatile"], e.uncorrected_volatile)
            add(errors, [*labels, "corrected", "aggregate"], e.corrected_aggregate)
            add(errors, [*labels, "uncorrected", "aggregate"], e.uncorrected_aggregate)
        yield from nonempty(enabled, errors)
