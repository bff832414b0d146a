"""ECC mode and error counters, retired pages (pre-Ampere) and row remapping (Ampere and later)."""

from __future__ import annotations

from typing import Any

from ._base import INVALID_ARGUMENT, NOT_SUPPORTED, SUCCESS, _device, _LibraryBase, _out, _v

__all__ = ["EccMixin"]


class EccMixin(_LibraryBase):
    """ECC mode and error counters, retired pages (pre-Ampere) and row remapping (Ampere and later)."""

    @_device
    def nvmlDeviceGetEccMode(self, gpu: int, current: Any, pending: Any) -> int:
        _out(current, 1)
        _out(pending, 1)
        return SUCCESS

    @_device
    def nvmlDeviceGetDefaultEccMode(self, gpu: int, ref: Any) -> int:
        _out(ref, 1)
        return SUCCESS

    @_device
    def nvmlDeviceGetTotalEccErrors(self, gpu: int, etype: Any, ctype: Any, ref: Any) -> int:
        kind = {0: "corrected", 1: "uncorrected"}.get(_v(etype))
        scope = {0: "volatile", 1: "aggregate"}.get(_v(ctype))
        if kind is None or scope is None:
            return INVALID_ARGUMENT
        _out(ref, self.node.ecc(gpu)[f"{kind}_{scope}"])
        return SUCCESS

    @_device
    def nvmlDeviceGetRetiredPages(self, gpu: int, cause: Any, count: Any, pages: Any) -> int:
        if not self._model(gpu).retired_pages:
            return NOT_SUPPORTED  # Ampere and later remap rows instead
        _out(count, 0)
        return SUCCESS

    @_device
    def nvmlDeviceGetRetiredPagesPendingStatus(self, gpu: int, ref: Any) -> int:
        if not self._model(gpu).retired_pages:
            return NOT_SUPPORTED
        _out(ref, 0)
        return SUCCESS

    @_device
    def nvmlDeviceGetRemappedRows(self, gpu: int, corr: Any, unc: Any, pending: Any, failure: Any) -> int:
        if not self._model(gpu).row_remapping:
            return NOT_SUPPORTED
        for ref, v in zip((corr, unc, pending, failure), self.node.remapped_rows(gpu), strict=True):
            _out(ref, v)
        return SUCCESS
