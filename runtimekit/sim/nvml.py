"""FakeNvmlLibrary: the NVML C API of a simulated node, for ``pynvml.nvmlLib``.

pynvml looks each C symbol up with ``getattr(nvmlLib, name)`` and calls it with ctypes
arguments; every method here is one C symbol (same name, same argument order as nvml.h and the
pynvml wrapper that calls it) returning an ``nvmlReturn_t`` int. Out-parameters arrive as
``ctypes.byref(x)`` (the target is ``ref._obj``), arrays as ctypes arrays, strings as a
``create_string_buffer`` plus its length. A symbol the fake driver lacks is simply not defined,
so pynvml raises ``NVMLError_FunctionNotFound`` as with an old driver.

Handles are opaque pointers whose value encodes the GPU index (``_DEV_BASE + index``) or the
event set id (``_SET_BASE + id``); nothing ever dereferences them. Every call on a device first
checks initialisation (NVML_ERROR_UNINITIALIZED), the handle (INVALID_ARGUMENT), then the node's
injected device error (GPU_IS_LOST or a ``driver-error``).
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Callable
from typing import Any

from .node import MiB, SimulatedNode

__all__ = ["FakeNvmlLibrary"]

SUCCESS, UNINITIALIZED, INVALID_ARGUMENT, NOT_SUPPORTED = 0, 1, 2, 3
NOT_FOUND, INSUFFICIENT_SIZE, TIMEOUT, GPU_IS_LOST, VERSION_MISMATCH = 6, 7, 10, 15, 25

_DEV_BASE = 0x7E57_0000_1000
_SET_BASE = 0x7E57_0000_8000
_NO_ID = 0xFFFFFFFF
_SUPPORTED_EVENTS = 0x1 | 0x2 | 0x4 | 0x8 | 0x10  # SBE, DBE, PState, Xid, Clock
#: NVSwitch PCI device ids (device << 16 | vendor), by GPU architecture generation.
_NVSWITCH_PCI_ID = {"hopper": 0x22A310DE, "ampere": 0x1AF110DE}

#: NVLink generation -> nvmlNvlinkVersion_t as the driver answers it.
_NVLINK_VERSION_ENUM = {1: 1, 2: 2, 3: 4, 4: 6, 5: 7}

# nvmlValueType_t
_UINT, _ULL = 1, 3


def _v(x: Any) -> Any:
    """Python value of a ctypes scalar or a plain Python value."""
    return x.value if hasattr(x, "value") and not isinstance(x, ctypes.Array) else x


def _out(ref: Any, value: Any) -> None:
    ref._obj.value = value


def _obj(ref: Any) -> Any:
    """The object behind ``byref(x)``, or ``x`` itself when passed directly."""
    return getattr(ref, "_obj", ref)


def _ptr(value: Any) -> int | None:
    if value is None:
        return None
    try:
        return ctypes.cast(value, ctypes.c_void_p).value
    except (ctypes.ArgumentError, TypeError):
        return None


def _set_ptr(ref: Any, addr: int) -> None:
    ctypes.c_void_p.from_buffer(_obj(ref)).value = addr


def _put_str(buf: Any, length: Any, text: str) -> int:
    raw = text.encode()
    if len(raw) + 1 > _v(length):
        return INSUFFICIENT_SIZE
    buf.value = raw
    return SUCCESS


def _fill_pci(info: Any, bus_id: str, device_id: int, subsystem_id: int) -> None:
    """Fill an nvmlPciInfo_t from "00000000:18:00.0" (domain:bus:device.function)."""
    domain, bus, rest = bus_id.split(":")
    dev = rest.split(".")[0]
    info.busIdLegacy = f"{domain[-4:]}:{bus}:{rest}".encode()
    info.busId = bus_id.encode()
    info.domain, info.bus, info.device = int(domain, 16), int(bus, 16), int(dev, 16)
    info.pciDeviceId, info.pciSubSystemId = device_id, subsystem_id


def _cpu_mask(cpulist: str, words: int) -> list[int]:
    """A "0-55,112-167" list as 64-bit mask words (nvmlDeviceGetCpuAffinity layout)."""
    out = [0] * words
    for part in cpulist.split(","):
        lo, _, hi = part.partition("-")
        for cpu in range(int(lo), int(hi or lo) + 1):
            if cpu // 64 < words:
                out[cpu // 64] |= 1 << (cpu % 64)
    return out


def _device(fn: Callable[..., int]) -> Callable[..., int]:
    """Wrap a per-device symbol: init check, handle -> GPU index, injected device errors."""

    @functools.wraps(fn)
    def call(self: FakeNvmlLibrary, handle: Any, *args: Any) -> int:
        if not self._refcount:
            return UNINITIALIZED
        gpu = self._gpu_of(handle)
        if gpu is None:
            return INVALID_ARGUMENT
        err = self.node.device_error(gpu)
        if err:
            return err
        return fn(self, gpu, *args)

    return call


def _system(fn: Callable[..., int]) -> Callable[..., int]:
    """Wrap a system-level symbol: init check."""

    @functools.wraps(fn)
    def call(self: FakeNvmlLibrary, *args: Any) -> int:
        if not self._refcount:
            return UNINITIALIZED
        return fn(self, *args)

    return call


class _ErrorString:
    """``nvmlErrorString``: pynvml sets ``restype`` on it, so it must accept attributes."""

    restype: Any = None

    def __call__(self, result: Any) -> bytes:
        return f"NVML error {_v(result)}".encode()


class FakeNvmlLibrary:
    """The C symbols of NVML, answered from a ``SimulatedNode``."""

    def __init__(self, node: SimulatedNode) -> None:
        self.node = node
        self._refcount = 0
        self.nvmlErrorString = _ErrorString()

    def _gpu_of(self, handle: Any) -> int | None:
        addr = _ptr(handle)
        if addr is None:
            return None
        i = addr - _DEV_BASE
        return i if 0 <= i < self.node.gpu_count else None

    def _model(self, gpu: int) -> Any:
        return self.node.gpu(gpu).model

    # ---- init and system -------------------------------------------------------------------
    def nvmlInitWithFlags(self, flags: Any) -> int:
        self._refcount += 1
        return SUCCESS

    def nvmlInit_v2(self) -> int:
        return self.nvmlInitWithFlags(0)

    def nvmlShutdown(self) -> int:
        if not self._refcount:
            return UNINITIALIZED
        self._refcount -= 1
        return SUCCESS

    @_system
    def nvmlSystemGetDriverVersion(self, buf: Any, length: Any) -> int:
        return _put_str(buf, length, self.node.scenario.driver_version)

    @_system
    def nvmlSystemGetNVMLVersion(self, buf: Any, length: Any) -> int:
        return _put_str(buf, length, self.node.scenario.nvml_version)

    @_system
    def nvmlSystemGetCudaDriverVersion(self, ref: Any) -> int:
        _out(ref, self.node.scenario.cuda_driver_version)
        return SUCCESS

    nvmlSystemGetCudaDriverVersion_v2 = nvmlSystemGetCudaDriverVersion

    @_system
    def nvmlSystemGetProcessName(self, pid: Any, buf: Any, length: Any) -> int:
        for p in self.node.processes():
            if p["pid"] == _v(pid):
                return _put_str(buf, length, p["name"])
        return NOT_FOUND

    # ---- handles ---------------------------------------------------------------------------
    @_system
    def nvmlDeviceGetCount_v2(self, ref: Any) -> int:
        _out(ref, self.node.gpu_count)
        return SUCCESS

    nvmlDeviceGetCount = nvmlDeviceGetCount_v2

    def _handle(self, gpu: int, ref: Any) -> int:
        err = self.node.device_error(gpu)
        if err == GPU_IS_LOST:
            return err  # nvml.h: GetHandleBy* return GPU_IS_LOST for a GPU off the bus
        _set_ptr(ref, _DEV_BASE + gpu)
        return SUCCESS

    @_system
    def nvmlDeviceGetHandleByIndex_v2(self, index: Any, ref: Any) -> int:
        i = _v(index)
        if not 0 <= i < self.node.gpu_count:
            return INVALID_ARGUMENT
        return self._handle(i, ref)

    nvmlDeviceGetHandleByIndex = nvmlDeviceGetHandleByIndex_v2

    def _find(self, ref: Any, match: Callable[[Any], bool]) -> int:
        for i in range(self.node.gpu_count):
            if match(self.node.gpu(i)):
                return self._handle(i, ref)
        return NOT_FOUND

    @_system
    def nvmlDeviceGetHandleByUUID(self, uuid: Any, ref: Any) -> int:
        want = (_v(uuid) or b"").decode()
        return self._find(ref, lambda g: g.uuid == want)

    @_system
    def nvmlDeviceGetHandleBySerial(self, serial: Any, ref: Any) -> int:
        want = (_v(serial) or b"").decode()
        return self._find(ref, lambda g: g.serial == want)

    @_system
    def nvmlDeviceGetHandleByPciBusId_v2(self, bus: Any, ref: Any) -> int:
        want = (_v(bus) or b"").decode().upper()
        if want.count(":") == 2 and len(want.split(":")[0]) == 4:
            want = "0000" + want
        return self._find(ref, lambda g: g.pci_bus_id == want)

    # ---- identity --------------------------------------------------------------------------
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

    @_device
    def nvmlDeviceGetCpuAffinity(self, gpu: int, size: Any, ref: Any) -> int:
        arr = _obj(ref)
        for i, w in enumerate(_cpu_mask(self.node.gpu(gpu).cpu_affinity, _v(size))):
            arr[i] = w
        return SUCCESS

    @_device
    def nvmlDeviceGetCpuAffinityWithinScope(self, gpu: int, size: Any, ref: Any, scope: Any) -> int:
        return self.nvmlDeviceGetCpuAffinity.__wrapped__(self, gpu, size, ref)

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
    def nvmlDeviceGetMigMode(self, gpu: int, current: Any, pending: Any) -> int:
        if not self._model(gpu).mig_capable:
            return NOT_SUPPORTED
        _out(current, 0)
        _out(pending, 0)
        return SUCCESS

    @_device
    def nvmlDeviceGetMaxMigDeviceCount(self, gpu: int, ref: Any) -> int:
        _out(ref, 7 if self._model(gpu).mig_capable else 0)
        return SUCCESS

    @_device
    def nvmlDeviceIsMigDeviceHandle(self, gpu: int, ref: Any) -> int:
        _out(ref, 0)
        return SUCCESS

    # ---- memory ----------------------------------------------------------------------------
    @_device
    def nvmlDeviceGetMemoryInfo(self, gpu: int, ref: Any) -> int:
        """v1: used includes the reserved memory (as drivers before the v2 API reported it)."""
        total, reserved, used = self.node.memory(gpu)
        m = _obj(ref)
        m.total, m.used, m.free = total, reserved + used, total - reserved - used
        return SUCCESS

    @_device
    def nvmlDeviceGetMemoryInfo_v2(self, gpu: int, ref: Any) -> int:
        m = _obj(ref)
        if m.version != 0x02000028:
            return VERSION_MISMATCH
        total, reserved, used = self.node.memory(gpu)
        m.total, m.reserved, m.used, m.free = total, reserved, used, total - reserved - used
        return SUCCESS

    @_device
    def nvmlDeviceGetBAR1MemoryInfo(self, gpu: int, ref: Any) -> int:
        total = self._model(gpu).bar1_total_mib * MiB
        used = (2 + 2 * len(self.node.processes_on(gpu))) * MiB
        b = _obj(ref)
        b.bar1Total, b.bar1Used, b.bar1Free = total, used, total - used
        return SUCCESS

    # ---- utilisation, power, temperature, clocks --------------------------------------------
    @_device
    def nvmlDeviceGetUtilizationRates(self, gpu: int, ref: Any) -> int:
        s = self.node.sample(gpu)
        u = _obj(ref)
        u.gpu, u.memory = s.util_gpu, s.util_mem
        return SUCCESS

    @_device
    def nvmlDeviceGetEncoderUtilization(self, gpu: int, util: Any, period: Any) -> int:
        _out(util, self.node.sample(gpu).util_enc)
        _out(period, 1_000_000)  # microseconds
        return SUCCESS

    @_device
    def nvmlDeviceGetDecoderUtilization(self, gpu: int, util: Any, period: Any) -> int:
        _out(util, self.node.sample(gpu).util_dec)
        _out(period, 1_000_000)
        return SUCCESS

    @_device
    def nvmlDeviceGetPowerUsage(self, gpu: int, ref: Any) -> int:
        _out(ref, self.node.sample(gpu).power_mw)
        return SUCCESS

    @_device
    def nvmlDeviceGetEnforcedPowerLimit(self, gpu: int, ref: Any) -> int:
        _out(ref, self._model(gpu).power_limit_w * 1000)
        return SUCCESS

    nvmlDeviceGetPowerManagementLimit = nvmlDeviceGetEnforcedPowerLimit
    nvmlDeviceGetPowerManagementDefaultLimit = nvmlDeviceGetEnforcedPowerLimit

    @_device
    def nvmlDeviceGetPowerManagementLimitConstraints(self, gpu: int, lo: Any, hi: Any) -> int:
        limit = self._model(gpu).power_limit_w * 1000
        _out(lo, 200_000 if limit >= 700_000 else 100_000)
        _out(hi, limit)
        return SUCCESS

    @_device
    def nvmlDeviceGetTotalEnergyConsumption(self, gpu: int, ref: Any) -> int:
        _, c = self.node.reading(gpu)
        _out(ref, int(c.energy_mj))
        return SUCCESS

    @_device
    def nvmlDeviceGetTemperature(self, gpu: int, sensor: Any, ref: Any) -> int:
        if _v(sensor) != 0:
            return INVALID_ARGUMENT
        _out(ref, self.node.sample(gpu).temp_gpu)
        return SUCCESS

    @_device
    def nvmlDeviceGetTemperatureV(self, gpu: int, ref: Any) -> int:
        t = _obj(ref)
        if t.version != 0x100000C:
            return VERSION_MISMATCH
        if _v(t.sensorType) != 0:
            return INVALID_ARGUMENT
        t.temperature = self.node.sample(gpu).temp_gpu
        return SUCCESS

    @_device
    def nvmlDeviceGetTemperatureThreshold(self, gpu: int, which: Any, ref: Any) -> int:
        th = self._model(gpu).temperature_thresholds_c
        key = {0: "shutdown", 1: "slowdown", 2: "mem_max", 3: "gpu_max"}.get(_v(which))
        if key is None:
            return NOT_SUPPORTED
        _out(ref, th[key])
        return SUCCESS

    @_device
    def nvmlDeviceGetFanSpeed(self, gpu: int, ref: Any) -> int:
        if not self._model(gpu).fan:
            return NOT_SUPPORTED  # SXM boards are cooled by the chassis
        _out(ref, self._fan_percent(gpu))
        return SUCCESS

    @_device
    def nvmlDeviceGetFanSpeed_v2(self, gpu: int, fan: Any, ref: Any) -> int:
        if not self._model(gpu).fan:
            return NOT_SUPPORTED
        if _v(fan) != 0:
            return INVALID_ARGUMENT
        _out(ref, self._fan_percent(gpu))
        return SUCCESS

    @_device
    def nvmlDeviceGetNumFans(self, gpu: int, ref: Any) -> int:
        if not self._model(gpu).fan:
            return NOT_SUPPORTED
        _out(ref, 1)
        return SUCCESS

    def _fan_percent(self, gpu: int) -> int:
        """A board fan that follows temperature: 30 % at or below 40 C, 100 % at 85 C."""
        temperature = self.node.sample(gpu).temp_gpu
        return int(min(100, max(30, 30 + (temperature - 40) * 70 / 45)))

    def _clock(self, gpu: int, ctype: int, current: bool) -> int | None:
        m = self._model(gpu)
        if current:
            s = self.node.sample(gpu)
            vals = {0: s.clock_graphics, 1: s.clock_sm, 2: s.clock_mem, 3: s.clock_graphics * 9 // 10}
        else:
            c = m.clocks_max_mhz
            vals = {0: c["graphics"], 1: c["sm"], 2: c["memory"], 3: c["graphics"] * 9 // 10}
        return vals.get(ctype)

    @_device
    def nvmlDeviceGetClockInfo(self, gpu: int, ctype: Any, ref: Any) -> int:
        v = self._clock(gpu, _v(ctype), True)
        if v is None:
            return INVALID_ARGUMENT
        _out(ref, v)
        return SUCCESS

    @_device
    def nvmlDeviceGetMaxClockInfo(self, gpu: int, ctype: Any, ref: Any) -> int:
        v = self._clock(gpu, _v(ctype), False)
        if v is None:
            return INVALID_ARGUMENT
        _out(ref, v)
        return SUCCESS

    nvmlDeviceGetMaxCustomerBoostClock = nvmlDeviceGetMaxClockInfo

    @_device
    def nvmlDeviceGetClock(self, gpu: int, ctype: Any, cid: Any, ref: Any) -> int:
        v = self._clock(gpu, _v(ctype), _v(cid) == 0)
        if v is None:
            return INVALID_ARGUMENT
        _out(ref, v)
        return SUCCESS

    @_device
    def nvmlDeviceGetCurrentClocksEventReasons(self, gpu: int, ref: Any) -> int:
        _out(ref, self.node.sample(gpu).reasons)
        return SUCCESS

    nvmlDeviceGetCurrentClocksThrottleReasons = nvmlDeviceGetCurrentClocksEventReasons

    @_device
    def nvmlDeviceGetSupportedClocksEventReasons(self, gpu: int, ref: Any) -> int:
        _out(ref, 0x1FF)
        return SUCCESS

    nvmlDeviceGetSupportedClocksThrottleReasons = nvmlDeviceGetSupportedClocksEventReasons

    @_device
    def nvmlDeviceGetPerformanceState(self, gpu: int, ref: Any) -> int:
        _out(ref, self.node.sample(gpu).pstate)
        return SUCCESS

    nvmlDeviceGetPowerState = nvmlDeviceGetPerformanceState

    # ---- PCIe ------------------------------------------------------------------------------
    @_device
    def nvmlDeviceGetCurrPcieLinkGeneration(self, gpu: int, ref: Any) -> int:
        _out(ref, self.node.pcie_link(gpu)[0])
        return SUCCESS

    @_device
    def nvmlDeviceGetCurrPcieLinkWidth(self, gpu: int, ref: Any) -> int:
        _out(ref, self.node.pcie_link(gpu)[1])
        return SUCCESS

    @_device
    def nvmlDeviceGetMaxPcieLinkGeneration(self, gpu: int, ref: Any) -> int:
        _out(ref, self._model(gpu).pcie_generation)
        return SUCCESS

    nvmlDeviceGetGpuMaxPcieLinkGeneration = nvmlDeviceGetMaxPcieLinkGeneration

    @_device
    def nvmlDeviceGetMaxPcieLinkWidth(self, gpu: int, ref: Any) -> int:
        _out(ref, self._model(gpu).pcie_width)
        return SUCCESS

    @_device
    def nvmlDeviceGetPcieReplayCounter(self, gpu: int, ref: Any) -> int:
        _out(ref, 0)
        return SUCCESS

    @_device
    def nvmlDeviceGetPcieThroughput(self, gpu: int, counter: Any, ref: Any) -> int:
        """KB/s over NVML's last 20 ms sample (TX = 0, RX = 1)."""
        s = self.node.sample(gpu)
        c = _v(counter)
        if c not in (0, 1):
            return INVALID_ARGUMENT
        _out(ref, s.pcie_tx_kbs if c == 0 else s.pcie_rx_kbs)
        return SUCCESS

    # ---- ECC and memory health ---------------------------------------------------------------
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
        for ref, v in zip((corr, unc, pending, failure), self.node.remapped_rows(gpu)):
            _out(ref, v)
        return SUCCESS

    # ---- NVLink ------------------------------------------------------------------------------
    def _link_ok(self, gpu: int, link: Any) -> bool:
        return 0 <= _v(link) < self._model(gpu).nvlink_links

    @_device
    def nvmlDeviceGetNvLinkState(self, gpu: int, link: Any, ref: Any) -> int:
        if not self._link_ok(gpu, link):
            return INVALID_ARGUMENT
        _out(ref, int(self.node.link_up(gpu, _v(link))))
        return SUCCESS

    @_device
    def nvmlDeviceGetNvLinkVersion(self, gpu: int, link: Any, ref: Any) -> int:
        if not self._link_ok(gpu, link):
            return INVALID_ARGUMENT
        # NVML answers nvmlNvlinkVersion_t, not the generation: 3.0 -> 4 (A100), 4.0 -> 6 (H100).
        _out(ref, _NVLINK_VERSION_ENUM[self._model(gpu).nvlink_version])
        return SUCCESS

    @_device
    def nvmlDeviceGetNvLinkErrorCounter(self, gpu: int, link: Any, counter: Any, ref: Any) -> int:
        if not self._link_ok(gpu, link):
            return INVALID_ARGUMENT
        c = _v(counter)
        if c not in (0, 1, 2, 3):
            return NOT_SUPPORTED
        _, counters = self.node.reading(gpu)
        _out(ref, int(counters.nvlink_crc[_v(link)]) if c in (2, 3) else 0)
        return SUCCESS

    @_device
    def nvmlDeviceGetNvLinkRemoteDeviceType(self, gpu: int, link: Any, ref: Any) -> int:
        if not self._link_ok(gpu, link):
            return INVALID_ARGUMENT
        _out(ref, 2)  # NVML_NVLINK_DEVICE_TYPE_SWITCH
        return SUCCESS

    @_device
    def nvmlDeviceGetNvLinkRemotePciInfo_v2(self, gpu: int, link: Any, ref: Any) -> int:
        if not self._link_ok(gpu, link):
            return INVALID_ARGUMENT
        spec = self.node.gpu(gpu)
        switch = self.node.scenario.nvswitches[spec.nvlinks[_v(link)]]
        _fill_pci(_obj(ref), switch.pci_bus_id, _NVSWITCH_PCI_ID.get(spec.model.architecture, 0x10DE), 0)
        return SUCCESS

    # ---- field values ------------------------------------------------------------------------
    @_device
    def nvmlDeviceGetFieldValues(self, gpu: int, count: Any, ref: Any) -> int:
        values = _obj(ref)
        t = self.node.now()
        s, c = self.node.reading(gpu, t)
        ts = int(self.node.epoch(t) * 1e6)
        links = self._model(gpu).nvlink_links
        per_link = {  # field id -> (value type, link -> value); scopeId is the link
            165: (_UINT, lambda l: int(self.node.link_up(gpu, l))),  # NVLINK_GET_STATE
            161: (_ULL, lambda l: 0),  # NVLINK_ERROR_DL_REPLAY
            162: (_ULL, lambda l: 0),  # NVLINK_ERROR_DL_RECOVERY
            163: (_ULL, lambda l: int(c.nvlink_crc[l])),  # NVLINK_ERROR_DL_CRC (flit)
            138: (_ULL, lambda l: int(c.nvlink_tx_kib[l])),  # NVLINK_THROUGHPUT_DATA_TX, KiB
            139: (_ULL, lambda l: int(c.nvlink_rx_kib[l])),  # NVLINK_THROUGHPUT_DATA_RX, KiB
        }
        # pynvml's structs override attribute access in Python (str <-> bytes); the plain object
        # accessors reach the ctypes fields directly, which matters at ~900 fields per cycle.
        get, put = object.__getattribute__, object.__setattr__
        for i in range(_v(count)):
            fv = values[i]
            fid, scope = get(fv, "fieldId"), get(fv, "scopeId")
            put(fv, "timestamp", ts)
            put(fv, "nvmlReturn", SUCCESS)
            if fid == 82:  # MEMORY_TEMP, C
                vt, val = _UINT, s.temp_mem
            elif fid == 197:  # PCIE_COUNT_TX_BYTES
                vt, val = _ULL, int(c.pcie_tx_bytes)
            elif fid == 198:
                vt, val = _ULL, int(c.pcie_rx_bytes)
            elif fid == 91:  # NVLINK_LINK_COUNT
                vt, val = _UINT, links
            elif fid in per_link:
                if not 0 <= scope < links:
                    put(fv, "nvmlReturn", INVALID_ARGUMENT)
                    continue
                vt, val = per_link[fid][0], per_link[fid][1](scope)
            else:
                put(fv, "nvmlReturn", NOT_SUPPORTED)
                continue
            put(fv, "valueType", vt)
            put(get(fv, "value"), "uiVal" if vt == _UINT else "ullVal", val)
        return SUCCESS

    # ---- processes -----------------------------------------------------------------------------
    def _fill_processes(self, gpu: int, count_ref: Any, array: Any, procs: list[dict]) -> int:
        count = _obj(count_ref)
        n = len(procs)
        if array is None or count.value < n:
            count.value = n
            return INSUFFICIENT_SIZE if n else SUCCESS
        put = object.__setattr__  # past pynvml's Python-level str/bytes __setattr__ (hot with many processes)
        has_instances = n and hasattr(array[0], "gpuInstanceId")
        for i, p in enumerate(procs):
            e = array[i]
            put(e, "pid", p["pid"])
            put(e, "usedGpuMemory", p["used_memory_bytes"])
            if has_instances:
                put(e, "gpuInstanceId", _NO_ID)
                put(e, "computeInstanceId", _NO_ID)
        count.value = n
        return SUCCESS

    @_device
    def nvmlDeviceGetComputeRunningProcesses_v3(self, gpu: int, count: Any, array: Any) -> int:
        procs = self.node.processes_on(gpu)
        return self._fill_processes(gpu, count, array, procs)

    nvmlDeviceGetComputeRunningProcesses_v2 = nvmlDeviceGetComputeRunningProcesses_v3

    @_device
    def nvmlDeviceGetGraphicsRunningProcesses_v3(self, gpu: int, count: Any, array: Any) -> int:
        return self._fill_processes(gpu, count, array, [])

    nvmlDeviceGetGraphicsRunningProcesses_v2 = nvmlDeviceGetGraphicsRunningProcesses_v3
    nvmlDeviceGetMPSComputeRunningProcesses_v3 = nvmlDeviceGetGraphicsRunningProcesses_v3

    @_device
    def nvmlDeviceGetProcessUtilization(self, gpu: int, samples: Any, count_ref: Any, last_seen: Any) -> int:
        """One sample per process for the current tick: the GPU's SM and memory utilization
        shared out in proportion to the processes' memory (the big job does most of the work)."""
        t = self.node.now()
        s = self.node.sample(gpu)
        procs = self.node.processes_on(gpu)
        stamp = int(self.node.epoch((t // self.node.tick_s) * self.node.tick_s) * 1e6)
        if not procs or stamp <= _v(last_seen):
            return NOT_FOUND
        count = _obj(count_ref)
        if samples is None or count.value < len(procs):
            count.value = len(procs)
            return INSUFFICIENT_SIZE
        put = object.__setattr__
        total = sum(p["used_memory_bytes"] for p in procs) or 1
        for i, p in enumerate(procs):
            e, share = samples[i], p["used_memory_bytes"] / total
            put(e, "pid", p["pid"])
            put(e, "timeStamp", stamp)
            put(e, "smUtil", int(s.util_gpu * share))
            put(e, "memUtil", int(s.util_mem * share))
            put(e, "encUtil", 0)
            put(e, "decUtil", 0)
        count.value = len(procs)
        return SUCCESS

    # ---- events ------------------------------------------------------------------------------
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
        data.gpuInstanceId = data.computeInstanceId = _NO_ID
        return SUCCESS

    nvmlEventSetWait = nvmlEventSetWait_v2

    @_system
    def nvmlEventSetFree(self, event_set: Any) -> int:
        sid = self._set_id(event_set)
        if sid is None or not self.node.events.free(sid):
            return INVALID_ARGUMENT
        return SUCCESS
