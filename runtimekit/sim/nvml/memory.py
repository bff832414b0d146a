"""Device memory: framebuffer (nvmlDeviceGetMemoryInfo, _v2) and BAR1, in bytes."""

from __future__ import annotations

from typing import Any

from ..node import MiB
from ._base import SUCCESS, VERSION_MISMATCH, _device, _LibraryBase, _obj

__all__ = ["MemoryMixin"]


class MemoryMixin(_LibraryBase):
    """Device memory: framebuffer (nvmlDeviceGetMemoryInfo, _v2) and BAR1, in bytes."""

    @_device
    def nvmlDeviceGetMemoryInfo(self, gpu: int, ref: Any) -> int:
        """v1: used includes the reserved memory (as drivers before the v2 API reported it)."""
        total, reserved, used = self.node.memory(gpu)
        m = _obj(ref)
        m.total, m.used, m.free = total, reserved + used, total - reserved - used
        return SUCCESS

    @_device
    def nvmlDeviceGetMemoryInfo_v2(self, gpu: int, ref: Any) -> int:
        m = _obj(ref)
        if m.version != 0x02000028:
            return VERSION_MISMATCH
        total, reserved, used = self.node.memory(gpu)
        m.total, m.reserved, m.used, m.free = total, reserved, used, total - reserved - used
        return SUCCESS

    @_device
    def nvmlDeviceGetBAR1MemoryInfo(self, gpu: int, ref: Any) -> int:
        total = self._model(gpu).bar1_total_mib * MiB
        used = (2 + 2 * len(self.node.processes_on(gpu))) * MiB
        b = _obj(ref)
        b.bar1Total, b.bar1Used, b.bar1Free = total, used, total - used
        return SUCCESS
