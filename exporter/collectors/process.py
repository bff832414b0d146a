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

import bisect
import re
from collections.abc import Iterable, Sequence

from prometheus_client.core import InfoMetricFamily, Metric

from runtimekit.attribution.types import AttributedProcess
from runtimekit.exporter.collectors._common import (
    GPU_LABELS,
    SAMPLED,
    CardCollector,
    add,
    counter,
    gauge,
    live_gpus,
    nonempty,
    text,
)
from runtimekit.exporter.collectors.attribution import OWNER_LABELS, label_text, owner_labels
from runtimekit.exporter.family import Family
from runtimekit.state import NodeView

PROCESS_LABELS = ("pid", "process", *OWNER_LABELS)
# MIG ids are always in the label set, "" on a GPU without MIG: a family keeps one set of label
# names, and Prometheus stores a label whose value is "" exactly as if it were absent.
GPU_PROCESS_LABELS = (*GPU_LABELS, "gpu_instance", "compute_instance", *PROCESS_LABELS)

REDACTED = "<redacted>"
_SECRET_WORDS = r"(?:password|passwd|secret|token|key|credential)"
DEFAULT_CMDLINE_REDACT = (
    r"(?i)"
    # A flag or a NAME=value assignment whose name contains a secret word; a flag's value may also
    # be the next argument: --password=x, -token=x, --token x, --db.password x, API_KEY=x,
    # AWS_SECRET_ACCESS_KEY=x. A bare word is only redacted before "=", so "--model monkey" stays.
    r"(?P<flag>--?)?\b[\w.-]*" + _SECRET_WORDS + r"[\w.-]*(?(flag)(?:=|\s+)|=)(?P<value>\S+)"
    # Credentials in a URL: scheme://user:password@host
    r"|://[^\s/:@]+:(?P<value_url>[^\s/@]+)@"
)
DEFAULT_CMDLINE_MAX_LENGTH = 256
TRUNCATED = "..."


class CommandRedactor:
    """Joins a command line with spaces, redacts it and truncates it.

    The pattern's named groups whose name starts with ``value`` are what gets replaced by
    ``<redacted>`` (the whole match where none of them took part, or where it has none), so the
    flag names stay readable. A value that stops at a space inside its argument runs on to the end
    of that argument: ``--password "a b"`` is redacted whole, not just ``a``. Redaction runs before truncation, so a cut
    never leaves half a secret.
    """

    def __init__(self, pattern: str = DEFAULT_CMDLINE_REDACT, max_length: int = DEFAULT_CMDLINE_MAX_LENGTH) -> None:
        try:
            self.pattern = re.compile(pattern)
        except re.error as error:
            raise ValueError(f"process collector: cmdline_redact is not a valid regular expression: {error}") from None
        if not isinstance(max_length, int) or isinstance(max_length, bool) or max_length < len(TRUNCATED) + 1:
            raise ValueError(f"process collector: cmdline_max_length must be an integer >= {len(TRUNCATED) + 1}, got {max_length!r}")
        self.max_length = max_length
        self._value_groups = [name for name in self.pattern.groupindex if name.startswith("value")]

    def __call__(self, cmdline: Sequence[str]) -> str:
        joined = label_text(" ".join(cmdline))
        ends: list[int] = []
        offset = 0
        for arg in cmdline:
            offset += len(label_text(arg))
            ends.append(offset)
            offset += 1
        spans: list[tuple[int, int]] = []
        for match in self.pattern.finditer(joined):
            groups = [name for name in self._value_groups if match.start(name) != -1]
            found = [match.span(name) for name in groups] or [match.span()]
            for start, end in found:
                if end <= start:
                    continue
                holder = bisect.bisect_right(ends, end - 1)  # the argument holding the value's last character
                if holder < len(ends) and end < ends[holder] and joined[end].isspace():
                    end = ends[holder]  # the value stopped at a space inside its argument: take the rest of it
                spans.append((start, end))
        out, position = [], 0
        for start, end in sorted(spans):
            if end <= position:
                continue
            start = max(start, position)
            out.append(joined[position:start])
            out.append(REDACTED)
            position = end
        out.append(joined[position:])
        command = "".join(out)
        if len(command) > self.max_length:
            command = command[: self.max_length - len(TRUNCATED)] + TRUNCATED
        return command


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
        seen_rows: set[tuple[int, int]] = set()
        seen_pids: set[int] = set()
        for row in attribution.processes:
            # NVML lists a process with compute and graphics contexts ("C+G") twice: one series.
            if (row.gpu_index, row.pid) in seen_rows:
                continue
            seen_rows.add((row.gpu_index, row.pid))
            process = _process_labels(row)
            labels = (str(row.gpu_index), text(row.gpu_uuid), text(row.gpu_instance_id), text(row.compute_instance_id), *process)
            add(memory, labels, row.used_memory_bytes)
            for field, family in ratios.items():
                add(family, labels, getattr(row, field))
            host = row.host
            if host is None or row.pid in seen_pids:
                continue  # per process, not per GPU: counted once
            seen_pids.add(row.pid)
            add(cpu, process, host.cpu_seconds)
            add(resident, process, host.resident_bytes)
            if self._cmdline:
                info.add_metric(process, {"command": self._redact(host.cmdline)})

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


def _process_labels(row: AttributedProcess) -> tuple[str, ...]:
    """``PROCESS_LABELS`` values: pid, the process name ("" when /proc could not tell), the owner."""
    name = label_text(row.host.name) if row.host is not None else ""
    return (str(row.pid), name, *owner_labels(row.owner))
