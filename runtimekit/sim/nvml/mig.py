"""MIG management: mode and GPU instances (nvmlDeviceSetMigMode, nvmlDevice*GpuInstance*, nvmlGpuInstanceGetInfo,
nvmlGpuInstanceDestroy); compute instances are ``mig_compute``, MIG device handles ``mig_devices``.

The driver-side model is ``node.mig`` (``MigPart``); refusals arrive as ``MigError`` and are
answered with its NVML error (``MIG_KINDS``). Every GPU and compute instance call on a GPU
without MIG, or not in MIG mode, answers NOT_SUPPORTED. GPU instance profile ids are the real
ids (``info.id``: 19, 15, 14, 9, 5, 0 ...); compute instance profile ids are their enum values.

GPU instance and compute instance handles are opaque pointers encoding (GPU, GI id, CI id)
(``encode``); nothing dereferences them.
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Callable
from typing import Any

from ..mig_profiles import GiProfile, MigGeometry
from ..node import MigError
from ..node.mig import MIG_KINDS
from ._base import (
    _DEV_BASE,
    INSUFFICIENT_SIZE,
    INVALID_ARGUMENT,
    NOT_SUPPORTED,
    SUCCESS,
    UNINITIALIZED,
    VERSION_MISMATCH,
    _device,
    _LibraryBase,
    _obj,
    _out,
    _ptr,
    _set_ptr,
    _v,
)

__all__ = ["MigMixin", "encode", "decode", "GI_BASE", "CI_BASE", "MIG_BASE", "refusals", "on_gi", "put_handles",
           "put_placements", "placement_of", "handle_of"]

RESET_REQUIRED = 16  # NVML_ERROR_RESET_REQUIRED: activationStatus of a mode change pending until a reset
MIG_BASE = 0x7E57_0010_0000  # MIG device handles
GI_BASE = 0x7E57_0020_0000  # GPU instance handles
CI_BASE = 0x7E57_0030_0000  # compute instance handles
_SPAN = 0x10_0000
_GI_PROFILE_COUNT = 0x12  # NVML_GPU_INSTANCE_PROFILE_COUNT
_GI_INFO_V2 = 0x02000098  # nvmlGpuInstanceProfileInfo_v2


def encode(base: int, gpu: int, gi: int, ci: int = 0) -> int:
    """The handle value of (GPU index, GPU instance id, compute instance id) in ``base``'s range."""
    return base + gpu * 0x100 + gi * 0x10 + ci


def decode(base: int, handle: Any) -> tuple[int, int, int] | None:
    """(GPU index, GPU instance id, compute instance id) of a handle in ``base``'s range, else None."""
    addr = _ptr(handle)
    if addr is None or not 0 <= addr - base < _SPAN:
        return None
    off = addr - base
    return off >> 8, (off >> 4) & 0xF, off & 0xF


def refusals(fn: Callable[..., int]) -> Callable[..., int]:
    """Answer a ``MigError`` raised by the node with its NVML error."""

    @functools.wraps(fn)
    def call(*args: Any) -> int:
        try:
            return fn(*args)
        except MigError as exc:
            return MIG_KINDS[exc.kind]

    return call


def placement_of(ref: Any) -> Any:
    """A structure passed by value, by ``byref`` or as a ``pointer``."""
    obj = _obj(ref)
    return obj.contents if hasattr(obj, "contents") else obj


def put_handles(array: Any, count_ref: Any, addrs: list[int]) -> int:
    """Write handles into a caller's array of pointers; the count is how many there are."""
    count = _obj(count_ref)
    count.value = len(addrs)
    if array is None:
        return SUCCESS
    arr = _obj(array)
    if len(arr) < len(addrs):
        return INSUFFICIENT_SIZE
    size = ctypes.sizeof(ctypes.c_void_p)
    for i, addr in enumerate(addrs):
        ctypes.c_void_p.from_buffer(arr, i * size).value = addr
    return SUCCESS


