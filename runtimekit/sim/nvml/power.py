"""Utilisation, power (mW), energy (mJ), temperature (C), fans (%), clocks (MHz) and clock-event reasons."""

from __future__ import annotations

from typing import Any

from ._base import INVALID_ARGUMENT, NOT_SUPPORTED, SUCCESS, VERSION_MISMATCH, _device, _LibraryBase, _obj, _out, _v

__all__ = ["PowerThermalClocksMixin"]


class PowerThermalClocksMixin(_LibraryBase):
    """Utilisation, power (mW), energy (mJ), temperature (C), fans (%), clocks (MHz) and clock-event reasons."""

    @_device
    def nvmlDeviceGetUtilizationRates(self, gpu: int, ref: Any) -> int:
        if self.node.mig_mode(gpu)[0]:
            return NOT_SUPPORTED  # a GPU in MIG mode has no whole-GPU utilization (nvidia-smi: N/A)
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
