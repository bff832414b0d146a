"""Process level: each GPU process with its owner, from ``AttributionSnapshot.processes``.

Per (GPU, process): memory and busy ratios, NVML's view (nvmlDeviceGet{Compute,Graphics}
RunningProcesses usedGpuMemory; nvmlDeviceGetProcessUtilization sm/mem/enc/dec %, -> ratio). Per
process (once, however many GPUs it uses): CPU time and resident memory, the host's view (/proc).
The attributor caps the rows per GPU (the processes holding the most GPU memory are kept);
``runtimekit_processes_dropped_total`` counts what the cap left out. Pod totals are not capped:
they are the ``pod`` collector's families.

Command lines can carry secrets, so ``runtimekit_process_info{command}`` is off unless
``cmdline=True``; then every match of ``cmdline_redact`` is redacted and the result truncated to
``cmdline_max_length`` characters.
"""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client.core import InfoMetricFamily, Metric

from runtimekit.attribution.types import AttributedProcess
from runtimekit.exporter.collectors._common import (
    GPU_LABELS,
    SAMPLED,
    CardCollector,
    counter,
    gauge,
    live_gpus,
    nonempty,
    text,
)
from runtimekit.exporter.collectors.attribution import OWNER_LABELS, label_text, owner_labels
from runtimekit.exporter.collectors.cmdline import (  # noqa: F401 - REDACTED: re-exported
    DEFAULT_CMDLINE_MAX_LENGTH,
    DEFAULT_CMDLINE_REDACT,
    REDACTED,
    CommandRedactor,
)
from runtimekit.exporter.collectors.mig import MIG_INSTANCE_LABELS
from runtimekit.exporter.family import Family
from runtimekit.gpu.types import Unavailable
from runtimekit.state import NodeView

PROCESS_LABELS = ("pid", "process", *OWNER_LABELS)
# MIG ids are always in the label set, "" on a GPU without MIG: a family keeps one set of label
# names, and Prometheus stores a label whose value is "" exactly as if it were absent.
GPU_PROCESS_LABELS = (*GPU_LABELS, *MIG_INSTANCE_LABELS, *PROCESS_LABELS)

