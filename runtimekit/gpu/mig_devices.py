"""The MIG devices of a GPU in MIG mode, read through NVML on the parent GPU's handle.

Each cycle, for every index below nvmlDeviceGetMaxMigDeviceCount: the MIG device's handle
(nvmlDeviceGetMigDeviceHandleByIndex; NVML_ERROR_NOT_FOUND: no device at that index, as go-nvlib's
``VisitMigDevices`` skips it), its UUID (nvmlDeviceGetUUID) and its memory (nvmlDeviceGetMemoryInfo
on the MIG handle, bytes: the GPU instance's, shared by its compute instances). What cannot change
while the instance exists is read once per MIG UUID (a new instance has a new UUID) and kept while
the device is listed: the GPU and compute instance ids (nvmlDeviceGetGpuInstanceId /
ComputeInstanceId), the GPU instance's profile and placement (nvmlDeviceGetGpuInstanceById ->
nvmlGpuInstanceGetInfo -> nvmlDeviceGetGpuInstanceProfileInfoByIdV; profiles cached per GPU). So a
known device costs 3 NVML calls a cycle, and a created or destroyed instance shows in the next one.
A device whose profile or placement failed with a real NVML error is not kept: it is identified
again next cycle, and until then its failed fields are Unavailable (reading errors of the snapshot,
``mig_devices[<index>].<field>``). A device that cannot be listed at all (its handle, UUID or
instance ids failed), like a failed count, is the listing's failure (``mig_devices``): the number
of devices is then unknown.

Utilization is never read: NVML cannot attribute it to a MIG device (MIG User Guide,
getting-started-with-mig.html; nvmlDeviceGetUtilizationRates answers NOT_SUPPORTED there).
Blocking, like all of runtimekit.gpu: run from the sampler's executor thread.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from runtimekit.gpu.convert import map_reading, nvml_text
from runtimekit.gpu.nvml import NvmlSession
from runtimekit.gpu.types import GpuIdentity, MigDevice, Reading, Unavailable, failed, is_available
from runtimekit.state.refs import GpuRef, MigRef, PciAddress

MigReading = tuple[tuple[MigDevice, ...], Unavailable | None]  # the devices, and a real error met reading them


class MigDeviceReader:
    """Reads the MIG devices of each GPU; keeps what does not change per MIG UUID between cycles."""

    def __init__(self, session: NvmlSession) -> None:
        self.session = session
        self._known: dict[int, dict[str, MigDevice]] = {}  # GPU index -> MIG UUID -> device as last read
        self._profiles: dict[tuple[int, int], Any] = {}  # (GPU index, GI profile id) -> NVML profile info

    def read(self, index: int, handle: Any, identity: GpuIdentity, enabled: Reading[bool]) -> MigReading:
        """The MIG devices of GPU ``index`` (``handle``), by NVML index; () when MIG mode is not in
        effect (``enabled`` is the current MIG mode) or the GPU's UUID is unknown (no parent to name).
        Raises GpuLostError like every NVML read."""
        if enabled is not True or not is_available(identity.uuid):
            self.forget(index)
            return (), None
        count = self.session.call("nvmlDeviceGetMaxMigDeviceCount", handle)
        if not is_available(count):
            return (), _real(count)
        parent = GpuRef(identity.uuid, index, _pci(identity.pci_bus_id))
        known = self._known.get(index, {})
        found: dict[str, MigDevice] = {}
        failure: Unavailable | None = None
        for position in range(count):
            device = self._read_one(handle, parent, position, known)
            if isinstance(device, Unavailable):
                failure = failure or _real(device)
            elif device is not None:
                found[device.uuid] = device
        self._known[index] = {uuid: device for uuid, device in found.items() if _identified(device)}
        return tuple(found.values()), failure

    def forget(self, index: int) -> None:
        """Drop what is kept for GPU ``index`` (MIG mode off, or the GPU gone)."""
        self._known.pop(index, None)
        for key in [key for key in self._profiles if key[0] == index]:
            del self._profiles[key]

    def _read_one(self, handle: Any, parent: GpuRef, position: int, known: dict[str, MigDevice]) -> MigDevice | Unavailable | None:
        """The MIG device at ``position``; None when there is none there, Unavailable when unreadable."""
        call = self.session.call
        mig = call("nvmlDeviceGetMigDeviceHandleByIndex", handle, position)
        if not is_available(mig):
            return None if mig.detail.endswith("NVML_ERROR_NOT_FOUND") else mig
        uuid = map_reading(call("nvmlDeviceGetUUID", mig), nvml_text)
        if not is_available(uuid):
            return uuid
        memory = call("nvmlDeviceGetMemoryInfo", mig)
        dynamic: dict[str, Any] = {
            "index": position,
            "memory_total_bytes": map_reading(memory, lambda m: int(m.total)),
            "memory_used_bytes": map_reading(memory, lambda m: int(m.used)),
        }
        device = known.get(uuid)
        return replace(device, **dynamic) if device is not None else self._identify(handle, mig, parent, uuid, dynamic)

    def _identify(self, handle: Any, mig: Any, parent: GpuRef, uuid: str, dynamic: dict[str, Any]) -> MigDevice | Unavailable:
        """A MIG device not yet identified: what it keeps while it exists (its instance ids, its GPU
        instance's profile and placement), with this cycle's ``dynamic`` fields."""
        call = self.session.call
        gpu_instance = call("nvmlDeviceGetGpuInstanceId", mig)
        if not is_available(gpu_instance):
            return gpu_instance
        compute_instance = call("nvmlDeviceGetComputeInstanceId", mig)
        if not is_available(compute_instance):
            return compute_instance
        instance = call("nvmlDeviceGetGpuInstanceById", handle, gpu_instance)
        info = map_reading(instance, lambda gi: call("nvmlGpuInstanceGetInfo", gi))
        profile_id = map_reading(info, lambda i: int(i.profileId))
        profile = map_reading(profile_id, lambda pid: self._profile(parent.index, handle, pid))
        return MigDevice(
            ref=MigRef(parent, int(gpu_instance), int(compute_instance), uuid),
            profile=map_reading(profile, lambda p: nvml_text(p.name)),
            profile_id=profile_id,
            placement_start=map_reading(info, lambda i: int(i.placement.start)),
            compute_slices=map_reading(profile, lambda p: int(p.sliceCount)),
            multiprocessors=map_reading(profile, lambda p: int(p.multiprocessorCount)),
            **dynamic,
        )

    def _profile(self, index: int, handle: Any, profile_id: int) -> Any:
        """NVML's GPU instance profile info (name, sliceCount, multiprocessorCount), cached per GPU."""
        key = (index, profile_id)
        if key not in self._profiles:
            info = self.session.call("nvmlDeviceGetGpuInstanceProfileInfoByIdV", handle, profile_id)
            if not is_available(info):
                return info  # read again at the next identification (a device it failed for is not kept)
            self._profiles[key] = info
        return self._profiles[key]


def _identified(device: MigDevice) -> bool:
    """False when a field read once per MIG UUID failed with a real error: not kept, read again."""
    kept = (device.profile, device.profile_id, device.placement_start, device.compute_slices, device.multiprocessors)
    return not any(failed(value) for value in kept)


def _real(value: Unavailable) -> Unavailable | None:
    """``value`` when it is a real error (not "not supported" nor a missing function), else None."""
    return value if failed(value) else None


def _pci(bus_id: Reading[str]) -> PciAddress | None:
    return PciAddress.parse(bus_id) if is_available(bus_id) else None
