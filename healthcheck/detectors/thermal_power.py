"""Sustained hardware slowdown: thermal and power brake (gpu-faults.md §2.3, §5, §6, §7.5).

Only the hardware bits of ``clocks.event_reasons`` count: HW slowdown 0x8 and HW thermal slowdown
0x40 ("thermal"), HW power brake 0x80. Idle 0x1, application clocks 0x2, SW power cap 0x4, sync
boost 0x10 and SW thermal 0x20 are normal operation and never a fault — warning on them is what
made DCGM's and NVSentinel's power watches noise (NVIDIA/DCGM#285, NVIDIA/NVSentinel#1447).

Faults (severity, action, clears):

- ``thermal_slowdown``: 0x8 or 0x40 set for ``thermal_samples`` samples in a row: warning; for
  ``thermal_critical_samples`` in a row: critical (§6 "Warn -> Critical if sustained").
- ``power_brake`` (critical): 0x80 set for ``power_brake_samples`` samples in a row (a facility
  power event: NVSentinel#1666 left such GPUs clock-limited for 36 h unseen).

Action ``none`` for both: neither a reset nor a reboot cools a GPU or lifts an external power
brake; the severity keeps new work off the GPU, the evidence names the cause to fix (cooling,
facility power). Both clear on clean samples. A sample without the bit resets the run; an
unreadable sample keeps the count and raises nothing.
"""

from __future__ import annotations

from typing import Any

from runtimekit.healthcheck.thresholds import for_detector
from runtimekit.healthcheck.types import CLEARS_WHEN_CLEAN, CRITICAL, NONE, WARNING, DetectorInput, Finding

from ._common import available, clock, finding, is_new_sample, readable_gpus

NAME = "thermal_power"
HW_SLOWDOWN = 0x8
HW_THERMAL_SLOWDOWN = 0x40
HW_POWER_BRAKE = 0x80
THERMAL = HW_SLOWDOWN | HW_THERMAL_SLOWDOWN
BITS = {HW_SLOWDOWN: "HW slowdown 0x8", HW_THERMAL_SLOWDOWN: "HW thermal slowdown 0x40",
        HW_POWER_BRAKE: "HW power brake 0x80"}


def _temperature(gpu: Any) -> str:
    if gpu.thermal is None or not available(gpu.thermal.gpu_celsius):
        return ""
    limit = gpu.limits.temperature_slowdown_celsius
    slowdown = f", slowdown threshold {limit:.0f} °C" if available(limit) else ""
    return f"; GPU at {gpu.thermal.gpu_celsius:.0f} °C{slowdown}"


def thermal_power(state: Any, data: DetectorInput) -> tuple[Any, list[Finding]]:
    config = for_detector(NAME, data.config)
    state = state or {}
    if data.snapshot is None or not data.snapshot.nvml_up:
        return state, []
    findings: list[Finding] = []
    fresh = is_new_sample(state, data.snapshot)
    new: dict[str, Any] = {"at": data.snapshot.sampled_at if fresh else state.get("at"), "thermal": {}, "power": {}}
    for gpu in readable_gpus(data.snapshot):
        reasons = gpu.clocks.event_reasons if gpu.clocks is not None else None
        for kind, mask in (("thermal", THERMAL), ("power", HW_POWER_BRAKE)):
            old = (state.get(kind) or {}).get(gpu.uuid)
            if reasons is None or not available(reasons):
                if old:
                    new[kind][gpu.uuid] = list(old)
                continue
            if not reasons & mask:
                continue
            run = [old[0] + (1 if fresh else 0), old[1]] if old else [1, gpu.sampled_at]
            new[kind][gpu.uuid] = run
            count, since = int(run[0]), run[1]
            bits = " + ".join(name for bit, name in BITS.items() if reasons & mask & bit)
            if kind == "thermal" and count >= config["thermal_samples"]:
                critical = count >= config["thermal_critical_samples"]
                findings.append(finding(
                    gpu, "thermal_slowdown", CRITICAL if critical else WARNING, NONE,
                    f"{bits} for {count} samples in a row since {clock(since)} (threshold "
                    f"{config['thermal_critical_samples'] if critical else config['thermal_samples']} samples; "
                    f"reasons 0x{reasons:x}){_temperature(gpu)}; check cooling",
                    CLEARS_WHEN_CLEAN,
                ))
            if kind == "power" and count >= config["power_brake_samples"]:
                findings.append(finding(
                    gpu, "power_brake", CRITICAL, NONE,
                    f"{bits} for {count} samples in a row since {clock(since)} (threshold "
                    f"{config['power_brake_samples']} samples; reasons 0x{reasons:x}); the clocks are cut by an "
                    "external power brake: escalate to facility power",
                    CLEARS_WHEN_CLEAN,
                ))
    return new, findings


thermal_power.name = NAME  # type: ignore[attr-defined]
detector = thermal_power