def put_placements(array: Any, count_ref: Any, starts: tuple[int, ...], size: int) -> int:
    """Fill {start, size} placements; with no array only the count (the usual first call)."""
    count = _obj(count_ref)
    if array is None:
        count.value = len(starts)
        return SUCCESS
    if count.value < len(starts):
        count.value = len(starts)
        return INSUFFICIENT_SIZE
    arr = _obj(array)
    for i, start in enumerate(starts):
        arr[i].start, arr[i].size = start, size
    count.value = len(starts)
    return SUCCESS


def handle_of(addr: int, field_type: Any) -> Any:
    return ctypes.cast(ctypes.c_void_p(addr), field_type)


def on_gi(fn: Callable[..., int]) -> Callable[..., int]:
    """Wrap a symbol taking a GPU instance handle: init, handle -> (GPU, instance), device errors."""

    @functools.wraps(fn)
    @refusals
    def call(self: MigMixin, handle: Any, *args: Any) -> int:
        if not self._refcount:
            return UNINITIALIZED
        ids = decode(GI_BASE, handle)
        if ids is None or ids[0] >= self.node.gpu_count:
            return INVALID_ARGUMENT
        err = self.node.device_error(ids[0])
        if err:
            return err
        try:
            gi = self.node.gpu_instance(ids[0], ids[1])
        except MigError:
            return INVALID_ARGUMENT  # a handle of an instance that is gone
        return fn(self, ids[0], gi, *args)

    return call


def _fill_gi_info(info: Any, p: GiProfile) -> None:
    info.id, info.isP2pSupported, info.sliceCount, info.instanceCount = p.id, 0, p.compute_slices, p.instance_count
    info.multiprocessorCount, info.copyEngineCount, info.decoderCount = p.sms, p.copy_engines, p.decoders
    info.encoderCount, info.jpegCount, info.ofaCount, info.memorySizeMB = 0, p.jpegs, p.ofas, p.memory_mib


