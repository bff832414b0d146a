"""PCIe link generation/width, replay counter and throughput (KB/s)."""

from __future__ import annotations

from typing import Any

from ._base import INVALID_ARGUMENT, SUCCESS, _device, _LibraryBase, _out, _v

__all__ = ["PcieMixin"]


class PcieMixin(_LibraryBase):
    """PCIe link generation/width, replay counter and throughput (KB/s)."""

    @_device
    def nvmlDeviceGetCurrPcieLinkGeneration(self, gpu: int, ref: Any) -> int:
        _out(ref, self.node.pcie_link(gpu)[0])
        return SUCCESS

    @_device
    def nvmlDeviceGetCurrPcieLinkWidth(self, gpu: int, ref: Any) -> int:
        _out(ref, self.node.pcie_link(gpu)[1])
        return SUCCESS

    @_device
    def nvmlDeviceGetMaxPcieLinkGeneration(self, gpu: int, ref: Any) -> int:
        _out(ref, self._model(gpu).pcie_generation)
        return SUCCESS

    nvmlDeviceGetGpuMaxPcieLinkGeneration = nvmlDeviceGetMaxPcieLinkGeneration

    @_device
    def nvmlDeviceGetMaxPcieLinkWidth(self, gpu: int, ref: Any) -> int:
        _out(ref, self._model(gpu).pcie_width)
        return SUCCESS

    @_device
    def nvmlDeviceGetPcieReplayCounter(self, gpu: int, ref: Any) -> int:
        """Replays since the driver loaded (the ``pcie-replays`` fault moves it; 0 otherwise)."""
        _out(ref, int(self.node.reading(gpu)[1].pcie_replays))
        return SUCCESS

    @_device
    def nvmlDeviceGetPcieThroughput(self, gpu: int, counter: Any, ref: Any) -> int:
        """KB/s over NVML's last 20 ms sample (TX = 0, RX = 1)."""
        s = self.node.sample(gpu)
        c = _v(counter)
        if c not in (0, 1):
            return INVALID_ARGUMENT
        _out(ref, s.pcie_tx_kbs if c == 0 else s.pcie_rx_kbs)
        return SUCCESS
