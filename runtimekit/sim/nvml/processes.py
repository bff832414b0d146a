"""Running processes (compute, graphics, MPS) and per-process utilisation."""

from __future__ import annotations

import struct
from typing import Any

from ._base import _NO_ID, INSUFFICIENT_SIZE, NOT_FOUND, NOT_SUPPORTED, SUCCESS, _bytes_of, _device, _LibraryBase, _obj, _v

__all__ = ["ProcessesMixin"]

_WHOLE_GPU = (_NO_ID, _NO_ID)  # (gpuInstanceId, computeInstanceId) of a process not in a MIG instance

# Rows are packed into the caller's array (``_bytes_of``) in these nvml.h layouts; a busy node lists
# hundreds of processes a cycle.
#: nvmlProcessInfo_v2_t / _v3_t: pid, usedGpuMemory (bytes), gpuInstanceId, computeInstanceId.
_PROCESS_INFO = struct.Struct("@IQII")
#: nvmlProcessUtilizationSample_t: pid, timeStamp (µs), smUtil, memUtil, encUtil, decUtil (%).
_UTILIZATION_SAMPLE = struct.Struct("@IQIIII")


class ProcessesMixin(_LibraryBase):
    """Running processes (compute, graphics, MPS) and per-process utilisation."""

    def _fill_processes(self, gpu: int, count_ref: Any, array: Any, procs: list[dict]) -> int:
        """Fill nvmlProcessInfo_t rows; a process in a MIG instance carries its GPU and compute
        instance ids, any other 0xFFFFFFFF (the whole GPU)."""
        count = _obj(count_ref)
        n = len(procs)
        if array is None or count.value < n:
            count.value = n
            return INSUFFICIENT_SIZE if n else SUCCESS
        if n:
            rows, pack, size = _bytes_of(array, _PROCESS_INFO), _PROCESS_INFO.pack_into, _PROCESS_INFO.size
            where = self.node.process_instances()
            for offset, p in zip(range(0, n * size, size), procs, strict=True):
                pack(rows, offset, p["pid"], p["used_memory_bytes"], *where.get(p["pid"], _WHOLE_GPU))
        count.value = n
        return SUCCESS

    @_device
    def nvmlDeviceGetComputeRunningProcesses_v3(self, gpu: int, count: Any, array: Any) -> int:
        procs = self.node.processes_on(gpu)
        return self._fill_processes(gpu, count, array, procs)

    nvmlDeviceGetComputeRunningProcesses_v2 = nvmlDeviceGetComputeRunningProcesses_v3

    @_device
    def nvmlDeviceGetGraphicsRunningProcesses_v3(self, gpu: int, count: Any, array: Any) -> int:
        return self._fill_processes(gpu, count, array, [])

    nvmlDeviceGetGraphicsRunningProcesses_v2 = nvmlDeviceGetGraphicsRunningProcesses_v3
    nvmlDeviceGetMPSComputeRunningProcesses_v3 = nvmlDeviceGetGraphicsRunningProcesses_v3

    @_device
    def nvmlDeviceGetProcessUtilization(self, gpu: int, samples: Any, count_ref: Any, last_seen: Any) -> int:
        """One sample per process for the current tick: the GPU's SM and memory utilization
        shared out in proportion to the processes' memory (the big job does most of the work).
        Not supported in MIG mode: NVML attributes no utilization to MIG devices or their processes."""
        if self.node.mig_mode(gpu)[0]:
            return NOT_SUPPORTED
        t = self.node.now()
        s = self.node.sample(gpu)
        procs = self.node.processes_on(gpu)
        stamp = int(self.node.epoch((t // self.node.tick_s) * self.node.tick_s) * 1e6)
        if not procs or stamp <= _v(last_seen):
            return NOT_FOUND
        count = _obj(count_ref)
        if samples is None or count.value < len(procs):
            count.value = len(procs)
            return INSUFFICIENT_SIZE
        rows, pack, size = _bytes_of(samples, _UTILIZATION_SAMPLE), _UTILIZATION_SAMPLE.pack_into, _UTILIZATION_SAMPLE.size
        total = sum(p["used_memory_bytes"] for p in procs) or 1
        for offset, p in zip(range(0, len(procs) * size, size), procs, strict=True):
            share = p["used_memory_bytes"] / total
            pack(rows, offset, p["pid"], stamp, int(s.util_gpu * share), int(s.util_mem * share), 0, 0)
        count.value = len(procs)
        return SUCCESS