class MigMixin(_LibraryBase):
    """MIG mode and GPU instances."""

    def _geometry_on(self, gpu: int) -> MigGeometry | None:
        """The GPU's MIG geometry when it is in MIG mode, else None (answer NOT_SUPPORTED)."""
        geometry = self.node.mig_geometry(gpu)
        return geometry if geometry is not None and self.node.mig_mode(gpu)[0] else None

    # ---- mode ------------------------------------------------------------------------------
    @_device
    def nvmlDeviceGetMigMode(self, gpu: int, current: Any, pending: Any) -> int:
        if self.node.mig_geometry(gpu) is None:
            return NOT_SUPPORTED
        now, then = self.node.mig_mode(gpu)
        _out(current, int(now))
        _out(pending, int(then))
        return SUCCESS

    @_device
    @refusals
    def nvmlDeviceSetMigMode(self, gpu: int, mode: Any, status: Any) -> int:
        """Sets the pending mode; activationStatus is NVML_ERROR_RESET_REQUIRED until a GPU reset."""
        if _v(mode) not in (0, 1):
            return INVALID_ARGUMENT
        needs_reset = self.node.set_mig_mode(gpu, bool(_v(mode)))
        _out(status, RESET_REQUIRED if needs_reset else SUCCESS)
        return SUCCESS

    # ---- GPU instance profiles -------------------------------------------------------------
    def _gi_profile_info(self, profile: GiProfile, ref: Any, versioned: bool) -> int:
        info = _obj(ref)
        if versioned and info.version != _GI_INFO_V2:
            return VERSION_MISMATCH
        _fill_gi_info(info, profile)
        if versioned:
            info.name = profile.name.encode()
        return SUCCESS

    def _by_enum(self, gpu: int, enum: Any) -> GiProfile | int:
        if not 0 <= _v(enum) < _GI_PROFILE_COUNT:
            return INVALID_ARGUMENT
        geometry = self._geometry_on(gpu)
        profile = geometry.by_enum(_v(enum)) if geometry else None
        return NOT_SUPPORTED if profile is None else profile

    @_device
    def nvmlDeviceGetGpuInstanceProfileInfo(self, gpu: int, enum: Any, ref: Any) -> int:
        p = self._by_enum(gpu, enum)
        return p if isinstance(p, int) else self._gi_profile_info(p, ref, False)

    @_device
    def nvmlDeviceGetGpuInstanceProfileInfoV(self, gpu: int, enum: Any, ref: Any) -> int:
        p = self._by_enum(gpu, enum)
        return p if isinstance(p, int) else self._gi_profile_info(p, ref, True)

    @_device
    def nvmlDeviceGetGpuInstanceProfileInfoByIdV(self, gpu: int, profile_id: Any, ref: Any) -> int:
        p = self._by_id(gpu, profile_id)
        return p if isinstance(p, int) else self._gi_profile_info(p, ref, True)

    def _by_id(self, gpu: int, profile_id: Any) -> GiProfile | int:
        geometry = self._geometry_on(gpu)
        if geometry is None:
            return NOT_SUPPORTED
        p = geometry.by_id(_v(profile_id))
        return INVALID_ARGUMENT if p is None else p

    @_device
    def nvmlDeviceGetGpuInstancePossiblePlacements_v2(self, gpu: int, profile_id: Any, placements: Any, count: Any) -> int:
        """Every legal placement of the profile, free or not (as nvml.h says)."""
        p = self._by_id(gpu, profile_id)
        return p if isinstance(p, int) else put_placements(placements, count, p.starts, p.memory_slices)

    @_device
    @refusals
    def nvmlDeviceGetGpuInstanceRemainingCapacity(self, gpu: int, profile_id: Any, ref: Any) -> int:
        p = self._by_id(gpu, profile_id)
        if isinstance(p, int):
            return p
        _out(ref, self.node.remaining_gpu_instances(gpu, p.id))
        return SUCCESS

    # ---- GPU instances ---------------------------------------------------------------------
    @_device
    @refusals
    def nvmlDeviceCreateGpuInstance(self, gpu: int, profile_id: Any, ref: Any) -> int:
        p = self._by_id(gpu, profile_id)
        if isinstance(p, int):
            return p
        gi = self.node.create_gpu_instance(gpu, p.id)
        _set_ptr(ref, encode(GI_BASE, gpu, gi.id))
        return SUCCESS

    @_device
    @refusals
    def nvmlDeviceCreateGpuInstanceWithPlacement(self, gpu: int, profile_id: Any, placement: Any, ref: Any) -> int:
        p = self._by_id(gpu, profile_id)
        if isinstance(p, int):
            return p
        where = placement_of(placement)
        if where.size != p.memory_slices:
            return INVALID_ARGUMENT
        gi = self.node.create_gpu_instance(gpu, p.id, int(where.start))
        _set_ptr(ref, encode(GI_BASE, gpu, gi.id))
        return SUCCESS

    @_device
    def nvmlDeviceGetGpuInstances(self, gpu: int, profile_id: Any, array: Any, count: Any) -> int:
        p = self._by_id(gpu, profile_id)
        if isinstance(p, int):
            return p
        ids = [gi.id for gi in self.node.gpu_instances(gpu) if gi.profile.id == p.id]
        return put_handles(array, count, [encode(GI_BASE, gpu, i) for i in ids])

    @_device
    @refusals
    def nvmlDeviceGetGpuInstanceById(self, gpu: int, gi_id: Any, ref: Any) -> int:
        if self._geometry_on(gpu) is None:
            return NOT_SUPPORTED
        gi = self.node.gpu_instance(gpu, _v(gi_id))
        _set_ptr(ref, encode(GI_BASE, gpu, gi.id))
        return SUCCESS

    @on_gi
    def nvmlGpuInstanceGetInfo(self, gpu: int, gi: Any, ref: Any) -> int:
        info = _obj(ref)
        info.device = handle_of(_DEV_BASE + gpu, type(info.device))
        info.id, info.profileId = gi.id, gi.profile.id
        info.placement.start, info.placement.size = gi.start, gi.profile.memory_slices
        return SUCCESS

    @on_gi
    def nvmlGpuInstanceDestroy(self, gpu: int, gi: Any) -> int:
        """IN_USE while the instance has compute instances or processes."""
        self.node.destroy_gpu_instance(gpu, gi.id)
        return SUCCESS
