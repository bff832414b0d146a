"""nvmlDeviceGetFieldValues: the field-id fast path (NVML_FI_* ids)."""

from __future__ import annotations

from typing import Any

from ._base import INVALID_ARGUMENT, NOT_SUPPORTED, SUCCESS, _device, _LibraryBase, _obj, _v

__all__ = ["FieldValuesMixin"]

# nvmlValueType_t
_UINT, _ULL = 1, 3
#: NVML_FI_DEV_NVLINK_{CRC_FLIT,CRC_DATA,REPLAY,RECOVERY}_ERROR_COUNT_TOTAL -> Counters field (nvml.h).
_LINK_TOTALS = {38: "nvlink_crc", 45: "nvlink_crc", 52: "nvlink_replay", 59: "nvlink_recovery"}


class FieldValuesMixin(_LibraryBase):
    """nvmlDeviceGetFieldValues: the field-id fast path (NVML_FI_* ids)."""

    @_device
    def nvmlDeviceGetFieldValues(self, gpu: int, count: Any, ref: Any) -> int:
        values = _obj(ref)
        t = self.node.now()
        s, c = self.node.reading(gpu, t)
        ts = int(self.node.epoch(t) * 1e6)
        links = self._model(gpu).nvlink_links
        per_link = {  # field id -> (value type, link -> value); scopeId is the link
            165: (_UINT, lambda link: int(self.node.link_up(gpu, link))),  # NVLINK_GET_STATE
            161: (_ULL, lambda link: int(c.nvlink_replay[link])),  # NVLINK_ERROR_DL_REPLAY
            162: (_ULL, lambda link: int(c.nvlink_recovery[link])),  # NVLINK_ERROR_DL_RECOVERY
            163: (_ULL, lambda link: int(c.nvlink_crc[link])),  # NVLINK_ERROR_DL_CRC (flit)
            138: (_ULL, lambda link: int(c.nvlink_tx_kib[link])),  # NVLINK_THROUGHPUT_DATA_TX, KiB
            139: (_ULL, lambda link: int(c.nvlink_rx_kib[link])),  # NVLINK_THROUGHPUT_DATA_RX, KiB
        }
        # pynvml's structs override attribute access in Python (str <-> bytes); the plain object
        # accessors reach the ctypes fields directly, which matters at ~900 fields per cycle.
        get, put = object.__getattribute__, object.__setattr__
        for i in range(_v(count)):
            fv = values[i]
            fid, scope = get(fv, "fieldId"), get(fv, "scopeId")
            put(fv, "timestamp", ts)
            put(fv, "nvmlReturn", SUCCESS)
            if fid == 82:  # MEMORY_TEMP, C
                vt, val = _UINT, s.temp_mem
            elif fid == 197:  # PCIE_COUNT_TX_BYTES
                vt, val = _ULL, int(c.pcie_tx_bytes)
            elif fid == 198:
                vt, val = _ULL, int(c.pcie_rx_bytes)
            elif fid in _LINK_TOTALS:  # NVLINK_*_ERROR_COUNT_TOTAL: summed over links, scope ignored
                vt, val = _ULL, int(sum(getattr(c, _LINK_TOTALS[fid])))
            elif fid == 91:  # NVLINK_LINK_COUNT
                vt, val = _UINT, links
            elif fid == 230:  # GET_GPU_RECOVERY_ACTION: what the driver asks for (0: none)
                vt, val = _UINT, self.node.recovery_action(gpu)
            elif fid in per_link:
                if not 0 <= scope < links:
                    put(fv, "nvmlReturn", INVALID_ARGUMENT)
                    continue
                vt, val = per_link[fid][0], per_link[fid][1](scope)
            else:
                put(fv, "nvmlReturn", NOT_SUPPORTED)
                continue
            put(fv, "valueType", vt)
            put(get(fv, "value"), "uiVal" if vt == _UINT else "ullVal", val)
        return SUCCESS
