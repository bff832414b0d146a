"""Event sets: create, register per device, wait (XIDs, ECC, GPU lost) and free."""

from __future__ import annotations

import ctypes
from typing import Any

from ._base import (
    _DEV_BASE,
    GPU_IS_LOST,
    INVALID_ARGUMENT,
    NOT_SUPPORTED,
    SUCCESS,
    TIMEOUT,
    _device,
    _LibraryBase,
    _obj,
    _out,
    _ptr,
    _set_ptr,
    _system,
    _v,
)

__all__ = ["EventsMixin"]

_SET_BASE = 0x7E57_0000_8000
_SUPPORTED_EVENTS = 0x1 | 0x2 | 0x4 | 0x8 | 0x10  # SBE, DBE, PState, Xid, Clock


class EventsMixin(_LibraryBase):
    """Event sets: create, register per device, wait (XIDs, ECC, GPU lost) and free."""

    @_system
    def nvmlEventSetCreate(self, ref: Any) -> int:
        _set_ptr(ref, _SET_BASE + self.node.events.create())
        return SUCCESS

    def _set_id(self, handle: Any) -> int | None:
        addr = _ptr(handle)
        if addr is None or addr <= _SET_BASE:
            return None
        sid = addr - _SET_BASE
        return sid if self.node.events.exists(sid) else None

    @_device
    def nvmlDeviceGetSupportedEventTypes(self, gpu: int, ref: Any) -> int:
        _out(ref, _SUPPORTED_EVENTS)
        return SUCCESS

    @_device
    def nvmlDeviceRegisterEvents(self, gpu: int, types: Any, event_set: Any) -> int:
        sid = self._set_id(event_set)
        if sid is None:
            return INVALID_ARGUMENT
        mask = _v(types)
        if mask & ~_SUPPORTED_EVENTS:
            return NOT_SUPPORTED
        self.node.events.register(sid, gpu, mask)
        return SUCCESS

    @_system
    def nvmlEventSetWait_v2(self, event_set: Any, ref: Any, timeout_ms: Any) -> int:
        """Block up to ``timeout_ms`` for the next event (TIMEOUT when none came)."""
        sid = self._set_id(event_set)
        if sid is None:
            return INVALID_ARGUMENT
        try:
            ev = self.node.events.wait(sid, _v(timeout_ms) / 1000.0)
        except KeyError:
            return INVALID_ARGUMENT
        if ev is None:
            return TIMEOUT
        data = _obj(ref)
        data.device = ctypes.cast(ctypes.c_void_p(_DEV_BASE + ev.gpu), type(data.device))
        if ev.type < 0:
            return GPU_IS_LOST
        data.eventType, data.eventData = ev.type, ev.data
        data.gpuInstanceId, data.computeInstanceId = ev.gpu_instance, ev.compute_instance
        return SUCCESS

    nvmlEventSetWait = nvmlEventSetWait_v2

    @_system
    def nvmlEventSetFree(self, event_set: Any) -> int:
        sid = self._set_id(event_set)
        if sid is None or not self.node.events.free(sid):
            return INVALID_ARGUMENT
        return SUCCESS
