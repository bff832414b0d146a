"""The processes on a GPU: NVML's running-process lists and per-process utilization, in one reading.

Compute and graphics lists are read with the newest struct version the driver has (``_v3``, then
``_v2``); a process with both contexts is listed once. The session answers these calls as rows of
the structs' raw fields (``runtimekit.gpu.nvml.ROW_WRAPPERS``), not pynvml's per-process objects. Utilization comes from
nvmlDeviceGetProcessUtilization over the last ``PROCESS_UTILIZATION_WINDOW_SECONDS``, as ratios
0..1 (NVML gives percent), for processes on the whole GPU only: a process in a MIG instance (its
row names a GPU instance) has none, as NVML cannot attribute utilization to MIG instances (MIG
User Guide, getting-started-with-mig.html), so its ratios are NOT_SUPPORTED, never 0.
"""

from __future__ import annotations

from typing import Any

from runtimekit.gpu.nvml import NOT_AVAILABLE_U64, NvmlSession, Variant
from runtimekit.gpu.types import NOT_SUPPORTED, GpuProcess, Unavailable, failed, is_available

COMPUTE_PROCESSES = (
    Variant("nvmlDeviceGetComputeRunningProcesses_v3"),
    Variant("nvmlDeviceGetComputeRunningProcesses_v2"),
)
GRAPHICS_PROCESSES = (
    Variant("nvmlDeviceGetGraphicsRunningProcesses_v3"),
    Variant("nvmlDeviceGetGraphicsRunningProcesses_v2"),
)
NO_ID = 0xFFFFFFFF  # NVML's "not applicable" for instance ids
PROCESS_UTILIZATION_WINDOW_SECONDS = 1.0  # per-process samples are taken from this last window
IDLE = (0.0, 0.0, 0.0, 0.0)  # a process with no utilization sample in the window ran no kernel
IN_INSTANCE = (NOT_SUPPORTED,) * 4  # a process in a MIG instance: utilization not attributable


def read_process_utilization(session: NvmlSession, handle: Any, now: float) -> dict[int, tuple[float, ...]] | Unavailable:
    """pid -> (sm, memory, encoder, decoder) ratios from the newest sample of the last second.

    NVML_ERROR_NOT_FOUND means no process ran in that second: every ratio is then 0.
    """
    since_us = int((now - PROCESS_UTILIZATION_WINDOW_SECONDS) * 1e6)
    samples = session.call("nvmlDeviceGetProcessUtilization", handle, since_us)
    if isinstance(samples, Unavailable):
        return {} if samples.detail.endswith("NVML_ERROR_NOT_FOUND") else samples
    newest: dict[int, tuple[int, tuple[float, ...]]] = {}
    for pid, stamp, sm, memory, encoder, decoder in samples:
        if pid not in newest or stamp > newest[pid][0]:
            newest[pid] = (stamp, (sm / 100.0, memory / 100.0, encoder / 100.0, decoder / 100.0))
    return {pid: ratios for pid, (_, ratios) in newest.items()}


_Known = dict[tuple[Any, ...], GpuProcess]


def read_processes(
    session: NvmlSession, handle: Any, now: float, known: _Known | None = None
) -> tuple[tuple[GpuProcess, ...], Unavailable | None]:
    """The GPU's processes, and the error of a listing that failed (None when both listed).

    ``known`` (the caller's, one per GPU) maps what NVML answered for a process to the
    ``GpuProcess`` made of it at the last reading: an unchanged process is the same (immutable)
    object again, not a new one, and the map keeps only this reading's processes.
    """
    previous = dict(known) if known else {}
    if known is not None:
        known.clear()
    processes: list[GpuProcess] = []
    failure: Unavailable | None = None
    utilization: dict[int, tuple[float, ...]] | Unavailable | None = None
    seen: set[int] = set()
    for kind, variants in (("compute", COMPUTE_PROCESSES), ("graphics", GRAPHICS_PROCESSES)):
        found = session.call_versioned(f"nvmlDeviceGet{kind.title()}RunningProcesses", variants, handle)
        if not is_available(found):
            if failed(found):
                failure = found
            continue
        for pid, memory, gi, ci in found:
            if pid in seen:
                continue  # a process with compute and graphics contexts is listed in both
            seen.add(pid)
            if gi != NO_ID:
                ratios: tuple[Any, ...] = IN_INSTANCE
            else:
                if utilization is None:  # read once, and only when a whole-GPU process is listed
                    utilization = read_process_utilization(session, handle, now)
                ratios = utilization.get(pid, IDLE) if isinstance(utilization, dict) else (utilization,) * 4
            key = (kind, pid, memory, gi, ci, ratios)
            process = previous.get(key)
            if process is None:
                process = GpuProcess(
                    pid=pid,
                    used_memory_bytes=memory if memory != NOT_AVAILABLE_U64 else NOT_SUPPORTED,
                    kind=kind,
                    gpu_instance_id=gi if gi != NO_ID else NOT_SUPPORTED,
                    compute_instance_id=ci if ci != NO_ID else NOT_SUPPORTED,
                    sm_utilization=ratios[0],
                    memory_utilization=ratios[1],
                    encoder_utilization=ratios[2],
                    decoder_utilization=ratios[3],
                )
            if known is not None:
                known[key] = process
            processes.append(process)
    return tuple(processes), failure
