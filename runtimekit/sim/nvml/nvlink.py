"""NVLink state, version, error counters and remote endpoints.

A scenario's NVLinks all end at an NVSwitch (``gpus[].nvlinks``: the switch at the far end of each
link), so the remote end of every link is that switch: device type NVML_NVLINK_DEVICE_TYPE_SWITCH
and the switch's PCI info, as on DGX/HGX systems (``nvidia-smi nvlink -R``). Directly linked GPUs
(DGX-1's hybrid cube mesh) are not expressible in a scenario.
"""

from __future__ import annotations

from typing import Any

from ._base import INVALID_ARGUMENT, NOT_SUPPORTED, SUCCESS, _device, _fill_pci, _LibraryBase, _obj, _out, _v

__all__ = ["NvLinkMixin"]

#: NVSwitch PCI device ids (device << 16 | vendor), by GPU architecture generation.
_NVSWITCH_PCI_ID = {"hopper": 0x22A310DE, "ampere": 0x1AF110DE, "volta": 0x1AC110DE}

#: NVLink generation -> nvmlNvlinkVersion_t as the driver answers it.
_NVLINK_VERSION_ENUM = {1: 1, 2: 2, 3: 4, 4: 6, 5: 7}



class NvLinkMixin(_LibraryBase):
    """NVLink state, version, error counters and remote endpoints."""

    def _link_ok(self, gpu: int, link: Any) -> bool:
        return 0 <= _v(link) < self._model(gpu).nvlink_links

    @_device
    def nvmlDeviceGetNvLinkState(self, gpu: int, link: Any, ref: Any) -> int:
        if not self._link_ok(gpu, link):
            return INVALID_ARGUMENT
        _out(ref, int(self.node.link_up(gpu, _v(link))))
        return SUCCESS

    @_device
    def nvmlDeviceGetNvLinkVersion(self, gpu: int, link: Any, ref: Any) -> int:
        if not self._link_ok(gpu, link):
            return INVALID_ARGUMENT
        # NVML answers nvmlNvlinkVersion_t, not the generation: 3.0 -> 4 (A100), 4.0 -> 6 (H100).
        _out(ref, _NVLINK_VERSION_ENUM[self._model(gpu).nvlink_version])
        return SUCCESS

    @_device
    def nvmlDeviceGetNvLinkErrorCounter(self, gpu: int, link: Any, counter: Any, ref: Any) -> int:
        if not self._link_ok(gpu, link):
            return INVALID_ARGUMENT
        c = _v(counter)
        if c not in (0, 1, 2, 3):
            return NOT_SUPPORTED
        _, counters = self.node.reading(gpu)
        i = _v(link)
        if c == 2:  # DL_CRC_FLIT
            value = counters.crc_flit(i)
        elif c == 3:  # DL_CRC_DATA
            value = counters.crc_data(i)
        else:  # DL_REPLAY (one per CRC error), DL_RECOVERY
            value = int((counters.nvlink_replay if c == 0 else counters.nvlink_recovery)[i])
        _out(ref, value)
        return SUCCESS

    @_device
    def nvmlDeviceGetNvLinkRemoteDeviceType(self, gpu: int, link: Any, ref: Any) -> int:
        if not self._link_ok(gpu, link):
            return INVALID_ARGUMENT
        _out(ref, 2)  # NVML_NVLINK_DEVICE_TYPE_SWITCH
        return SUCCESS

    @_device
    def nvmlDeviceGetNvLinkRemotePciInfo_v2(self, gpu: int, link: Any, ref: Any) -> int:
        if not self._link_ok(gpu, link):
            return INVALID_ARGUMENT
        spec = self.node.gpu(gpu)
        switch = self.node.scenario.nvswitches[spec.nvlinks[_v(link)]]
        _fill_pci(_obj(ref), switch.pci_bus_id, _NVSWITCH_PCI_ID.get(spec.model.architecture, 0x10DE), 0)
        return SUCCESS
