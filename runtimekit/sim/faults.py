"""Fault kinds the simulated node can be given, as data: description and parameter schema.

``FAULT_KINDS`` is the single table the simulator, the CLI (``cli_args``) and the HTTP control
API (``control``) read. ``validate_params`` checks a parameter dict against it and fills
defaults; node-dependent limits (link index < the GPU's link count, PCIe generation <= its max)
are checked by ``SimulatedNode.inject``. XID meanings: NVIDIA "XID Errors" catalogue
(https://docs.nvidia.com/deploy/xid-errors/); ECC containment and row remapping: NVIDIA "GPU Memory
Error Management" (https://docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt/).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

__all__ = ["FaultError", "ParamSpec", "FaultSpec", "FAULT_KINDS", "DRIVER_ERRORS", "COMPUTE_MODES", "RECOVERY_ACTIONS", "validate_params"]


class FaultError(ValueError):
    """An injection request is invalid; the message names the parameter and what is allowed."""


#: ``driver-error`` names -> nvmlReturn_t codes (pynvml NVML_ERROR_*).
DRIVER_ERRORS: Mapping[str, int] = MappingProxyType(
    {
        "unknown": 999,
        "timeout": 10,
        "driver-not-loaded": 9,
        "no-permission": 4,
        "insufficient-power": 8,
        "irq-issue": 11,
        "corrupted-inforom": 14,
        "reset-required": 16,
        "operating-system": 17,
        "lib-rm-version-mismatch": 18,
        "memory": 20,
        "no-data": 21,
        "gpu-not-found": 28,
    }
)

#: ``recovery-action`` names -> nvmlDeviceGpuRecoveryAction_t values (nvml.h, NVML_GPU_RECOVERY_ACTION_*).
RECOVERY_ACTIONS: Mapping[str, int] = MappingProxyType(
    {"none": 0, "gpu_reset": 1, "node_reboot": 2, "drain_p2p": 3, "drain_and_reset": 4}
)

#: ``compute-mode`` names -> NVML_COMPUTEMODE_* values.
COMPUTE_MODES: Mapping[str, int] = MappingProxyType({"default": 0, "prohibited": 2, "exclusive-process": 3})


@dataclass(frozen=True)
class ParamSpec:
    """One parameter of a fault kind.

    ``type`` is ``int``, ``float`` or ``str``; ``default`` None means "computed by the node"
    (documented in ``help``); ``choices`` restricts strings; ``minimum``/``maximum`` bound numbers.
    """

    name: str
    type: type
    default: Any
    help: str
    choices: tuple[str, ...] = ()
    minimum: float | None = None
    maximum: float | None = None

    def allowed(self) -> str:
        """Human text of the allowed values, for error messages and --help."""
        if self.choices:
            return "one of " + ", ".join(self.choices)
        lo = "" if self.minimum is None else _num(self.minimum)
        hi = "" if self.maximum is None else _num(self.maximum)
        kind = "an integer" if self.type is int else "a number" if self.type is float else "a string"
        return f"{kind} in {lo}..{hi}" if (lo or hi) else kind


@dataclass(frozen=True)
class FaultSpec:
    """One fault kind: what it does (``description``), its parameters, and whether it stays
    active until cleared (``sticky``; instantaneous kinds such as ``ecc-uncorrectable`` are
    recorded too so they can be listed and cleared, but their counters never go back)."""

    kind: str
    description: str
    params: tuple[ParamSpec, ...] = field(default_factory=tuple)
    xid: int | None = None  # XID delivered to event sets on injection

    def param(self, name: str) -> ParamSpec | None:
        return next((p for p in self.params if p.name == name), None)


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


_LINK = ParamSpec("link", int, 0, "NVLink index (0..links-1)", minimum=0, maximum=17)

FAULT_KINDS: Mapping[str, FaultSpec] = MappingProxyType(
    {
        s.kind: s
        for s in (
            FaultSpec(
                "xid",
                "deliver an XID to registered event sets (79 = fallen off the bus: the GPU is also lost)",
                (ParamSpec("xid", int, None, "XID code (required)", minimum=1, maximum=999),),
            ),
            FaultSpec(
                "ecc-uncorrectable",
                "volatile and aggregate uncorrected ECC counters grow by count; XID 48",
                (ParamSpec("count", int, 1, "uncorrectable errors to add", minimum=1, maximum=1_000_000),),
                xid=48,
            ),
            FaultSpec(
                "ecc-contained",
                "contained uncorrectable DRAM ECC error (A100/H100): uncorrected volatile and aggregate ECC "
                "counters grow by count, uncorrectable remapped rows grow by count and a remap goes pending "
                "(reset to apply); DBE event, XID 94 (contained: only the faulting app dies), then XID 63",
                (ParamSpec("count", int, 1, "uncorrectable errors (one faulty row each)", minimum=1, maximum=512),),
                xid=94,
            ),
            FaultSpec("row-remap-pending", "an uncorrectable row remap is pending (reset needed); XID 63", xid=63),
            FaultSpec("row-remap-failure", "row remapping failed; XID 64", xid=64),
            FaultSpec("gpu-lost", "every call on the device returns NVML_ERROR_GPU_IS_LOST"),
            FaultSpec("nvlink-down", "the NVLink goes inactive and its throughput stops", (_LINK,)),
            FaultSpec(
                "nvlink-crc",
                "NVLink CRC flit and data error counters grow at rate per second; the replay counter grows "
                "with them (each CRC-errored flit is replayed)",
                (ParamSpec("rate", float, 1000.0, "errors per second", minimum=0, maximum=1e9), _LINK),
            ),
            FaultSpec(
                "nvlink-recovery",
                "NVLink recovery (DL_RECOVERY) counter grows by count (the link retrained); CRC and replay stay",
                (ParamSpec("count", int, 1, "link recoveries to add", minimum=1, maximum=1_000_000), _LINK),
            ),
            FaultSpec(
                "compute-mode",
                "nvmlDeviceGetComputeMode answers this mode",
                (ParamSpec("mode", str, "exclusive-process", "compute mode", choices=tuple(COMPUTE_MODES)),),
            ),
            FaultSpec(
                "memory-leak",
                "memory used grows by bytes with no process holding it",
                (ParamSpec("bytes", int, 4 << 30, "leaked bytes", minimum=1, maximum=1 << 50),),
            ),
            FaultSpec(
                "driver-error",
                "every NVML call on the device returns this error",
                (ParamSpec("error", str, "unknown", "NVML error", choices=tuple(DRIVER_ERRORS)),),
            ),
            FaultSpec(
                "thermal-slowdown",
                "HW thermal slowdown: reasons gain 0x8|0x40, temperature near slowdown, SM clock cut",
            ),
            FaultSpec("power-brake", "HW power brake: reasons gain 0x8|0x80, clocks cut"),
            FaultSpec(
                "recovery-action",
                "the driver announces the recovery it needs: field 230 (NVML_FI_DEV_GET_GPU_RECOVERY_ACTION) "
                "holds it, and XID 154 is delivered",
                (ParamSpec("action", str, "gpu_reset", "the recovery action", choices=tuple(RECOVERY_ACTIONS)),),
                xid=154,
            ),
            FaultSpec(
                "pcie-downtrain",
                "current PCIe link width/generation drop",
                (
                    ParamSpec("width", int, 8, "lanes", minimum=1, maximum=16),
                    ParamSpec("gen", int, None, "PCIe generation (default: max - 1)", minimum=1, maximum=6),
                ),
            ),
        )
    }
)


def validate_params(kind: str, params: Mapping[str, Any] | None) -> dict[str, Any]:
    """Check ``params`` for ``kind`` and return them with defaults filled (FaultError otherwise)."""
    spec = FAULT_KINDS.get(kind)
    if spec is None:
        raise FaultError(f"fault: unknown kind {kind!r} (allowed: {', '.join(sorted(FAULT_KINDS))})")
    params = dict(params or {})
    if not isinstance(params, dict):
        raise FaultError("params: must be an object")
    out: dict[str, Any] = {}
    for name in params:
        if spec.param(name) is None:
            names = ", ".join(p.name for p in spec.params) or "none"
            raise FaultError(f"params.{name}: not a parameter of {kind} (parameters: {names})")
    for p in spec.params:
        value = params.get(p.name)
        if value is None:
            if p.default is None and p.name == "xid":
                raise FaultError(f"params.xid: required for {kind}; {p.allowed()}")
            out[p.name] = p.default
            continue
        out[p.name] = _coerce(p, value)
    return out


def _coerce(p: ParamSpec, value: Any) -> Any:
    bad = FaultError(f"params.{p.name}: got {value!r}; must be {p.allowed()}")
    if isinstance(value, bool):
        raise bad
    if p.type is int:
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if not isinstance(value, int):
            raise bad
    elif p.type is float:
        if not isinstance(value, (int, float)):
            raise bad
        value = float(value)
    elif not isinstance(value, str):
        raise bad
    if p.choices and value not in p.choices:
        raise bad
    if p.minimum is not None and value < p.minimum:
        raise bad
    if p.maximum is not None and value > p.maximum:
        raise bad
    return value
