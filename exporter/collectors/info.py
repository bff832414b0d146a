"""GPU identity (``runtimekit_gpu_info``) and loss (``runtimekit_gpu_lost``)."""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client.core import InfoMetricFamily, Metric

from runtimekit.exporter.collectors._common import GPU_LABELS, SAMPLED, CardCollector, all_gpus, gauge, gpu_labels, nonempty, text
from runtimekit.exporter.family import Family
from runtimekit.state import NodeView


class InfoCollector(CardCollector):
    """One ``runtimekit_gpu_info`` per GPU (lost ones included) and ``runtimekit_gpu_lost`` 0/1.

    Identity comes from nvmlDeviceGetName/PciInfo/Serial/VbiosVersion/Architecture/
    CudaComputeCapability, read once at discovery; driver versions from nvmlSystemGetDriverVersion
    and nvmlSystemGetCudaDriverVersion. An unavailable value is exported as "" (same as absent).
    """

    def collect(self, view: NodeView) -> Iterable[Family | Metric]:
        snapshot = view.snapshot
        if snapshot is None:
            return
        driver = snapshot.driver
        driver_version = text(driver.driver_version) if driver else ""
        cuda_version = text(driver.cuda_driver_version) if driver else ""
        info = InfoMetricFamily(
            "runtimekit_gpu",
            f"Identity of each GPU; the value is always 1. {SAMPLED}",
            labels=list(GPU_LABELS),
        )
        lost = gauge("runtimekit_gpu_lost", "1 when NVML reported the GPU lost (GPU_IS_LOST); its readings are then absent.")
        for gpu in all_gpus(view):
            ident = gpu.identity
            info.add_metric(
                gpu_labels(gpu),
                {
                    "name": text(ident.name),
                    "pci_bus_id": text(ident.pci_bus_id),
                    "serial": text(ident.serial),
                    "vbios_version": text(ident.vbios_version),
                    "driver_version": driver_version,
                    "cuda_driver_version": cuda_version,
                    "architecture": text(ident.architecture),
                    "compute_capability": text(ident.cuda_compute_capability),
                },
            )
            lost.add_metric(gpu_labels(gpu), 1.0 if gpu.lost else 0.0)
        yield from nonempty(info, lost)
