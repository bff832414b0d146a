"""Busy ratios (nvmlDeviceGetUtilizationRates, nvmlDeviceGetEncoder/DecoderUtilization; % -> 0..1)."""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client.core import Metric

from runtimekit.exporter.collectors._common import CardCollector, add, gauge, gpu_labels, live_gpus, nonempty
from runtimekit.exporter.family import Family
from runtimekit.state import NodeView


class UtilizationCollector(CardCollector):
    def collect(self, view: NodeView) -> Iterable[Family | Metric]:
        gpu_f = gauge("runtimekit_gpu_utilization_ratio", "Fraction of NVML's sample period during which a kernel ran (0..1).", unit="ratio")
        mem_f = gauge("runtimekit_gpu_memory_utilization_ratio", "Fraction of NVML's sample period during which device memory was read or written (0..1).", unit="ratio")
        enc_f = gauge("runtimekit_gpu_encoder_utilization_ratio", "Video encoder busy ratio (0..1).", unit="ratio")
        dec_f = gauge("runtimekit_gpu_decoder_utilization_ratio", "Video decoder busy ratio (0..1).", unit="ratio")
        for gpu in live_gpus(view):
            u = gpu.utilization
            if u is None:
                continue
            labels = gpu_labels(gpu)
            add(gpu_f, labels, u.gpu)
            add(mem_f, labels, u.memory)
            add(enc_f, labels, u.encoder)
            add(dec_f, labels, u.decoder)
        yield from nonempty(gpu_f, mem_f, enc_f, dec_f)
