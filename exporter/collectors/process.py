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
        # Label values of the rows seen, by what they are made of (``_entries``).
        self._labels: dict[tuple[object, ...], tuple[tuple[str, ...], tuple[str, ...]]] = {}
        # The family rows each attribution row gave at the last render, by the row object (the
        # attributor hands back the very same AttributedProcess for a process that did not change).
        self._rows: dict[int, tuple[AttributedProcess, _Entries]] = {}

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
        labels_of, previous_rows = self._labels, self._rows
        rows_memo: dict[int, tuple[AttributedProcess, _Entries]] = {}
        seen_rows: set[tuple[int, int]] = set()
        seen_pids: set[int] = set()
        on_gpu: list[tuple[_Row | None, ...]] = []  # per attribution row kept: its per-GPU family rows
        of_process: list[tuple[_Row | None, ...]] = []  # per process, once: its per-process family rows
        for row in attribution.processes:
            # NVML lists a process with compute and graphics contexts ("C+G") twice: one series.
            if (row.gpu_index, row.pid) in seen_rows:
                continue
            seen_rows.add((row.gpu_index, row.pid))
            hit = previous_rows.get(id(row))
            if hit is not None and hit[0] is row:  # the very row of the last render: the same entries
                entries = hit[1]
            else:
                entries = _entries(row, labels_of)
            rows_memo[id(row)] = (row, entries)
            on_gpu.append(entries[0])
            host = row.host
            if host is None or row.pid in seen_pids:
                continue  # per process, not per GPU: counted once
            seen_pids.add(row.pid)
            of_process.append(entries[1])
            if self._cmdline:
                info.add_metric(entries[2], {"command": self._redact(host.cmdline)})
        # Each family's rows in one pass over the entries (a row is None where its reading is Unavailable).
        for position, family in enumerate((memory, *ratios.values())):
            family.rows.extend([entry for entries in on_gpu if (entry := entries[position]) is not None])
        for position, family in enumerate((cpu, resident)):
            family.rows.extend([entry for entries in of_process if (entry := entries[position]) is not None])
        self._rows = rows_memo
        if len(labels_of) > 2 * len(rows_memo) + 64:  # processes gone: forget their labels
            current = {_identity(row) for row, _ in rows_memo.values()}
            self._labels = {identity: labels for identity, labels in labels_of.items() if identity in current}

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


# One attribution row's family rows: ((memory, sm, memory-controller, encoder, decoder) rows on its
# GPU, (CPU seconds, resident memory) rows of its process, the process labels); a row is None where
# the reading is Unavailable.
_Row = tuple[tuple[str, ...], float]
_Entries = tuple[tuple[_Row | None, ...], tuple[_Row | None, ...], tuple[str, ...]]


def _entry(labels: tuple[str, ...], value: object) -> _Row | None:
    """One family row, or None when the reading is Unavailable."""
    if value is None or isinstance(value, Unavailable):
        return None
    return (labels, float(value) + 0.0)  # type: ignore[arg-type]


def _identity(row: AttributedProcess) -> tuple[object, ...]:
    """What a row's labels are made of, as plain values (hashed in C: Owner and Unavailable are
    dataclasses whose __hash__ runs in Python). An Unavailable reading is "" in a label."""
    uuid, gi, ci, owner, host = row.gpu_uuid, row.gpu_instance_id, row.compute_instance_id, row.owner, row.host
    return (row.gpu_index, row.pid, uuid if type(uuid) is str else "", gi if type(gi) is int else -1,
            ci if type(ci) is int else -1, host.name if host is not None else None,
            owner.namespace, owner.pod, owner.container)


def _entries(row: AttributedProcess, labels_of: dict[tuple[object, ...], tuple[tuple[str, ...], tuple[str, ...]]]) -> _Entries:
    """The family rows of an attribution row not seen at the last render. Its label tuples are kept
    in ``labels_of`` by what they are made of (``_identity``): the same tuples again for a row whose
    GPU, process and owner did not change (no string building; the renderer finds their lines by
    cheap comparisons)."""
    identity = _identity(row)
    known = labels_of.get(identity)
    if known is None:
        process = _process_labels(row)
        labels = (str(row.gpu_index), text(row.gpu_uuid), text(row.gpu_instance_id),
                  text(row.compute_instance_id), *process)
        known = labels_of[identity] = (labels, process)
    labels, process = known
    host = row.host
    on_gpu = (_entry(labels, row.used_memory_bytes), _entry(labels, row.sm_utilization),
              _entry(labels, row.memory_utilization), _entry(labels, row.encoder_utilization),
              _entry(labels, row.decoder_utilization))
    of_process = (_entry(process, host.cpu_seconds), _entry(process, host.resident_bytes)) if host else (None, None)
    return on_gpu, of_process, process


def _process_labels(row: AttributedProcess) -> tuple[str, ...]:
    """``PROCESS_LABELS`` values: pid, the process name ("" when /proc could not tell), the owner."""
    name = label_text(row.host.name) if row.host is not None else ""
    return (str(row.pid), name, *owner_labels(row.owner))
