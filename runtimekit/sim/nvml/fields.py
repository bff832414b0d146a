"""nvmlDeviceGetFieldValues: the field-id fast path (NVML_FI_* ids)."""

from __future__ import annotations

import struct
from typing import Any

from ..node import Counters
from ._base import INVALID_ARGUMENT, NOT_SUPPORTED, SUCCESS, _bytes_of, _device, _LibraryBase, _obj, _v

__all__ = ["FieldValuesMixin"]

# nvmlValueType_t
_UINT, _ULL = 1, 3
#: NVML_FI_DEV_NVLINK_{REPLAY,RECOVERY}_ERROR_COUNT_TOTAL -> Counters field (nvml.h).
_LINK_TOTALS = {52: "nvlink_replay", 59: "nvlink_recovery"}
#: NVML_FI_DEV_NVLINK_CRC_{FLIT,DATA}_ERROR_COUNT_TOTAL: the flit and the data share of the CRC
#: errors (``Counters.crc_flit``/``crc_data``), summed over links.
_CRC_TOTALS = {38: Counters.crc_flit, 45: Counters.crc_data}
#: Per-link fields (scopeId is the link) -> Counters list: NVLINK_ERROR_DL_{REPLAY,RECOVERY},
#: NVLINK_THROUGHPUT_DATA_{TX,RX} (KiB). NVLINK_GET_STATE (165) is the link's state, not a counter.
_PER_LINK = {161: "nvlink_replay", 162: "nvlink_recovery", 138: "nvlink_tx_kib", 139: "nvlink_rx_kib"}
#: NVLINK_ERROR_DL_CRC (163), per link: the flit CRC counter, the same count as
#: nvmlDeviceGetNvLinkErrorCounter(DL_CRC_FLIT) (data CRC has no per-link field past link 11, and
#: the agent reads 163 as flit CRC: ``runtimekit.gpu.fields.LINK_CRC_FLIT``).
_LINK_CRC_FLIT = 163
_LINK_STATE = 165

# c_nvmlFieldValue_t (nvml.h): fieldId, scopeId, timestamp (µs), latencyUsec, valueType, nvmlReturn,
# then the 8-byte value union. An answer is written in one pack: the request's ids, the timestamp,
# latency 0, the value type, the return code, and the union member the type names (zero-padded).
_REQUEST = struct.Struct("@II")
_ANSWER = {_UINT: struct.Struct("@IIqqIII4x"), _ULL: struct.Struct("@IIqqIIQ")}
# A failed field gets its timestamp and return code only (value type and union left as they were).
_TIMESTAMP, _TIMESTAMP_AT = struct.Struct("@q"), 8
_RETURN, _RETURN_AT = struct.Struct("@I"), 28


def _fail(buffer: memoryview, offset: int, timestamp_us: int, code: int) -> None:
    """Answer the field at ``offset`` with an error ``code`` (nvmlReturn_t)."""
    _TIMESTAMP.pack_into(buffer, offset + _TIMESTAMP_AT, timestamp_us)
    _RETURN.pack_into(buffer, offset + _RETURN_AT, code)


class FieldValuesMixin(_LibraryBase):
    """nvmlDeviceGetFieldValues: the field-id fast path (NVML_FI_* ids).

    The answers are packed into the caller's array as bytes: pynvml's structs override attribute
    access in Python (str <-> bytes), and a GPU with 18 NVLinks is asked ~100 fields a cycle."""

    @_device
    def nvmlDeviceGetFieldValues(self, gpu: int, count: Any, ref: Any) -> int:
        values = _obj(ref)
        t = self.node.now()
        s, c = self.node.reading(gpu, t)
        ts = int(self.node.epoch(t) * 1e6)
        links = self._model(gpu).nvlink_links
        buffer, entry = _bytes_of(values, _ANSWER[_ULL]), _ANSWER[_ULL].size  # c_nvmlFieldValue_t rows
        for offset in range(0, _v(count) * entry, entry):
            fid, scope = _REQUEST.unpack_from(buffer, offset)
            if fid == 82:  # MEMORY_TEMP, C
                vt, val = _UINT, s.temp_mem
            elif fid == 197:  # PCIE_COUNT_TX_BYTES
                vt, val = _ULL, int(c.pcie_tx_bytes)
            elif fid == 198:
                vt, val = _ULL, int(c.pcie_rx_bytes)
            elif fid in _PER_LINK or fid in (_LINK_STATE, _LINK_CRC_FLIT):
                if not 0 <= scope < links:
                    _fail(buffer, offset, ts, INVALID_ARGUMENT)
                    continue
                if fid == _LINK_STATE:
                    vt, val = _UINT, int(self.node.link_up(gpu, scope))
                elif fid == _LINK_CRC_FLIT:
                    vt, val = _ULL, c.crc_flit(scope)
                else:
                    vt, val = _ULL, int(getattr(c, _PER_LINK[fid])[scope])
            elif fid in _LINK_TOTALS:  # NVLINK_*_ERROR_COUNT_TOTAL: summed over links, scope ignored
                vt, val = _ULL, int(sum(getattr(c, _LINK_TOTALS[fid])))
            elif fid in _CRC_TOTALS:
                vt, val = _ULL, sum(_CRC_TOTALS[fid](c, link) for link in range(links))
            elif fid == 91:  # NVLINK_LINK_COUNT
                vt, val = _UINT, links
            elif fid == 230:  # GET_GPU_RECOVERY_ACTION: what the driver asks for (0: none)
                vt, val = _UINT, self.node.recovery_action(gpu)
            else:
                _fail(buffer, offset, ts, NOT_SUPPORTED)
                continue
            _ANSWER[vt].pack_into(buffer, offset, fid, scope, ts, 0, vt, SUCCESS, val)
        return SUCCESS
