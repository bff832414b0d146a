"""MIG device handles and what they answer (nvmlDeviceGetMigDeviceHandleByIndex, nvmlDeviceIsMigDeviceHandle,
nvmlDeviceGetGpuInstanceId / ComputeInstanceId, and the device calls that take a MIG handle too).

One MIG device per compute instance, indexed by GPU instance id then compute instance id; its
handle is an opaque pointer encoding (GPU, GI id, CI id) (``mig.encode`` with ``MIG_BASE``).
UUID, name, memory and running processes answer for the instance (memory: its GPU instance's,
shared by its compute instances); utilization answers NOT_SUPPORTED, as on real hardware (NVML
cannot attribute utilisation to MIG devices: MIG User Guide, getting-started-with-mig.html).
Any other device call with a MIG handle answers INVALID_ARGUMENT.

The handle-polymorphic symbols pass a whole-GPU handle on to their area's mixin (the next class
in ``FakeNvmlLibrary``'s MRO), so this mixin must come before them.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from ..node import MigError
from ._base import (
    _DEV_BASE,
    INVALID_ARGUMENT,
    NOT_FOUND,
    NOT_SUPPORTED,
    SUCCESS,
    UNINITIALIZED,
    VERSION_MISMATCH,
    _device,
    _obj,
    _out,
    _put_str,
    _set_ptr,
    _v,
)
from .mig import MIG_BASE, decode, encode
from .processes import ProcessesMixin

__all__ = ["MigDevicesMixin"]

_MAX_MIG_DEVICES = 7  # one per compute slice

_MigDevice = tuple[int, Any, Any]  # (GPU index, GPU instance, compute instance)


def _also_mig(fn: Callable[..., int]) -> Callable[..., int]:
    """A device symbol that also takes a MIG handle: ``fn(self, (gpu, gi, ci), *args)`` answers a
    MIG handle, the area mixin's symbol of the same name answers any other handle."""
    name = fn.__name__

    @functools.wraps(fn)
    def call(self: MigDevicesMixin, handle: Any, *args: Any) -> int:
        mig = self._mig_device(handle)
        if mig is None:
            return getattr(super(MigDevicesMixin, self), name)(handle, *args)
        if isinstance(mig, int):
            return mig
        return fn(self, mig, *args)

    return call


class MigDevicesMixin(ProcessesMixin):
    """MIG device handles and the device calls that answer for them."""

    def _mig_device(self, handle: Any) -> _MigDevice | int | None:
        """(GPU, GI, CI) of a MIG device handle; None: not a MIG handle; int: the error to answer."""
        ids = decode(MIG_BASE, handle)
        if ids is None:
            return None
        if not self._refcount:
            return UNINITIALIZED
        gpu, gi_id, ci_id = ids
        if gpu >= self.node.gpu_count:
            return INVALID_ARGUMENT
        err = self.node.device_error(gpu)
        if err:
            return err
        try:
            return gpu, self.node.gpu_instance(gpu, gi_id), self.node.compute_instance(gpu, gi_id, ci_id)
        except MigError:
            return INVALID_ARGUMENT  # the instance behind the handle is gone

    @_device
    def _whole_gpu(self, gpu: int, ref: Any) -> int:
        """nvmlDeviceIsMigDeviceHandle of a whole GPU's handle."""
        _out(ref, 0)
        return SUCCESS

    @_device
    def _not_a_mig_device(self, gpu: int, ref: Any) -> int:
        return NOT_SUPPORTED

    # ---- handles ---------------------------------------------------------------------------
    @_device
    def nvmlDeviceGetMaxMigDeviceCount(self, gpu: int, ref: Any) -> int:
        _out(ref, _MAX_MIG_DEVICES if self._model(gpu).mig_capable else 0)
        return SUCCESS

    @_device
    def nvmlDeviceGetMigDeviceHandleByIndex(self, gpu: int, index: Any, ref: Any) -> int:
        if self.node.mig_geometry(gpu) is None or not self.node.mig_mode(gpu)[0]:
            return NOT_SUPPORTED
        i = _v(index)
        if not 0 <= i < _MAX_MIG_DEVICES:
            return INVALID_ARGUMENT
        devices = self.node.mig_devices(gpu)
        if i >= len(devices):
            return NOT_FOUND
        gi, ci = devices[i]
        _set_ptr(ref, encode(MIG_BASE, gpu, gi.id, ci.id))
        return SUCCESS

    def nvmlDeviceGetDeviceHandleFromMigDeviceHandle(self, handle: Any, ref: Any) -> int:
        mig = self._mig_device(handle)
        if mig is None:
            return INVALID_ARGUMENT if self._refcount else UNINITIALIZED
        if isinstance(mig, int):
            return mig
        _set_ptr(ref, _DEV_BASE + mig[0])
        return SUCCESS

    def nvmlDeviceIsMigDeviceHandle(self, handle: Any, ref: Any) -> int:
        mig = self._mig_device(handle)
        if mig is None:
            return self._whole_gpu(handle, ref)
        if isinstance(mig, int):
            return mig
        _out(ref, 1)
        return SUCCESS

    def nvmlDeviceGetGpuInstanceId(self, handle: Any, ref: Any) -> int:
        mig = self._mig_device(handle)
        if mig is None:
            return self._not_a_mig_device(handle, ref)
        if isinstance(mig, int):
            return mig
        _out(ref, mig[1].id)
        return SUCCESS

    def nvmlDeviceGetComputeInstanceId(self, handle: Any, ref: Any) -> int:
        mig = self._mig_device(handle)
        if mig is None:
            return self._not_a_mig_device(handle, ref)
        if isinstance(mig, int):
            return mig
        _out(ref, mig[2].id)
        return SUCCESS

    # ---- device calls answered for a MIG device --------------------------------------------
    @_also_mig
    def nvmlDeviceGetUUID(self, mig: _MigDevice, buf: Any, length: Any) -> int:
        return _put_str(buf, length, mig[2].uuid)

    @_also_mig
    def nvmlDeviceGetName(self, mig: _MigDevice, buf: Any, length: Any) -> int:
        """"NVIDIA A100-SXM4-80GB MIG 3g.40gb" (the compute instance's profile)."""
        return _put_str(buf, length, f"{self._model(mig[0]).name} MIG {mig[2].profile.name}")

    @_also_mig
    def nvmlDeviceGetMemoryInfo(self, mig: _MigDevice, ref: Any) -> int:
        total, used = self.node.instance_memory(mig[0], mig[1].id)
        m = _obj(ref)
        m.total, m.used, m.free = total, used, total - used
        return SUCCESS

    @_also_mig
    def nvmlDeviceGetMemoryInfo_v2(self, mig: _MigDevice, ref: Any) -> int:
        m = _obj(ref)
        if m.version != 0x02000028:
            return VERSION_MISMATCH
        total, used = self.node.instance_memory(mig[0], mig[1].id)
        m.total, m.reserved, m.used, m.free = total, 0, used, total - used
        return SUCCESS

    @_also_mig
    def nvmlDeviceGetUtilizationRates(self, mig: _MigDevice, ref: Any) -> int:
        return NOT_SUPPORTED

    @_also_mig
    def nvmlDeviceGetComputeRunningProcesses_v3(self, mig: _MigDevice, count: Any, array: Any) -> int:
        gpu, gi, ci = mig
        where = self.node.process_instances()
        procs = [p for p in self.node.processes_on(gpu) if where.get(p["pid"]) == (gi.id, ci.id)]
        return self._fill_processes(gpu, count, array, procs)

    nvmlDeviceGetComputeRunningProcesses_v2 = nvmlDeviceGetComputeRunningProcesses_v3
