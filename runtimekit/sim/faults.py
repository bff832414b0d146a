"""Fault kinds the simulated node can be given, as data: description and parameter schema.

``FAULT_KINDS`` is the single table the simulator, the CLI (``cli_args``) and the HTTP control
API (``control``) read. Each parameter is declared once, as a ``runtimekit.schema.Key`` (type,
default, doc, a ``between`` range or the ``allowed`` choices); ``validate_params`` checks a
parameter dict through those keys (``runtimekit.schema.validate``) and fills defaults; node-dependent limits (link index < the GPU's link count, PCIe generation <= its max)
are checked by ``SimulatedNode.inject``. XID meanings: NVIDIA "XID Errors" catalogue
(https://docs.nvidia.com/deploy/xid-errors/); ECC containment and row remapping: NVIDIA "GPU Memory
Error Management" (https://docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt/).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from runtimekit.schema import REQUIRED, ConfigError, Key, Range, between, validate

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
    """One parameter of a fault kind: its name and its ``runtimekit.schema.Key``, declared once.

    The key's ``kind`` is ``int``, ``float`` or ``str``; its ``default`` is ``REQUIRED`` when the
    parameter must be given and None when it is "computed by the node" (said in ``doc``); ``allowed``
    restricts strings and a ``Range`` check (``between``) bounds numbers. ``validate_params``, the CLI's
    options (``cli_args``) and the control API's listing all read the key.
    """

    name: str
    key: Key

    @property
    def type(self) -> type:
        """``int``, ``float`` or ``str``."""
        kind = self.key.kind
        return kind[0] if isinstance(kind, tuple) else kind

    @property
    def default(self) -> Any:
        """The default (None: computed by the node, or required)."""
        return None if self.required else self.key.default

    @property
    def required(self) -> bool:
        return self.key.default is REQUIRED

    @property
    def help(self) -> str:
        return self.key.doc

    @property
    def choices(self) -> tuple[str, ...]:
        return tuple(self.key.allowed or ())

    def allowed(self) -> str:
        """Human text of the allowed values, for error messages and --help."""
        if self.choices:
            return "one of " + ", ".join(self.choices)
        kind = "an integer" if self.type is int else "a number" if self.type is float else "a string"
        check = self.key.check
        if isinstance(check, Range):
            hi = "" if check.high is None else _num(check.high)
            return f"{kind} in {_num(check.low)}..{hi}"
        return kind


def _param(name: str, kind: type, default: Any, doc: str, check: Range | None = None,
           allowed: tuple[str, ...] | None = None) -> ParamSpec:
    return ParamSpec(name, Key(kind, default, doc, check, allowed))


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

    def schema(self) -> dict[str, Key]:
        """``params.<name>`` -> Key, for ``runtimekit.schema.validate``."""
        return {f"params.{p.name}": p.key for p in self.params}


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


_LINK = _param("link", int, 0, "NVLink index (0..links-1)", between(0, 17))

FAULT_KINDS: Mapping[str, FaultSpec] = MappingProxyType(
    {
        s.kind: s
        for s in (
            FaultSpec(
                "xid",
                "deliver an XID to registered event sets (79 = fallen off the bus: the GPU is also lost, until a "
                "reboot; refused on a GPU off the bus, which raises nothing)",
                (_param("xid", int, REQUIRED, "XID code (required)", between(1, 999)),),
            ),
            FaultSpec(
                "ecc-uncorrectable",
                "volatile and aggregate uncorrected ECC counters grow by count; XID 48",
                (_param("count", int, 1, "uncorrectable errors to add", between(1, 1_000_000)),),
                xid=48,
            ),
            FaultSpec(
                "ecc-contained",
                "contained uncorrectable DRAM ECC error (A100/H100): uncorrected volatile and aggregate ECC "
                "counters grow by count, uncorrectable remapped rows grow by count and a remap goes pending "
                "(reset to apply); DBE event, XID 94 (contained: only the faulting app dies), then XID 63. "
                "Past 512 remapped rows (8 per bank) a row cannot be remapped: failure 1 and XID 64",
                (_param("count", int, 1, "uncorrectable errors (one faulty row each)", between(1, 512)),),
                xid=94,
            ),
            FaultSpec("row-remap-pending", "an uncorrectable row remap is pending (reset needed); XID 63 "
                      "(A100/H100 and later)", xid=63),
            FaultSpec("row-remap-failure", "row remapping failed; XID 64 (A100/H100 and later; kept in the "
                      "InfoROM by a reset or reboot)", xid=64),
            FaultSpec("gpu-lost", "every call on the device returns NVML_ERROR_GPU_IS_LOST"),
            FaultSpec("nvlink-down", "the NVLink goes inactive and its throughput stops", (_LINK,)),
            FaultSpec(
                "nvlink-crc",
                "NVLink CRC errors at rate per second, each a flit or a data CRC error (DL_CRC_FLIT + "
                "DL_CRC_DATA grow by rate, half each); each is replayed, so DL_REPLAY grows by rate too",
                (_param("rate", float, 1000.0, "errors per second", between(0, 1e9)), _LINK),
            ),
            FaultSpec(
                "nvlink-recovery",
                "NVLink recovery (DL_RECOVERY) counter grows by count (the link retrained); CRC and replay stay",
                (_param("count", int, 1, "link recoveries to add", between(1, 1_000_000)), _LINK),
            ),
            FaultSpec(
                "pcie-replays",
                "PCIe replays (the link resending what failed its LCRC or sequence check) at rate per second: "
                "the replay counter (nvmlDeviceGetPcieReplayCounter) grows by rate",
                (_param("rate", float, 1.0, "replays per second", between(0, 1e9)),),
            ),
            FaultSpec(
                "compute-mode",
                "nvmlDeviceGetComputeMode answers this mode",
                (_param("mode", str, "exclusive-process", "compute mode", allowed=tuple(COMPUTE_MODES)),),
            ),
            FaultSpec(
                "memory-leak",
                "memory used grows by bytes with no process holding it",
                (_param("bytes", int, 4 << 30, "leaked bytes", between(1, 1 << 50)),),
            ),
            FaultSpec(
                "driver-error",
                "every NVML call on the device returns this error",
                (_param("error", str, "unknown", "NVML error", allowed=tuple(DRIVER_ERRORS)),),
            ),
            FaultSpec(
                "thermal-slowdown",
                "HW thermal slowdown: reasons gain 0x8|0x40, temperature near slowdown, SM clock cut",
            ),
            FaultSpec("power-brake", "HW power brake: reasons gain 0x8|0x80, clocks cut"),
            FaultSpec("inforom-corrupt", "the InfoROM fails its checksum: nvmlDeviceValidateInforom answers "
                      "NVML_ERROR_CORRUPTED_INFOROM"),
            FaultSpec(
                "recovery-action",
                "the driver announces the recovery it needs: field 230 (NVML_FI_DEV_GET_GPU_RECOVERY_ACTION) "
                "holds it, and XID 154 is delivered",
                (_param("action", str, "gpu_reset", "the recovery action", allowed=tuple(RECOVERY_ACTIONS)),),
                xid=154,
            ),
            FaultSpec(
                "pcie-downtrain",
                "current PCIe link width/generation drop",
                (
                    _param("width", int, 8, "lanes", between(1, 16)),
                    _param("gen", int, None, "PCIe generation (default: max - 1)", between(1, 6)),
                ),
            ),
        )
    }
)


def validate_params(kind: str, params: Mapping[str, Any] | None) -> dict[str, Any]:
    """Check ``params`` for ``kind`` against its keys and return them with defaults filled
    (FaultError naming ``params.<name>`` and what is allowed otherwise)."""
    spec = FAULT_KINDS.get(kind)
    if spec is None:
        raise FaultError(f"fault: unknown kind {kind!r} (allowed: {', '.join(sorted(FAULT_KINDS))})")
    if params is not None and not isinstance(params, Mapping):
        raise FaultError("params: must be an object")
    params = dict(params or {})
    for name in params:
        if spec.param(name) is None:
            names = ", ".join(p.name for p in spec.params) or "none"
            raise FaultError(f"params.{name}: not a parameter of {kind} (parameters: {names})")
    schema = spec.schema()
    out: dict[str, Any] = {}
    for p in spec.params:
        value = params.get(p.name)
        if value is None:
            if p.required:
                raise FaultError(f"params.{p.name}: required for {kind}; {p.allowed()}")
            out[p.name] = p.default
            continue
        value = _coerce(p, value)
        try:
            validate(schema, f"params.{p.name}", value)
        except ConfigError:
            raise FaultError(f"params.{p.name}: got {value!r}; must be {p.allowed()}") from None
        out[p.name] = value
    return out


def _coerce(p: ParamSpec, value: Any) -> Any:
    """JSON's numbers as the key's type: 3.0 for an integer parameter is 3, 3 for a number is 3.0."""
    if isinstance(value, bool):
        return value  # refused by the key's type
    if p.type is int and isinstance(value, float) and value.is_integer():
        return int(value)
    if p.type is float and isinstance(value, int):
        return float(value)
    return value
