"""MIG configuration through NVML: mode, profiles, GPU and compute instances (create, list, destroy).

Everything goes through ``NvmlSession.control``, so a refusal keeps its NVML error: it is raised as
``MigOpError`` whose ``kind`` names it (``KINDS``); GPU lost passes through as ``GpuLostError``.
Profiles are discovered from the driver at run time, never taken from a table: the GPU instance
profile enum (NVML_GPU_INSTANCE_PROFILE_*) is walked from 0 until NVML answers INVALID_ARGUMENT,
a value the GPU lacks (NOT_SUPPORTED) is skipped (../shared/reference/slicing.md §4, nvml.h
``nvmlDeviceGetGpuInstanceProfileInfo``: "iterating the enum from 0 until INVALID_ARGUMENT lists
all profiles"). Compute instance profiles are walked the same way.

Placements count memory slices (0..7 on A100/H100/H200): a GPU instance at {start, size} takes
memory slices start..start+size-1. Ids: a GPU instance's id is the driver's (derived from the
placement on real hardware), a compute instance's id is unique within its GPU instance.

All calls block (NVML): run them in an executor thread, never on the event loop.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from runtimekit.gpu.nvml import NvmlCallError, NvmlSession

__all__ = ["MigProfile", "GpuInstanceInfo", "ComputeInstanceInfo", "MigOpError", "MigControl", "KINDS", "profile_name"]

#: ``MigOpError.kind`` of each NVML error a MIG call answers; any other error is ``error``.
KINDS = {
    "NVML_ERROR_INSUFFICIENT_RESOURCES": "insufficient_resources",  # no room at that placement / none left
    "NVML_ERROR_IN_USE": "in_use",  # compute instances or processes still inside
    "NVML_ERROR_NOT_SUPPORTED": "not_supported",  # no MIG on this GPU, or not in MIG mode
    "NVML_ERROR_INVALID_ARGUMENT": "invalid_argument",  # unknown profile, placement not allowed
    "NVML_ERROR_NOT_FOUND": "not_found",  # no instance with that id
}
_INVALID_ARGUMENT = "NVML_ERROR_INVALID_ARGUMENT"
_NOT_SUPPORTED = "NVML_ERROR_NOT_SUPPORTED"
_NOT_FOUND = "NVML_ERROR_NOT_FOUND"
_FUNCTION_NOT_FOUND = "NVML_ERROR_FUNCTION_NOT_FOUND"
_MIG_DISABLE, _MIG_ENABLE = 0, 1  # NVML_DEVICE_MIG_DISABLE / _ENABLE
_ENGINE_SHARED = 0  # NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED, the only engine profile NVML offers
_MEDIA_ENUMS = (0x7, 0x8)  # NVML_GPU_INSTANCE_PROFILE_{1,2}_SLICE_REV1: the "+me" (media extensions) profiles
_ENUM_LIMIT = 256  # a driver that never answers INVALID_ARGUMENT still ends the walk (nvml.h has 0x12 values)
_GIB = 1 << 30
_MIB = 1 << 20


@dataclass(frozen=True, slots=True)
class MigProfile:
    """One GPU instance profile as the driver reports it (nvmlGpuInstanceProfileInfo_v2_t).

    ``id`` is the profile id every GPU instance call takes (``info.id``: 19, 14, 9, 0 … on A100), not
    the enum value; ``compute_slices`` is ``info.sliceCount``; ``memory_slices`` the size of its
    placements; ``memory_mib`` is ``info.memorySizeMB`` (MiB despite the name); ``placements`` the
    allowed starts in memory slices (nvmlDeviceGetGpuInstancePossiblePlacements_v2, free or not);
    ``instance_count`` is ``info.instanceCount``, the most GPU instances of the profile one GPU holds at
    once (1 for the ``+me`` profiles, whatever their free placements: ../shared/reference/slicing.md
    §3), None when not told (a profile made by hand: no limit but its placements).
    """

    id: int
    name: str
    compute_slices: int
    memory_slices: int
    memory_mib: int
    placements: tuple[int, ...]
    instance_count: int | None = None


@dataclass(frozen=True, slots=True)
class ComputeInstanceInfo:
    """A compute instance (nvmlComputeInstanceGetInfo): its id in the GPU instance, its CI profile id
    (NVML_COMPUTE_INSTANCE_PROFILE_*), and the UUID (``MIG-…``) of its MIG device, None when NVML
    does not tell it."""

    id: int
    profile_id: int
    uuid: str | None


@dataclass(frozen=True, slots=True)
class GpuInstanceInfo:
    """A GPU instance (nvmlGpuInstanceGetInfo): id, profile id, placement {start, size} in memory
    slices and its compute instances by id."""

    id: int
    profile_id: int
    start: int
    size: int
    compute_instances: tuple[ComputeInstanceInfo, ...]


class MigOpError(Exception):
    """NVML refused a MIG operation; ``kind`` is insufficient_resources | in_use | not_supported |
    invalid_argument | not_found | error (``KINDS``); the message names the call and the NVML error."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


