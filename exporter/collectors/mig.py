"""MIG devices: one identity series per MIG device, memory and compute slices per GPU instance.

From ``GpuSnapshot.mig_devices`` (``runtimekit.gpu.mig_devices``: nvmlDeviceGetMigDeviceHandleByIndex
on each GPU in MIG mode). A MIG device is a compute instance inside a GPU instance; its series
carry the parent's ``gpu`` and ``uuid`` and the instance ids ``gpu_instance`` and
``compute_instance`` (NVML's), the labels the process and pod series name their MIG instance with,
so ``on (uuid, gpu_instance, compute_instance)`` joins them. Memory belongs to the GPU instance
(its compute instances share it): one series per GPU instance, so that sums do not count it twice.
No utilization series: NVML cannot attribute utilization to a MIG device (MIG User Guide), and a
missing reading is never exported as 0. MIG mode itself is the ``modes`` collector's
``runtimekit_gpu_mig_mode``.
"""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client.core import InfoMetricFamily, Metric

from runtimekit.exporter.collectors._common import GPU_LABELS, SAMPLED, CardCollector, add, gauge, gpu_labels, live_gpus, nonempty, text
from runtimekit.exporter.family import Family
from runtimekit.state import NodeView

# How every family names a MIG instance: NVML's GPU and compute instance ids ("" on a whole GPU).
MIG_INSTANCE_LABELS: tuple[str, ...] = ("gpu_instance", "compute_instance")
GPU_INSTANCE_LABELS = (*GPU_LABELS, "gpu_instance")


class MigCollector(CardCollector):
    def collect(self, view: NodeView) -> Iterable[Family | Metric]:
        info = InfoMetricFamily(
            "runtimekit_gpu_mig_device",
            "Identity of each MIG device: its MIG-... UUID (nvmlDeviceGetUUID on the MIG handle) and its GPU "
            f"instance's profile name (nvmlDeviceGetGpuInstanceProfileInfoByIdV); the value is always 1. {SAMPLED}",
            labels=[*GPU_LABELS, *MIG_INSTANCE_LABELS],
        )
        devices = gauge(
            "runtimekit_gpu_mig_devices",
            "MIG devices (compute instances) of a GPU in MIG mode; 0 when it has none.",
        )
        used = gauge(
            "runtimekit_gpu_mig_memory_used_bytes",
            "Memory used in the GPU instance, in bytes (nvmlDeviceGetMemoryInfo on its MIG device).",
            labels=GPU_INSTANCE_LABELS,
            unit="bytes",
        )
        total = gauge(
            "runtimekit_gpu_mig_memory_total_bytes",
            "Memory of the GPU instance, in bytes (nvmlDeviceGetMemoryInfo on its MIG device).",
            labels=GPU_INSTANCE_LABELS,
            unit="bytes",
        )
        slices = gauge(
            "runtimekit_gpu_mig_compute_slices",
            "Compute slices of the GPU instance's profile (sliceCount; 7 make a whole A100, H100 or H200).",
            labels=GPU_INSTANCE_LABELS,
        )
        for gpu in live_gpus(view):
            if not gpu.mig_enabled:
                continue
            labels = gpu_labels(gpu)
            devices.add_metric(labels, float(len(gpu.mig_devices)))
            seen: set[int] = set()
            for device in gpu.mig_devices:
                instance = (str(device.gpu_instance_id), str(device.compute_instance_id))
                info.add_metric([*labels, *instance], {"mig_uuid": device.uuid, "profile": text(device.profile)})
                if device.gpu_instance_id in seen:
                    continue  # the GPU instance's memory and slices, once
                seen.add(device.gpu_instance_id)
                per_instance = (*labels, instance[0])
                add(used, per_instance, device.memory_used_bytes)
                add(total, per_instance, device.memory_total_bytes)
                add(slices, per_instance, device.compute_slices)
        yield from nonempty(info, devices, used, total, slices)
