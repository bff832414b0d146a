"""Running processes (compute, graphics, MPS) and per-process utilisation."""

from __future__ import annotations

from typing import Any

from ._base import _NO_ID, INSUFFICIENT_SIZE, NOT_FOUND, NOT_SUPPORTED, SUCCESS, _device, _LibraryBase, _obj, _v

__all__ = ["ProcessesMixin"]

_WHOLE_GPU = (_NO_ID, _NO_ID)  # (gpuInstanceId, computeInstanceId) of a process not in a MIG instance


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
        put = object.__setattr__  # past pynvml's Python-level str/bytes __setattr__ (hot with many processes)
        has_instances = n and hasattr(array[0], "gpuInstanceId")
        where = self.node.process_instances() if has_instances else {}
        for i, p in enumerate(procs):
            e = array[i]
            put(e, "pid", p["pid"])
            put(e, "usedGpuMemory", p["used_memory_bytes"])
            if has_instances:
                gi, ci = where.get(p["pid"], _WHOLE_GPU)
                put(e, "gpuInstanceId", gi)
                put(e, "computeInstanceId", ci)
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
        put = object.__setattr__
        total = sum(p["used_memory_bytes"] for p in procs) or 1
        for i, p in enumerate(procs):
            e, share = samples[i], p["used_memory_bytes"] / total
            put(e, "pid", p["pid"])
            put(e, "timeStamp", stamp)
            put(e, "smUtil", int(s.util_gpu * share))
            put(e, "memUtil", int(s.util_mem * share))
            put(e, "encUtil", 0)
            put(e, "decUtil", 0)
        count.value = len(procs)
        return SUCCESS
