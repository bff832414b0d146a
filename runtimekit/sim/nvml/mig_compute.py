"""MIG compute instances (nvmlGpuInstance*ComputeInstance*, nvmlComputeInstance*), inside the GPU
instances of ``mig``: profiles (their ids are their NVML_COMPUTE_INSTANCE_PROFILE_* enum values),
placements in the GPU instance's compute slices, creation, listing and destruction. Refusals come
from the node as ``MigError`` and are answered with their NVML error (``mig.refusals``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from ..mig_profiles import CiProfile, GiProfile, ci_conflict, ci_profile
from ..node import MigError
from ._base import (
    _DEV_BASE,
    INVALID_ARGUMENT,
    NOT_SUPPORTED,
    SUCCESS,
    UNINITIALIZED,
    VERSION_MISMATCH,
    _LibraryBase,
    _obj,
    _out,
    _set_ptr,
    _v,
)
from .mig import CI_BASE, GI_BASE, decode, encode, handle_of, on_gi, placement_of, put_handles, put_placements, refusals

__all__ = ["ComputeInstancesMixin"]

_CI_PROFILE_COUNT = 0x9  # NVML_COMPUTE_INSTANCE_PROFILE_COUNT
_CI_INFO_V2 = 0x02000088  # nvmlComputeInstanceProfileInfo_v2


def _on_ci(fn: Callable[..., int]) -> Callable[..., int]:
    """Wrap a symbol taking a compute instance handle, as ``on_gi``."""

    @functools.wraps(fn)
    @refusals
    def call(self: ComputeInstancesMixin, handle: Any, *args: Any) -> int:
        if not self._refcount:
            return UNINITIALIZED
        ids = decode(CI_BASE, handle)
        if ids is None or ids[0] >= self.node.gpu_count:
            return INVALID_ARGUMENT
        err = self.node.device_error(ids[0])
        if err:
            return err
        try:
            gi = self.node.gpu_instance(ids[0], ids[1])
            ci = self.node.compute_instance(ids[0], ids[1], ids[2])
        except MigError:
            return INVALID_ARGUMENT
        return fn(self, ids[0], gi, ci, *args)

    return call


def _fill_ci_info(info: Any, gi: GiProfile, p: CiProfile) -> None:
    info.id, info.sliceCount, info.instanceCount, info.multiprocessorCount = p.id, p.compute_slices, len(p.starts), p.sms
    info.sharedCopyEngineCount, info.sharedDecoderCount, info.sharedEncoderCount = gi.copy_engines, gi.decoders, 0
    info.sharedJpegCount, info.sharedOfaCount = gi.jpegs, gi.ofas


class ComputeInstancesMixin(_LibraryBase):
    """MIG compute instances."""

    def _ci_profile(self, gi: Any, profile: Any) -> CiProfile | int:
        return ci_profile(gi.profile, _v(profile)) or INVALID_ARGUMENT

    def _ci_profile_info(self, gi: Any, profile: Any, eng: Any, ref: Any, versioned: bool) -> int:
        info = _obj(ref)
        if versioned and info.version != _CI_INFO_V2:
            return VERSION_MISMATCH
        if not 0 <= _v(profile) < _CI_PROFILE_COUNT or _v(eng) != 0:  # 0: ENGINE_PROFILE_SHARED
            return INVALID_ARGUMENT
        p = ci_profile(gi.profile, _v(profile))
        if p is None:
            return NOT_SUPPORTED
        _fill_ci_info(info, gi.profile, p)
        if versioned:
            info.name = p.name.encode()
        return SUCCESS

    @on_gi
    def nvmlGpuInstanceGetComputeInstanceProfileInfo(self, gpu: int, gi: Any, profile: Any, eng: Any, ref: Any) -> int:
        return self._ci_profile_info(gi, profile, eng, ref, False)

    @on_gi
    def nvmlGpuInstanceGetComputeInstanceProfileInfoV(self, gpu: int, gi: Any, profile: Any, eng: Any, ref: Any) -> int:
        return self._ci_profile_info(gi, profile, eng, ref, True)

    @on_gi
    def nvmlGpuInstanceGetComputeInstancePossiblePlacements(self, gpu: int, gi: Any, profile: Any, placements: Any,
                                                            count: Any) -> int:
        p = self._ci_profile(gi, profile)
        return p if isinstance(p, int) else put_placements(placements, count, p.starts, p.compute_slices)

    @on_gi
    def nvmlGpuInstanceGetComputeInstanceRemainingCapacity(self, gpu: int, gi: Any, profile: Any, ref: Any) -> int:
        p = self._ci_profile(gi, profile)
        if isinstance(p, int):
            return p
        taken = [(c.profile, c.start) for c in gi.cis.values()]
        free = [s for s in p.starts if ci_conflict(taken, p, s) is None]
        _out(ref, len(free))
        return SUCCESS

    @on_gi
    def nvmlGpuInstanceCreateComputeInstance(self, gpu: int, gi: Any, profile: Any, ref: Any) -> int:
        p = self._ci_profile(gi, profile)
        if isinstance(p, int):
            return p
        ci = self.node.create_compute_instance(gpu, gi.id, p.id)
        _set_ptr(ref, encode(CI_BASE, gpu, gi.id, ci.id))
        return SUCCESS

    @on_gi
    def nvmlGpuInstanceCreateComputeInstanceWithPlacement(self, gpu: int, gi: Any, profile: Any, placement: Any,
                                                          ref: Any) -> int:
        p = self._ci_profile(gi, profile)
        if isinstance(p, int):
            return p
        where = placement_of(placement)
        if where.size != p.compute_slices:
            return INVALID_ARGUMENT
        ci = self.node.create_compute_instance(gpu, gi.id, p.id, int(where.start))
        _set_ptr(ref, encode(CI_BASE, gpu, gi.id, ci.id))
        return SUCCESS

    @on_gi
    def nvmlGpuInstanceGetComputeInstances(self, gpu: int, gi: Any, profile: Any, array: Any, count: Any) -> int:
        p = self._ci_profile(gi, profile)
        if isinstance(p, int):
            return p
        ids = sorted(c.id for c in gi.cis.values() if c.profile.id == p.id)
        return put_handles(array, count, [encode(CI_BASE, gpu, gi.id, i) for i in ids])

    @on_gi
    def nvmlGpuInstanceGetComputeInstanceById(self, gpu: int, gi: Any, ci_id: Any, ref: Any) -> int:
        ci = self.node.compute_instance(gpu, gi.id, _v(ci_id))
        _set_ptr(ref, encode(CI_BASE, gpu, gi.id, ci.id))
        return SUCCESS

    @_on_ci
    def nvmlComputeInstanceGetInfo_v2(self, gpu: int, gi: Any, ci: Any, ref: Any) -> int:
        info = _obj(ref)
        info.device = handle_of(_DEV_BASE + gpu, type(info.device))
        info.gpuInstance = handle_of(encode(GI_BASE, gpu, gi.id), type(info.gpuInstance))
        info.id, info.profileId = ci.id, ci.profile.id
        info.placement.start, info.placement.size = ci.start, ci.profile.compute_slices
        return SUCCESS

    nvmlComputeInstanceGetInfo = nvmlComputeInstanceGetInfo_v2

    @_on_ci
    def nvmlComputeInstanceDestroy(self, gpu: int, gi: Any, ci: Any) -> int:
        """IN_USE while processes run in the instance."""
        self.node.destroy_compute_instance(gpu, gi.id, ci.id)
        return SUCCESS