class ProcessCollector(CardCollector):
    def __init__(
        self,
        *,
        cmdline: bool = False,
        cmdline_redact: str = DEFAULT_CMDLINE_REDACT,
        cmdline_max_length: int = DEFAULT_CMDLINE_MAX_LENGTH,
    ) -> None:
        if not isinstance(cmdline, bool):
            raise ValueError(f"process collector: cmdline must be true or false, got {cmdline!r}")
        self._cmdline = cmdline
        self._redact = CommandRedactor(cmdline_redact, cmdline_max_length)  # validated even when off
        # Label values of the last render's rows, by what they are made of: the same tuples again
        # for a row whose GPU, process and owner did not change (no string building, and the
        # renderer finds their cached lines and unchanged families by cheap comparisons).
        self._labels: dict[tuple[object, ...], tuple[tuple[str, ...], tuple[str, ...]]] = {}

    def collect(self, view: NodeView) -> Iterable[Family | Metric]:
        attribution = view.attribution
        if attribution is None:
            return
        memory = gauge(
            "runtimekit_process_gpu_memory_bytes",
            "GPU memory the process uses on this GPU, in bytes (NVML usedGpuMemory).",
            labels=GPU_PROCESS_LABELS,
            unit="bytes",
        )
        ratios = {
            "sm_utilization": gauge(
                "runtimekit_process_gpu_sm_utilization_ratio",
                "The process's share of the GPU's SM time over the last second, 0..1 (nvmlDeviceGetProcessUtilization smUtil / 100).",
                labels=GPU_PROCESS_LABELS,
            ),
            "memory_utilization": gauge(
                "runtimekit_process_gpu_memory_utilization_ratio",
                "The process's share of the GPU's memory-controller time over the last second, 0..1 (nvmlDeviceGetProcessUtilization memUtil / 100).",
                labels=GPU_PROCESS_LABELS,
            ),
            "encoder_utilization": gauge(
                "runtimekit_process_gpu_encoder_utilization_ratio",
                "The process's share of the GPU's encoder time over the last second, 0..1 (nvmlDeviceGetProcessUtilization encUtil / 100).",
                labels=GPU_PROCESS_LABELS,
            ),
            "decoder_utilization": gauge(
                "runtimekit_process_gpu_decoder_utilization_ratio",
                "The process's share of the GPU's decoder time over the last second, 0..1 (nvmlDeviceGetProcessUtilization decUtil / 100).",
                labels=GPU_PROCESS_LABELS,
            ),
        }
        cpu = counter(
            "runtimekit_process_cpu_seconds_total",
            "CPU time (user + system) the GPU process has spent since it started, in seconds (/proc/PID/stat).",
            labels=PROCESS_LABELS,
            unit="seconds",
        )
        resident = gauge(
            "runtimekit_process_resident_memory_bytes",
            "Resident memory of the GPU process, in bytes (/proc/PID/statm).",
            labels=PROCESS_LABELS,
            unit="bytes",
        )
        info = InfoMetricFamily(
            "runtimekit_process",
            f"The GPU process's command line, redacted and truncated; the value is always 1. {SAMPLED}",
            labels=list(PROCESS_LABELS),
        )
        previous = self._labels
        memo: dict[tuple[object, ...], tuple[tuple[str, ...], tuple[str, ...]]] = {}
        seen_rows: set[tuple[int, int]] = set()
        seen_pids: set[int] = set()
        memory_rows, cpu_rows, resident_rows = memory.rows, cpu.rows, resident.rows
        ratio_rows = [family.rows for family in ratios.values()]
        for row in attribution.processes:
            # NVML lists a process with compute and graphics contexts ("C+G") twice: one series.
            if (row.gpu_index, row.pid) in seen_rows:
                continue
            seen_rows.add((row.gpu_index, row.pid))
            host = row.host
            # What the labels are made of, as plain values (hashed in C: Owner and Unavailable are
            # dataclasses whose __hash__ runs in Python). An Unavailable reading is "" in a label.
            uuid, gi, ci, owner = row.gpu_uuid, row.gpu_instance_id, row.compute_instance_id, row.owner
            identity = (row.gpu_index, row.pid, uuid if type(uuid) is str else "", gi if type(gi) is int else -1,
                        ci if type(ci) is int else -1, host.name if host is not None else None,
                        owner.namespace, owner.pod, owner.container)
            known = previous.get(identity)
            if known is None:
                process = _process_labels(row)
                labels = (str(row.gpu_index), text(row.gpu_uuid), text(row.gpu_instance_id),
                          text(row.compute_instance_id), *process)
                known = (labels, process)
            memo[identity] = known
            labels, process = known
            _add(memory_rows, labels, row.used_memory_bytes)
            _add(ratio_rows[0], labels, row.sm_utilization)
            _add(ratio_rows[1], labels, row.memory_utilization)
            _add(ratio_rows[2], labels, row.encoder_utilization)
            _add(ratio_rows[3], labels, row.decoder_utilization)
            if host is None or row.pid in seen_pids:
                continue  # per process, not per GPU: counted once
            seen_pids.add(row.pid)
            _add(cpu_rows, process, host.cpu_seconds)
            _add(resident_rows, process, host.resident_bytes)
            if self._cmdline:
                info.add_metric(process, {"command": self._redact(host.cmdline)})
        self._labels = memo

        dropped = counter(
            "runtimekit_processes_dropped_total",
            "GPU process rows left out of the runtimekit_process_* families by the per-GPU cap since the agent started "
            "(the pod families still count them).",
        )
        counts = dict(attribution.dropped_total)
        for gpu in live_gpus(view):  # start at 0, so that rate() sees the first drop
            counts.setdefault((gpu.index, gpu.uuid), 0)
        for (index, uuid), count in sorted(counts.items()):
            dropped.add_metric([str(index), text(uuid)], float(count))
        yield from nonempty(memory, *ratios.values(), cpu, resident, info, dropped)


def _add(rows: list[tuple[tuple[str, ...], float]], labels: tuple[str, ...], value: object) -> None:
    """``add`` for this collector's hot loop: one row unless the reading is Unavailable."""
    if value is not None and not isinstance(value, Unavailable):
        rows.append((labels, float(value) + 0.0))  # type: ignore[arg-type]


def _process_labels(row: AttributedProcess) -> tuple[str, ...]:
    """``PROCESS_LABELS`` values: pid, the process name ("" when /proc could not tell), the owner."""
    name = label_text(row.host.name) if row.host is not None else ""
    return (str(row.pid), name, *owner_labels(row.owner))
