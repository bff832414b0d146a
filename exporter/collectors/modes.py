"""Compute mode (nvmlDeviceGetComputeMode), persistence mode (nvmlDeviceGetPersistenceMode) and MIG
mode (nvmlDeviceGetMigMode, current and pending).

Compute mode is exported the Prometheus way for enums: one series per mode, 1 for the current one
and 0 for the others. ``runtimekit_gpu_compute_mode{mode="exclusive_process"} == 1`` reads plainly,
needs no lookup table of magic numbers, and the label set is small and fixed.
"""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client.core import Metric

from runtimekit.exporter.collectors._common import GPU_LABELS, CardCollector, add, gauge, gpu_labels, live_gpus, nonempty
from runtimekit.exporter.family import Family
from runtimekit.gpu.types import is_available
from runtimekit.state import NodeView

COMPUTE_MODES: tuple[str, ...] = ("default", "exclusive_thread", "prohibited", "exclusive_process")


class ModesCollector(CardCollector):
    def collect(self, view: NodeView) -> Iterable[Family | Metric]:
        compute = gauge(
            "runtimekit_gpu_compute_mode",
            "1 for the GPU's current compute mode, 0 for the others.",
            labels=(*GPU_LABELS, "mode"),
        )
        persistence = gauge("runtimekit_gpu_persistence_mode", "1 when persistence mode is enabled, else 0.")
        mig = gauge(
            "runtimekit_gpu_mig_mode",
            "1 when MIG mode is enabled, by state (current; pending: takes effect after a GPU reset).",
            labels=(*GPU_LABELS, "state"),
        )
        for gpu in live_gpus(view):
            m = gpu.modes
            if m is None:
                continue
            labels = gpu_labels(gpu)
            if is_available(m.compute_mode):
                current = str(m.compute_mode)
                modes = COMPUTE_MODES if current in COMPUTE_MODES else (*COMPUTE_MODES, current)
                for mode in modes:
                    compute.add_metric([*labels, mode], 1.0 if mode == current else 0.0)
            add(persistence, labels, m.persistence_mode)
            add(mig, [*labels, "current"], m.mig_mode_current)
            add(mig, [*labels, "pending"], m.mig_mode_pending)
        yield from nonempty(compute, persistence, mig)
