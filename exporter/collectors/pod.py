"""Pod level: what each container does on each GPU, and which GPUs the kubelet gave it.

Own families, never a device family repeated with pod labels (dcgm-exporter's anti-pattern, where
``sum()`` over the device metric double-counts). Usage comes from ``AttributionSnapshot.pods``
(summed over every process of the container on that GPU, the per-GPU process cap does not apply);
allocations from ``AttributionSnapshot.allocations`` (kubelet pod-resources ``List``), so a pod that
holds a GPU without running anything on it still shows: the "allocated but idle" case.

On a GPU in MIG mode a series names its MIG instance (``gpu_instance``, ``compute_instance``: NVML's
ids, "" on a whole GPU): usage per instance the container's processes run in, and a ``MIG-…``
device id attributed to its parent GPU and instance through the sampled MIG devices.
"""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client.core import Metric

from runtimekit.exporter.collectors._common import GPU_LABELS, CardCollector, add, gauge, nonempty, text
from runtimekit.exporter.collectors.attribution import OWNER_LABELS, owner_labels
from runtimekit.exporter.collectors.mig import MIG_INSTANCE_LABELS
from runtimekit.exporter.family import Family
from runtimekit.gpu.types import is_available
from runtimekit.state import NodeView

USAGE_LABELS = (*OWNER_LABELS, *GPU_LABELS, *MIG_INSTANCE_LABELS)
ALLOCATION_LABELS = (*OWNER_LABELS, "resource", "device_id", *GPU_LABELS, *MIG_INSTANCE_LABELS)


class PodCollector(CardCollector):
    def collect(self, view: NodeView) -> Iterable[Family | Metric]:
        attribution = view.attribution
        if attribution is None:
            return
        memory = gauge(
            "runtimekit_pod_gpu_memory_used_bytes",
            "GPU memory used by the container's processes on this GPU, in bytes (sum of NVML's per-process usedGpuMemory).",
            labels=USAGE_LABELS,
            unit="bytes",
        )
        utilization = gauge(
            "runtimekit_pod_gpu_utilization_ratio",
            "The container's share of the GPU's SM time, 0..1 (sum of its processes' nvmlDeviceGetProcessUtilization "
            "smUtil / 100 over the last second; absent where NVML cannot tell, e.g. MIG).",
            labels=USAGE_LABELS,
        )
        processes = gauge(
            "runtimekit_pod_gpu_processes",
            "Processes the container has on this GPU (compute and graphics contexts).",
            labels=USAGE_LABELS,
        )
        # Two rows can share one label set (e.g. a container restarted while a process of the old
        # instance lingers: same names, other container id): merge them, never emit a duplicate series.
        merged: dict[tuple[str, ...], list] = {}
        for usage in attribution.pods:
            key = (*owner_labels(usage.owner), str(usage.gpu_index), text(usage.gpu_uuid),
                   text(usage.gpu_instance_id), text(usage.compute_instance_id))
            sm = usage.sm_utilization if is_available(usage.sm_utilization) else None
            used = usage.used_memory_bytes if is_available(usage.used_memory_bytes) else None
            if key not in merged:
                merged[key] = [used, sm, usage.processes]
                continue
            row = merged[key]  # an unavailable reading adds nothing; both unavailable: no sample
            row[0] = used if row[0] is None else (row[0] if used is None else row[0] + used)
            row[1] = sm if row[1] is None else (row[1] if sm is None else min(1.0, row[1] + sm))
            row[2] += usage.processes
        for key, (used, sm, count) in merged.items():
            add(memory, key, used)
            add(utilization, key, sm)
            add(processes, key, count)

        allocated = gauge(
            "runtimekit_pod_gpu_allocated",
            "1 for every device the kubelet allocated to the container (pod-resources List). device_id is what the "
            "device plugin advertised (GPU UUID, MIG device UUID or a shared replica GPU-...::N); gpu and uuid name "
            "the physical GPU (a MIG device's parent), \"\" when it is not known (a GPU not on this node's snapshot, "
            "a MIG device not sampled); gpu_instance and compute_instance name a MIG device's instance.",
            labels=ALLOCATION_LABELS,
        )
        seen: set[tuple[str, ...]] = set()
        for allocation in attribution.allocations:
            gpu = "" if allocation.gpu_index is None else str(allocation.gpu_index)
            mig = allocation.mig
            instance = (str(mig.gpu_instance_id), str(mig.compute_instance_id)) if mig is not None else ("", "")
            key = (*owner_labels(allocation.owner), allocation.resource_name, allocation.device_id, gpu,
                   text(allocation.gpu_uuid), *instance)
            if key not in seen:
                seen.add(key)
                allocated.add_metric(list(key), 1.0)
        yield from nonempty(memory, utilization, processes, allocated)
