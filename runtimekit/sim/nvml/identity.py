"""Device identity, PCI info, CPU/memory affinity and modes (name, UUID, serial, PCI, NUMA, compute mode; MIG: ``mig``)."""

from __future__ import annotations

from typing import Any

from ._base import CORRUPTED_INFOROM, NOT_SUPPORTED, SUCCESS, _device, _fill_pci, _LibraryBase, _obj, _out, _put_str, _v

__all__ = ["IdentityMixin"]

def _cpu_mask(cpulist: str, words: int) -> list[int]:
    """A "0-55,112-167" list as 64-bit mask words (nvmlDeviceGetCpuAffinity layout); CPUs past
    the ``words`` the caller asked for are left out (and never visited)."""
    out = [0] * words
    for part in cpulist.split(","):
        lo, _, hi = part.partition("-")
        for cpu in range(int(lo), min(int(hi or lo), words * 64 - 1) + 1):
            out[cpu // 64] |= 1 << (cpu % 64)
    return out



class IdentityMixin(_LibraryBase):
    """Device identity, PCI info, CPU/memory affinity and modes (name, UUID, serial, PCI, NUMA, compute mode; MIG: ``mig``)."""

    @_device
    def nvmlDeviceGetIndex(self, gpu: int, ref: Any) -> int:
        _out(ref, gpu)
        return SUCCESS

    @_device
    def nvmlDeviceGetMinorNumber(self, gpu: int, ref: Any) -> int:
        _out(ref, gpu)
        return SUCCESS

    @_device
    def nvmlDeviceGetUUID(self, gpu: int, buf: Any, length: Any) -> int:
        return _put_str(buf, length, self.node.gpu(gpu).uuid)

    @_device
    def nvmlDeviceGetName(self, gpu: int, buf: Any, length: Any) -> int:
        return _put_str(buf, length, self._model(gpu).name)

    @_device
    def nvmlDeviceGetSerial(self, gpu: int, buf: Any, length: Any) -> int:
        return _put_str(buf, length, self.node.gpu(gpu).serial)

    @_device
    def nvmlDeviceGetVbiosVersion(self, gpu: int, buf: Any, length: Any) -> int:
        return _put_str(buf, length, self._model(gpu).vbios_version)

    @_device
    def nvmlDeviceGetBoardPartNumber(self, gpu: int, buf: Any, length: Any) -> int:
        return _put_str(buf, length, self._model(gpu).board_part_number)

    @_device
    def nvmlDeviceGetBrand(self, gpu: int, ref: Any) -> int:
        _out(ref, 14 if self._model(gpu).architecture == "hopper" else 2)  # NVIDIA / TESLA
        return SUCCESS

    @_device
    def nvmlDeviceGetArchitecture(self, gpu: int, ref: Any) -> int:
        _out(ref, self._model(gpu).arch_code)
        return SUCCESS

    @_device
    def nvmlDeviceGetCudaComputeCapability(self, gpu: int, major: Any, minor: Any) -> int:
        cc = self._model(gpu).compute_capability
        _out(major, cc[0])
        _out(minor, cc[1])
        return SUCCESS

    @_device
    def nvmlDeviceGetPciInfo_v3(self, gpu: int, ref: Any) -> int:
        m = self._model(gpu)
        _fill_pci(_obj(ref), self.node.gpu(gpu).pci_bus_id, m.pci_device_id, m.pci_subsystem_id)
        return SUCCESS

    nvmlDeviceGetPciInfo_v2 = nvmlDeviceGetPciInfo_v3
    nvmlDeviceGetPciInfo = nvmlDeviceGetPciInfo_v3

    @_device
    def nvmlDeviceGetNumaNodeId(self, gpu: int, ref: Any) -> int:
        _out(ref, self.node.gpu(gpu).numa_node)
        return SUCCESS

    def _fill_cpu_affinity(self, gpu: int, size: Any, ref: Any) -> int:
        arr = _obj(ref)
        for i, w in enumerate(_cpu_mask(self.node.gpu(gpu).cpu_affinity, _v(size))):
            arr[i] = w
        return SUCCESS

    @_device
    def nvmlDeviceGetCpuAffinity(self, gpu: int, size: Any, ref: Any) -> int:
        return self._fill_cpu_affinity(gpu, size, ref)

    @_device
    def nvmlDeviceGetCpuAffinityWithinScope(self, gpu: int, size: Any, ref: Any, scope: Any) -> int:
        return self._fill_cpu_affinity(gpu, size, ref)

    @_device
    def nvmlDeviceGetMemoryAffinity(self, gpu: int, size: Any, ref: Any, scope: Any) -> int:
        arr, node = _obj(ref), self.node.gpu(gpu).numa_node
        if node // 64 < _v(size):
            arr[node // 64] = 1 << (node % 64)
        return SUCCESS

    @_device
    def nvmlDeviceGetPersistenceMode(self, gpu: int, ref: Any) -> int:
        _out(ref, 1)
        return SUCCESS

    @_device
    def nvmlDeviceGetDisplayMode(self, gpu: int, ref: Any) -> int:
        _out(ref, 0)
        return SUCCESS

    nvmlDeviceGetDisplayActive = nvmlDeviceGetDisplayMode

    @_device
    def nvmlDeviceGetDriverModel_v2(self, gpu: int, current: Any, pending: Any) -> int:
        return NOT_SUPPORTED  # WDDM/TCC: Windows only

    nvmlDeviceGetDriverModel = nvmlDeviceGetDriverModel_v2

    @_device
    def nvmlDeviceGetComputeMode(self, gpu: int, ref: Any) -> int:
        _out(ref, self.node.compute_mode(gpu))
        return SUCCESS

    @_device
    def nvmlDeviceValidateInforom(self, gpu: int) -> int:
        return CORRUPTED_INFOROM if self.node.inforom_corrupt(gpu) else SUCCESS
