"""Slices and the cards' slicing modes: quota against use, and health per slice.

Identity and quotas come from the slices topic (``NodeView.slices``, the slicer's ``SliceTable``);
use and health from the health checker's verdict (``NodeHealth.slices``: it measures each slice's
processes once, healthcheck/slices.py). Every family is keyed by ``slice`` (its id) with the card's
``gpu`` and ``uuid``; identity lives only in ``runtimekit_slice_info``. Quotas and use are in base
units: bytes, and ratios 0..1 of the card (a compute share of 30 % is 0.3; the style's rule: no
percent units). A slice with compute 0 (unlimited) has no compute-quota sample, and a use that
cannot be measured (a TDM slice of a free owner; SM time inside a MIG instance) has none either,
never a made-up 0. Health states are one series per state, 1 for the current one, as for GPUs
(``runtimekit_gpu_health``); active faults carry the fault policy's action and class.
"""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client.core import Metric

from runtimekit.exporter.collectors._common import GPU_LABELS, CardCollector, add, gauge, nonempty, policy_labels, unique_faults
from runtimekit.exporter.family import Family
from runtimekit.state import NodeView
from runtimekit.state.health import STATES
from runtimekit.state.slices import SLICE_MODES

MIB = 1 << 20
SLICE_LABELS = ("slice", *GPU_LABELS)
INFO_LABELS = (*SLICE_LABELS, "mode", "gpu_instance", "profile", "cdi_device", "pod_uid", "container", "owner_id")
FAULT_LABELS = (*SLICE_LABELS, "fault", "severity", "action", "class")
MODE_LABELS = (*GPU_LABELS, "mode")


class SlicesCollector(CardCollector):
    def collect(self, view: NodeView) -> Iterable[Family | Metric]:
        info = gauge("runtimekit_slice_info", "1 for every slice the slicer holds, with its mode, card, MIG instance, "
                     "profile, CDI device name and owner (a pod's uid and container, or a free owner id).",
                     labels=INFO_LABELS)
        compute = gauge("runtimekit_slice_compute_quota_ratio", "The slice's compute share of its card, 0..1 "
                        "(absent for an unlimited slice).", labels=SLICE_LABELS)
        memory = gauge("runtimekit_slice_memory_quota_bytes", "The slice's memory quota in bytes.",
                       labels=SLICE_LABELS, unit="bytes")
        used = gauge("runtimekit_slice_memory_used_bytes", "GPU memory the slice's processes hold, in bytes (MIG: "
                     "processes in its GPU instance; TDM: its pod owner's processes on the card).",
                     labels=SLICE_LABELS, unit="bytes")
        utilization = gauge("runtimekit_slice_utilization_ratio", "The slice's processes' share of the card's SM "
                            "time, 0..1 (absent where NVML cannot tell, e.g. MIG).", labels=SLICE_LABELS)
        health = gauge("runtimekit_slice_health", "1 for the slice's health state (healthy, suspect, unhealthy, "
                       "recovering; never better than its card's), 0 for the others.", labels=(*SLICE_LABELS, "state"))
        active = gauge("runtimekit_slice_fault_active", "1 while the health checker holds the fault on the slice "
                       "(its MIG instance's faults and its isolation findings); action and class are the fault "
                       "policy's.", labels=FAULT_LABELS)
        mode = gauge("runtimekit_device_mode", "1 for the card's slicing mode (tdm or mig), 0 for the other.",
                     labels=MODE_LABELS)
        pending = gauge("runtimekit_device_mode_pending", "1 for the mode a pending change takes the card to at its next "
                        "GPU reset (a MIG mode change waits for one), 0 for the other; every mode 0 while no change is "
                        "pending (the card stays in its runtimekit_device_mode).", labels=MODE_LABELS)

        table = view.slices
        for slice_id, s in sorted(table.slices.items()):
            labels = (slice_id, str(s.gpu.index), s.gpu.uuid)
            owner = s.spec.owner
            instance = "" if s.mig is None else str(s.mig.gpu_instance_id)
            info.add_metric([*labels, s.spec.mode, instance, s.profile, s.cdi_device, owner.pod_uid, owner.container,
                             owner.owner_id], 1.0)
            add(compute, labels, s.compute / 100 if s.compute > 0 else None)
            add(memory, labels, s.memory_mib * MIB)
        verdict = view.health
        for sh in verdict.slices if verdict is not None else ():
            labels = (sh.id, str(sh.gpu_index), sh.gpu_uuid)
            add(used, labels, sh.memory_used_bytes)
            add(utilization, labels, sh.utilization)
            for state in STATES:
                health.add_metric([*labels, state], 1.0 if state == sh.state else 0.0)
            for held in unique_faults(sh.faults):
                active.add_metric([*labels, *policy_labels(held)], 1.0)
        for index, device in sorted(table.devices.items()):
            card = (str(index), device.gpu.uuid)
            for name in SLICE_MODES:
                mode.add_metric([*card, name], 1.0 if name == device.mode else 0.0)
                pending.add_metric([*card, name], 1.0 if name == device.pending else 0.0)
        yield from nonempty(info, compute, memory, used, utilization, health, active, mode, pending)
