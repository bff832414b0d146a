"""Sustained hardware slowdown: thermal and power brake (gpu-faults.md §2.3, §5, §6, §7.5).

Only the hardware bits of ``clocks.event_reasons`` (nvmlDeviceGetCurrentClocksEventReasons) count:
HW slowdown 0x8, HW thermal slowdown 0x40, HW power brake 0x80. Idle 0x1, application clocks
0x2, SW power cap 0x4, sync boost 0x10 and SW thermal 0x20 are normal operation and never a
fault — warning on them is what made DCGM's and NVSentinel's power watches noise
(NVIDIA/DCGM#285, NVIDIA/NVSentinel#1447).

HW slowdown 0x8 is the generic "clocks cut by 2x or more" bit: the hardware sets it together with
the bit of the cause — 0x8|0x80 for an external power brake, 0x8|0x40 for over-temperature — and
alone for causes NVML does not name (fast-trigger over-power, or temperature). So:

- power brake: 0x80 set (0x8|0x80 as hardware reports it). Never a thermal fault on its own.
- thermal: 0x40 set, or 0x8 set without 0x80 (nothing else explains it).

Faults (severity, action and clearing: ``healthcheck/policy.yaml``):

- ``thermal_slowdown`` (warning) once thermal held for ``thermal_seconds``;
  ``thermal_slowdown_sustained`` (critical) once it held for ``thermal_critical_seconds``
  (§6 "Warn -> Critical if sustained"). Class thermal: check cooling.
- ``power_brake`` (critical) once the brake held for ``power_brake_seconds`` (a facility power
  event: NVSentinel#1666 left such GPUs clock-limited for 36 h unseen). Class power.

Durations are measured on sample times (two readings at least), so they mean the same at any
sampling interval. A sample without the bits ends the run; an unreadable sample keeps it, raises
nothing and clears nothing (``unjudged``: a GPU under a power brake whose reasons cannot be read
stays held); a run seen again but not yet for its threshold starts the clean-sample count of what
it raised before again (``seen_again``), so a slowdown that flaps never clears. Action ``none`` for all: neither a reset nor a reboot cools a GPU or lifts a
power brake.

State (JSON-friendly): ``at`` (the last sample counted), ``thermal`` and ``power``
{uuid: [first seen, readings]}.
"""

from __future__ import annotations

from typing import Any

from runtimekit.healthcheck.thresholds import for_detector
from runtimekit.healthcheck.types import DetectorInput, Finding

from ._common import (
    available,
    clock,
    extend_run,
    finding,
    held_for,
    is_new_sample,
    readable_gpus,
    seen_again,
    unjudged,
    unreadable,
)

NAME = "thermal_power"
HW_SLOWDOWN = 0x8
HW_THERMAL_SLOWDOWN = 0x40
HW_POWER_BRAKE = 0x80
THERMAL_FAULTS = ("thermal_slowdown", "thermal_slowdown_sustained")
FAULTS = (*THERMAL_FAULTS, "power_brake")
BITS = {HW_SLOWDOWN: "HW slowdown 0x8", HW_THERMAL_SLOWDOWN: "HW thermal slowdown 0x40",
        HW_POWER_BRAKE: "HW power brake 0x80"}


def is_power_brake(reasons: int) -> bool:
    """The external power brake is asserted (0x80; hardware reports it as 0x8|0x80)."""
    return bool(reasons & HW_POWER_BRAKE)


def is_thermal(reasons: int) -> bool:
    """HW thermal slowdown (0x40), or HW slowdown (0x8) that the power brake does not explain."""
    return bool(reasons & HW_THERMAL_SLOWDOWN) or bool(reasons & HW_SLOWDOWN and not reasons & HW_POWER_BRAKE)


def _temperature(gpu: Any) -> str:
    if gpu.thermal is None or not available(gpu.thermal.gpu_celsius):
        return ""
    limit = gpu.limits.temperature_slowdown_celsius
    slowdown = f", slowdown threshold {limit:.0f} °C" if available(limit) else ""
    return f"; GPU at {gpu.thermal.gpu_celsius:.0f} °C{slowdown}"


def _bits(reasons: int) -> str:
    return " + ".join(name for bit, name in BITS.items() if reasons & bit)


def thermal_power(state: Any, data: DetectorInput) -> tuple[Any, list[Finding]]:
    config = for_detector(NAME, data.config)
    state = state or {}
    if data.snapshot is None or not data.snapshot.nvml_up:
        return state, []
    findings: list[Finding] = []
    fresh = is_new_sample(state, data.snapshot)
    new: dict[str, Any] = {"at": data.snapshot.sampled_at if fresh else state.get("at"), "thermal": {}, "power": {}}
    for uuid, gpu in readable_gpus(data.snapshot):
        reasons = gpu.clocks.event_reasons if gpu.clocks is not None else None
        now = gpu.sampled_at
        if not isinstance(reasons, int):
            findings.extend(unjudged(gpu, FAULTS, f"clock event reasons unreadable ({unreadable(reasons)})"))
        for kind, test in (("thermal", is_thermal), ("power", is_power_brake)):
            run = extend_run((state.get(kind) or {}).get(uuid), test(reasons) if isinstance(reasons, int) else None,
                             now, fresh)
            if run:
                new[kind][uuid] = run
            if not isinstance(reasons, int) or not run:
                continue  # unreadable: marked unjudged above; no run: a clean sample
            lasted = f"{_bits(reasons)} since {clock(run[0])} ({now - run[0]:.0f} s; reasons 0x{reasons:x})"
            seen = f"{lasted}: seen, not yet for its threshold"
            if kind == "thermal":
                critical = held_for(run, now, config["thermal_critical_seconds"])
                warned = critical or held_for(run, now, config["thermal_seconds"])
                if warned:
                    limit = config["thermal_critical_seconds" if critical else "thermal_seconds"]
                    findings.append(finding(
                        gpu, "thermal_slowdown_sustained" if critical else "thermal_slowdown",
                        f"{lasted}, threshold {limit:g} s{_temperature(gpu)}; check cooling",
                    ))
                if not critical:  # the slowdown is back: not a clean sample for what it raised before
                    findings.extend(seen_again(gpu, THERMAL_FAULTS[1:] if warned else THERMAL_FAULTS, seen))
            elif held_for(run, now, config["power_brake_seconds"]):
                findings.append(finding(
                    gpu, "power_brake",
                    f"{lasted}, threshold {config['power_brake_seconds']:g} s; the clocks are cut by an external "
                    "power brake, not by temperature: escalate to facility power",
                ))
            else:
                findings.extend(seen_again(gpu, ("power_brake",), seen))
    return new, findings


thermal_power.name = NAME  # type: ignore[attr-defined]
detector = thermal_power
