"""NVML initialisation, system queries and device handles (nvmlInit*, nvmlSystem*, nvmlDeviceGetHandleBy*)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ._base import (
    _DEV_BASE,
    GPU_IS_LOST,
    INVALID_ARGUMENT,
    NOT_FOUND,
    SUCCESS,
    UNINITIALIZED,
    _LibraryBase,
    _out,
    _put_str,
    _set_ptr,
    _system,
    _v,
)

__all__ = ["SystemMixin"]


class SystemMixin(_LibraryBase):
    """NVML initialisation, system queries and device handles (nvmlInit*, nvmlSystem*, nvmlDeviceGetHandleBy*)."""

    def nvmlInitWithFlags(self, flags: Any) -> int:
        self._refcount += 1
        return SUCCESS

    def nvmlInit_v2(self) -> int:
        return self.nvmlInitWithFlags(0)

    def nvmlShutdown(self) -> int:
        if not self._refcount:
            return UNINITIALIZED
        self._refcount -= 1
        return SUCCESS

    @_system
    def nvmlSystemGetDriverVersion(self, buf: Any, length: Any) -> int:
        return _put_str(buf, length, self.node.scenario.driver_version)

    @_system
    def nvmlSystemGetNVMLVersion(self, buf: Any, length: Any) -> int:
        return _put_str(buf, length, self.node.scenario.nvml_version)

    @_system
    def nvmlSystemGetCudaDriverVersion(self, ref: Any) -> int:
        _out(ref, self.node.scenario.cuda_driver_version)
        return SUCCESS

    nvmlSystemGetCudaDriverVersion_v2 = nvmlSystemGetCudaDriverVersion

    @_system
    def nvmlSystemGetProcessName(self, pid: Any, buf: Any, length: Any) -> int:
        for p in self.node.processes():
            if p["pid"] == _v(pid):
                return _put_str(buf, length, p["name"])
        return NOT_FOUND

    @_system
    def nvmlDeviceGetCount_v2(self, ref: Any) -> int:
        _out(ref, self.node.gpu_count)
        return SUCCESS

    nvmlDeviceGetCount = nvmlDeviceGetCount_v2

    def _handle(self, gpu: int, ref: Any) -> int:
        err = self.node.device_error(gpu)
        if err == GPU_IS_LOST:
            return err  # nvml.h: GetHandleBy* return GPU_IS_LOST for a GPU off the bus
        _set_ptr(ref, _DEV_BASE + gpu)
        return SUCCESS

    @_system
    def nvmlDeviceGetHandleByIndex_v2(self, index: Any, ref: Any) -> int:
        i = _v(index)
        if not 0 <= i < self.node.gpu_count:
            return INVALID_ARGUMENT
        return self._handle(i, ref)

    nvmlDeviceGetHandleByIndex = nvmlDeviceGetHandleByIndex_v2

    def _find(self, ref: Any, match: Callable[[Any], bool]) -> int:
        for i in range(self.node.gpu_count):
            if match(self.node.gpu(i)):
                return self._handle(i, ref)
        return NOT_FOUND

    @_system
    def nvmlDeviceGetHandleByUUID(self, uuid: Any, ref: Any) -> int:
        want = (_v(uuid) or b"").decode()
        return self._find(ref, lambda g: g.uuid == want)

    @_system
    def nvmlDeviceGetHandleBySerial(self, serial: Any, ref: Any) -> int:
        want = (_v(serial) or b"").decode()
        return self._find(ref, lambda g: g.serial == want)

    @_system
    def nvmlDeviceGetHandleByPciBusId_v2(self, bus: Any, ref: Any) -> int:
        want = (_v(bus) or b"").decode().upper()
        if want.count(":") == 2 and len(want.split(":")[0]) == 4:
            want = "0000" + want
        return self._find(ref, lambda g: g.pci_bus_id == want)
