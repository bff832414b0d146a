"""``sim record``'s MIG part: a GPU's MIG mode and instances as its scenario ``mig:`` entry.

Read through the recording's ``NvmlSession`` (pynvml's wrappers; errors come back as
``Unavailable``), so a driver without the MIG API, a part without MIG or a failing call leaves
the entry out instead of failing the recording. GPU instance profiles are found as NVML documents
it (nvml.h): ``nvmlDeviceGetGpuInstanceProfileInfo`` for each enum
value until ``NVML_GPU_INSTANCE_PROFILE_COUNT``, the ones that answer being the part's; then
``nvmlDeviceGetGpuInstances`` per profile id, ``nvmlGpuInstanceGetInfo`` for the placement, and
the same for compute instances inside each GPU instance.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from typing import Any

from runtimekit.gpu.convert import nvml_text
from runtimekit.gpu.nvml import NvmlSession
from runtimekit.gpu.types import GpuSnapshot, is_available

from .mig_profiles import geometry_for

__all__ = ["read_mig"]

MiB = 1 << 20
_GI_PROFILE_ENUMS = range(0x12)  # NVML_GPU_INSTANCE_PROFILE_1_SLICE .. _COUNT (pynvml 13.615.71)
_CI_PROFILE_ENUMS = range(0x9)  # NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE .. _COUNT
_ENGINE_SHARED = 0  # NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED


def _handles(session: NvmlSession, symbol: str, parent: Any, profile_id: int, most: int) -> list[Any]:
    """The GPU or compute instance handles of one profile (nvmlDeviceGetGpuInstances,
    nvmlGpuInstanceGetComputeInstances, through the session's array-sizing wrappers); [] when the
    call failed."""
    handles = session.call(symbol, parent, profile_id, most)
    return list(handles) if is_available(handles) else []


def _compute_instances(session: NvmlSession, gi: ctypes.c_void_p) -> list[str]:
    """Profile names of a GPU instance's compute instances, by CI profile."""
    names: list[str] = []
    for enum in _CI_PROFILE_ENUMS:
        info = session.call("nvmlGpuInstanceGetComputeInstanceProfileInfo", gi, enum, _ENGINE_SHARED)
        if is_available(info):
            found = _handles(session, "nvmlGpuInstanceGetComputeInstances", gi, info.id, info.instanceCount)
            names += [nvml_text(info.name)] * len(found)
    return names


def read_mig(session: NvmlSession, gpu: GpuSnapshot, placeholder: Callable[[str], None],
             estimate: Callable[[str], None]) -> dict[str, Any] | None:
    """``{enabled: true, instances: [{profile, placement, compute_instances}]}`` for a GPU in MIG
    mode, by GPU instance id (none listed when no GPU instance can be read; ``placeholder`` says
    so); None when MIG is off or its mode cannot be read."""
    modes = gpu.modes
    if modes is None or not is_available(modes.mig_mode_current) or not modes.mig_mode_current:
        return None
    name = gpu.identity.name if is_available(gpu.identity.name) else ""
    memory = gpu.limits.memory_total_bytes
    if geometry_for(name, int(memory) // MiB if is_available(memory) else 0) is None:
        placeholder(f"gpus[{gpu.index}].mig: MIG is on, but the simulator has no MIG table for {name!r}; left out")
        return None
    handle = session.call("nvmlDeviceGetHandleByIndex", gpu.index)
    instances: list[tuple[int, dict[str, Any]]] = []
    for enum in _GI_PROFILE_ENUMS if is_available(handle) else ():
        info = session.call("nvmlDeviceGetGpuInstanceProfileInfo", handle, enum)
        if not is_available(info):
            continue  # a profile this part does not have (NOT_SUPPORTED), or no MIG API
        for gi in _handles(session, "nvmlDeviceGetGpuInstances", handle, info.id, info.instanceCount):
            gi_info = session.call("nvmlGpuInstanceGetInfo", gi)
            if is_available(gi_info):
                entry = {"profile": nvml_text(info.name), "placement": int(gi_info.placement.start),
                         "compute_instances": _compute_instances(session, gi)}
                instances.append((int(gi_info.id), entry))
    if not instances:
        placeholder(f"gpus[{gpu.index}].mig: in MIG mode, but no GPU instance could be read")
    else:
        estimate(f"gpus[{gpu.index}].mig: GPU and compute instance ids are not recorded (the simulator numbers them anew)")
    return {"enabled": True, "instances": [entry for _, entry in sorted(instances, key=lambda pair: pair[0])]}