def _refused(error: NvmlCallError, what: str) -> MigOpError:
    return MigOpError(KINDS.get(error.name, "error"), f"{what}: {error}")


def profile_name(enum: int, info: Any, device_memory_bytes: int) -> str:
    """A profile's name: NVML's (``info.name``, v2 struct) less its "MIG " prefix, else derived as
    mig-parted does (go-nvlib pkg/nvlib/device/mig_profile.go ``NewMigProfile`` / ``String`` /
    ``getMigMemorySizeGB``): "{slices}g.{GB}gb", "+me" for the media-extension profiles, GB the
    profile's memory rounded up to eighths of the card, times the card's GiB (rounded up), rounded."""
    raw = getattr(info, "name", b"")
    name = (raw.decode(errors="replace") if isinstance(raw, bytes) else str(raw)).strip()
    if name:
        return name.removeprefix("MIG ").strip()
    fraction = math.ceil(int(info.memorySizeMB) * _MIB / device_memory_bytes * 8) / 8
    gb = math.floor(fraction * ((device_memory_bytes + _GIB - 1) // _GIB) + 0.5)  # Go's math.Round
    return f"{int(info.sliceCount)}g.{gb}gb" + ("+me" if enum in _MEDIA_ENUMS else "")


class MigControl:
    """MIG operations on the GPUs of one ``NvmlSession`` (GPUs by NVML index). Blocking calls."""

    def __init__(self, session: NvmlSession) -> None:
        self.session = session
        self._versions: dict[str, int] = {}  # profile info wrapper -> the struct version the driver has

    # ---- plumbing --------------------------------------------------------------------------
    def _call(self, what: str, wrapper: str, *args: Any) -> Any:
        try:
            return self.session.control(wrapper, *args)
        except NvmlCallError as error:
            raise _refused(error, what) from None

    def _device(self, index: int) -> Any:
        return self._call(f"gpu {index}", "nvmlDeviceGetHandleByIndex", index)

    def _walk(self, what: str, wrapper: str, parent: Any, *tail: Any) -> Iterator[tuple[int, Any]]:
        """(enum, info) of every profile the driver has: ``wrapper(parent, enum, *tail)`` for the
        enum from 0 until INVALID_ARGUMENT, NOT_SUPPORTED skipped. pynvml asks for the v2 struct
        (the ``…V`` symbol, R470 and later, which carries the name); a driver without it is asked
        for v1 (no name: ``profile_name`` derives it), and that choice is remembered."""
        version = self._versions.get(wrapper, 2)
        enum = 0
        while enum < _ENUM_LIMIT:
            try:
                info = self.session.control(wrapper, parent, enum, *tail, version=version)
            except NvmlCallError as error:
                if error.name == _FUNCTION_NOT_FOUND and version == 2:
                    version = self._versions[wrapper] = 1
                    continue
                if error.name == _INVALID_ARGUMENT:
                    return
                if error.name != _NOT_SUPPORTED:
                    raise _refused(error, what) from None
            else:
                yield enum, info
            enum += 1

    def _gi_infos(self, index: int, handle: Any) -> list[tuple[int, Any]]:
        return list(self._walk(f"gpu {index}: GPU instance profiles", "nvmlDeviceGetGpuInstanceProfileInfo", handle))

    def _gpu_instance(self, index: int, gpu_instance_id: int) -> tuple[Any, Any]:
        """(device handle, GPU instance handle)."""
        handle = self._device(index)
        what = f"gpu {index}: GPU instance {gpu_instance_id}"
        return handle, self._call(what, "nvmlDeviceGetGpuInstanceById", handle, gpu_instance_id)

    def _mig_uuids(self, index: int, handle: Any) -> dict[tuple[int, int], str]:
        """(GPU instance id, compute instance id) -> MIG device UUID, from the MIG device handles
        (nvmlDeviceGetMigDeviceHandleByIndex; NOT_FOUND marks an empty index). Empty when the driver
        cannot list them."""
        uuids: dict[tuple[int, int], str] = {}
        try:
            for slot in range(int(self.session.control("nvmlDeviceGetMaxMigDeviceCount", handle))):
                try:
                    mig = self.session.control("nvmlDeviceGetMigDeviceHandleByIndex", handle, slot)
                except NvmlCallError as error:
                    if error.name == _NOT_FOUND:
                        continue
                    raise
                ids = (int(self.session.control("nvmlDeviceGetGpuInstanceId", mig)),
                       int(self.session.control("nvmlDeviceGetComputeInstanceId", mig)))
                uuids[ids] = str(self.session.control("nvmlDeviceGetUUID", mig))
        except NvmlCallError:
            return uuids
        return uuids

    def _gi_info(self, index: int, gi: Any, uuids: dict[tuple[int, int], str] | None) -> GpuInstanceInfo:
        """A GPU instance's info; its compute instances too when ``uuids`` is given."""
        info = self._call(f"gpu {index}: GPU instance", "nvmlGpuInstanceGetInfo", gi)
        gi_id = int(info.id)
        cis: list[ComputeInstanceInfo] = []
        if uuids is not None:
            what = f"gpu {index}: GPU instance {gi_id}"
            for _, ci_profile in self._walk(f"{what}: compute instance profiles",
                                            "nvmlGpuInstanceGetComputeInstanceProfileInfo", gi, _ENGINE_SHARED):
                for ci in self._call(what, "nvmlGpuInstanceGetComputeInstances", gi, int(ci_profile.id),
                                     int(ci_profile.instanceCount)):
                    cis.append(self._ci_info(index, gi_id, ci, uuids))
        return GpuInstanceInfo(gi_id, int(info.profileId), int(info.placement.start), int(info.placement.size),
                               tuple(sorted(cis, key=lambda c: c.id)))

    def _ci_info(self, index: int, gi_id: int, ci: Any, uuids: dict[tuple[int, int], str]) -> ComputeInstanceInfo:
        info = self._call(f"gpu {index}: GPU instance {gi_id}: compute instance", "nvmlComputeInstanceGetInfo", ci)
        return ComputeInstanceInfo(int(info.id), int(info.profileId), uuids.get((gi_id, int(info.id))))

    # ---- mode ------------------------------------------------------------------------------
    def mode(self, index: int) -> tuple[bool, bool]:
        """(current, pending) MIG mode (nvmlDeviceGetMigMode); pending differs until a GPU reset."""
        current, pending = self._call(f"gpu {index}: MIG mode", "nvmlDeviceGetMigMode", self._device(index))
        return bool(current), bool(pending)

    def set_mode(self, index: int, enabled: bool) -> bool:
        """Set the pending MIG mode (nvmlDeviceSetMigMode); True when a GPU reset is needed before
        it takes effect (read back: the current mode still differs). Disabling with instances left
        is refused (in_use)."""
        handle = self._device(index)
        what = f"gpu {index}: MIG mode"
        self._call(what, "nvmlDeviceSetMigMode", handle, _MIG_ENABLE if enabled else _MIG_DISABLE)
        current, _ = self._call(what, "nvmlDeviceGetMigMode", handle)
        return bool(current) != enabled

    # ---- profiles and instances ------------------------------------------------------------
    def profiles(self, index: int) -> tuple[MigProfile, ...]:
        """The GPU instance profiles the driver offers now, in enum order (empty when the GPU is
        not in MIG mode: NVML then answers NOT_SUPPORTED for every profile). A profile with no
        possible placement is left out: nothing of it can be created."""
        handle = self._device(index)
        memory_bytes = 0
        out = []
        for enum, info in self._gi_infos(index, handle):
            what = f"gpu {index}: profile {int(info.id)} placements"
            placements = self._call(what, "nvmlDeviceGetGpuInstancePossiblePlacements_v2", handle, int(info.id))
            if not placements:
                continue
            if not getattr(info, "name", b"") and not memory_bytes:
                memory_bytes = int(self._call(f"gpu {index}: memory", "nvmlDeviceGetMemoryInfo", handle).total)
            out.append(MigProfile(int(info.id), profile_name(enum, info, memory_bytes), int(info.sliceCount),
                                  int(placements[0][1]), int(info.memorySizeMB), tuple(s for s, _ in placements),
                                  int(info.instanceCount)))
        return tuple(out)

    def instances(self, index: int) -> tuple[GpuInstanceInfo, ...]:
        """Every GPU instance with its compute instances, by id (nvmlDeviceGetGpuInstances per
        profile, nvmlGpuInstanceGetComputeInstances per CI profile)."""
        handle = self._device(index)
        uuids = self._mig_uuids(index, handle)
        out = []
        for _, info in self._gi_infos(index, handle):
            what = f"gpu {index}: GPU instances of profile {int(info.id)}"
            for gi in self._call(what, "nvmlDeviceGetGpuInstances", handle, int(info.id), int(info.instanceCount)):
                out.append(self._gi_info(index, gi, uuids))
        return tuple(sorted(out, key=lambda g: g.id))

    def create_gpu_instance(self, index: int, profile_id: int, start: int) -> GpuInstanceInfo:
        """Create a GPU instance of ``profile_id`` at memory slice ``start``
        (nvmlDeviceCreateGpuInstanceWithPlacement). invalid_argument for a start the profile does
        not allow; insufficient_resources when it overlaps an instance or no room is left."""
        handle = self._device(index)
        what = f"gpu {index}: create GPU instance of profile {profile_id} at {start}"
        placements = self._call(what, "nvmlDeviceGetGpuInstancePossiblePlacements_v2", handle, profile_id)
        size = next((s for at, s in placements if at == start), None)
        if size is None:
            raise MigOpError("invalid_argument", f"{what}: start must be one of {[at for at, _ in placements]}")
        gi = self._call(what, "nvmlDeviceCreateGpuInstanceWithPlacement", handle, profile_id, start, size)
        return self._gi_info(index, gi, None)

    def create_compute_instance(self, index: int, gpu_instance_id: int) -> ComputeInstanceInfo:
        """Create the one compute instance taking the whole GPU instance: the CI profile whose
        slice count is the GI profile's (the lowest such enum; nvmlGpuInstanceCreateComputeInstance)."""
        handle, gi = self._gpu_instance(index, gpu_instance_id)
        what = f"gpu {index}: GPU instance {gpu_instance_id}: create compute instance"
        profile_id = int(self._call(what, "nvmlGpuInstanceGetInfo", gi).profileId)
        slices = next((int(i.sliceCount) for _, i in self._gi_infos(index, handle) if int(i.id) == profile_id), None)
        ci_profile = next((int(i.id) for _, i in self._walk(what, "nvmlGpuInstanceGetComputeInstanceProfileInfo", gi, _ENGINE_SHARED)
                           if int(i.sliceCount) == slices), None)
        if ci_profile is None:
            raise MigOpError("not_supported", f"{what}: no compute instance profile of {slices} slices")
        ci = self._call(what, "nvmlGpuInstanceCreateComputeInstance", gi, ci_profile)
        return self._ci_info(index, gpu_instance_id, ci, self._mig_uuids(index, handle))

    def destroy_compute_instance(self, index: int, gpu_instance_id: int, compute_instance_id: int) -> None:
        """Destroy a compute instance (nvmlComputeInstanceDestroy); in_use while processes run in it."""
        _, gi = self._gpu_instance(index, gpu_instance_id)
        what = f"gpu {index}: GPU instance {gpu_instance_id}: compute instance {compute_instance_id}"
        ci = self._call(what, "nvmlGpuInstanceGetComputeInstanceById", gi, compute_instance_id)
        self._call(what, "nvmlComputeInstanceDestroy", ci)

    def destroy_gpu_instance(self, index: int, gpu_instance_id: int) -> None:
        """Destroy a GPU instance (nvmlGpuInstanceDestroy); in_use while it has compute instances or processes."""
        _, gi = self._gpu_instance(index, gpu_instance_id)
        self._call(f"gpu {index}: GPU instance {gpu_instance_id}", "nvmlGpuInstanceDestroy", gi)
