"""MIG devices: one identity series per MIG device, memory and compute slices per GPU instance.

From ``GpuSnapshot.mig_devices`` (``runtimekit.gpu.mig_devices``: nvmlDeviceGetMigDeviceHandleByIndex
on each GPU in MIG mode). A MIG device is a compute instance inside a GPU instance; its series
carry the parent's ``gpu`` and ``uuid`` and the instance ids ``gpu_instance`` and
``compute_instance`` (NVML's), the labels the process and pod series name their MIG instance with,
so ``on (uuid, gpu_instance, compute_instance)`` joins them. Memory belongs to the GPU instance
(its compute instances share it): one series per GPU instance, so that sums do not count it twice,
from the first of its devices that has the reading. The device count is absent when NVML could not
list the devices this cycle (the ``mig_devices`` listing error of ``GpuSnapshot.errors``), never 0.
No utilization series: NVML cannot attribute utilization to a MIG device (MIG User Guide), and a
missing reading is never exported as 0. MIG mode itself is the ``modes`` collector's
``runtimekit_gpu_mig_mode``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from prometheus_client.core import InfoMetricFamily, Metric

from runtimekit.exporter.collectors._common import GPU_LABELS, SAMPLED, CardCollector, add, gauge, gpu_labels, live_gpus, nonempty, text
from runtimekit.exporter.family import Family
from runtimekit.gpu.types import GpuSnapshot, MigDevice, Reading, is_available
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
            "MIG devices (compute instances) of a GPU in MIG mode; 0 when it has none, absent when NVML could not list them.",
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
            if _listed(gpu):
                devices.add_metric(labels, float(len(gpu.mig_devices)))
            instances: dict[int, list[MigDevice]] = {}
            for device in gpu.mig_devices:
                instance = (str(device.gpu_instance_id), str(device.compute_instance_id))
                info.add_metric([*labels, *instance], {"mig_uuid": device.uuid, "profile": text(device.profile)})
                instances.setdefault(device.gpu_instance_id, []).append(device)
            for gpu_instance, members in instances.items():  # the GPU instance's memory and slices, once
                per_instance = (*labels, str(gpu_instance))
                add(used, per_instance, _first(d.memory_used_bytes for d in members))
                add(total, per_instance, _first(d.memory_total_bytes for d in members))
                add(slices, per_instance, _first(d.compute_slices for d in members))
        yield from nonempty(info, devices, used, total, slices)


def _listed(gpu: GpuSnapshot) -> bool:
    """False when the reader could not list the GPU's MIG devices (its ``mig_devices`` error in
    ``GpuSnapshot.errors``, runtimekit.gpu.reader): how many there are is then unknown."""
    return not any(name == "mig_devices" for name, _ in gpu.errors)


def _first(readings: Iterator[Reading[int]]) -> int | None:
    """The first available reading of a GPU instance's devices (they share the value); None when none is."""
    return next((reading for reading in readings if is_available(reading)), None)
