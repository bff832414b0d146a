"""Health-check thresholds (``thresholds.yaml``): loaded, validated, one plain mapping per detector.

Each fact is declared once, in the place that explains it:

- **The keys, their types and rules** are the fields of one settings dataclass per detector section
  below (``runtimekit.schema.setting``: the annotation is the type, the check the range, the doc
  one line of meaning). ``SCHEMA`` (section -> key -> ``Key``) and the flat dotted schema that
  ``runtimekit.schema.validate`` checks are derived from them, not listed again.
- **The numbers and the reasons for them** live in ``thresholds.yaml``, one comment per key citing
  where the number comes from. The fields therefore have no default (``REQUIRED``): a number in
  the code as well would be a second copy to drift. The packaged file is validated in *complete*
  mode — every declared key present, no other — so the YAML and the dataclasses always list the
  same keys (checked at start-up, and by tests/healthcheck/test_health_thresholds.py).

The dataclasses are the declaration, not the value passed around: ``load_thresholds`` returns
``{section: {key: value}}`` (what the detectors index), and ``for_detector`` gives one detector its
section merged over the packaged defaults, so a detector called with a partial (or empty) config
still has every key. A typo or a nonsense value fails at start-up with the key and the rule named
(``ecc.retired_pages_limt: unknown key``, ``ecc.retired_pages_limit: must be between 1 and 64``).
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from runtimekit.documents import DocumentError, load_yaml_file
from runtimekit.schema import REQUIRED, ConfigError, Key, above, at_least, between, schema_of, setting, validate, yaml_number

DEFAULT_PATH = Path(__file__).with_name("thresholds.yaml")
#: The agent's configuration key naming an operator's thresholds file (runtimekit/config.py).
KEY = "health.thresholds"

COMPUTE_MODES = ("default", "exclusive_thread", "prohibited", "exclusive_process")


class ThresholdError(ValueError):
    """Invalid thresholds; the message names the key (``section.key``) and the rule."""


# -- the sections: one dataclass each, fields declared once (values: thresholds.yaml) --------------

@dataclass(frozen=True, slots=True)
class MachineThresholds:
    """Read by the state machine (healthcheck/machine.py), not by a detector."""

    clean_samples: int = setting(REQUIRED, "samples in a row without a fault's signal before it clears", at_least(1))
    recurrence_interventions: int = setting(
        REQUIRED, "a GPU's resets or reboots within the window that raise gpu_fault_recurring", at_least(2))
    recurrence_window_seconds: float = setting(REQUIRED, "the window of recurrence_interventions", at_least(60))


@dataclass(frozen=True, slots=True)
class LostCardThresholds:
    """No thresholds: a lost, vanished or missing GPU is critical at once."""


@dataclass(frozen=True, slots=True)
class InforomThresholds:
    """No thresholds: an InfoROM that fails its checksum is a warning at once."""


@dataclass(frozen=True, slots=True)
class EccThresholds:
    retired_pages_limit: int = setting(REQUIRED, "retired pages at which the GPU is past saving", between(1, 64))
    remapped_rows_uncorrectable_limit: int = setting(
        REQUIRED, "uncorrectable remapped rows at which the remapper is exhausted", at_least(1)
    )
    contained_xid_window_seconds: float = setting(
        REQUIRED, "seconds either side of an ECC jump within which an XID 94 makes it contained", above(0)
    )


@dataclass(frozen=True, slots=True)
class DriverThresholds:
    error_seconds: float = setting(REQUIRED, "seconds of uninterrupted NVML errors before a GPU is suspect", at_least(0))
    app_xid_burst_seconds: float = setting(REQUIRED, "XIDs of one code closer than this are one burst", above(0))
    app_xid_bursts: int = setting(REQUIRED, "bursts within the window that escalate an application XID", at_least(1))
    app_xid_window_seconds: float = setting(REQUIRED, "the window in which bursts are counted", above(0))
    companion_window_seconds: float = setting(REQUIRED, "XIDs this close on one GPU are seen together", at_least(0))


@dataclass(frozen=True, slots=True)
class MemoryLeakThresholds:
    orphan_used_bytes: int = setting(REQUIRED, "memory no process accounts for above which it is orphaned", at_least(0))
    orphan_seconds: float = setting(REQUIRED, "seconds of uninterrupted orphaned memory before flagging", at_least(0))
    require_visible_processes: bool = setting(REQUIRED, "flag orphans/ghosts only once a process has been seen")
    ghost_utilization: float = setting(REQUIRED, "utilization (0..1) of a GPU without a process that is a ghost",
                                       above(0, 1))
    ghost_seconds: float = setting(REQUIRED, "seconds of ghost utilization before flagging", at_least(0))
    leak_bytes_per_second: float = setting(REQUIRED, "growth (bytes/s) over both halves of the window that leaks",
                                           above(0))
    leak_window_seconds: float = setting(REQUIRED, "the window over which a process's growth is judged", above(0))


@dataclass(frozen=True, slots=True)
class NvlinkThresholds:
    expected_active_links: int | None = setting(
        REQUIRED, "active links expected (null: the GPU's own link count)", at_least(0)
    )
    error_per_second_critical: float = setting(REQUIRED, "link errors per second that are critical", above(0))
    error_per_second_warning: float = setting(REQUIRED, "link errors per second that are a warning", above(0))
    recovery_increase: int = setting(REQUIRED, "recovery counter increase between samples that fails", at_least(1))


@dataclass(frozen=True, slots=True)
class ComputeModeThresholds:
    expected: str | None = setting(
        REQUIRED, "the compute mode the node's policy declares (null: do not check)", allowed=COMPUTE_MODES
    )


@dataclass(frozen=True, slots=True)
class ThermalPowerThresholds:
    thermal_seconds: float = setting(REQUIRED, "seconds of thermal slowdown before a warning", at_least(0))
    thermal_critical_seconds: float = setting(REQUIRED, "seconds of thermal slowdown before critical", at_least(0))
    power_brake_seconds: float = setting(REQUIRED, "seconds of HW power brake before critical", at_least(0))


@dataclass(frozen=True, slots=True)
class PcieThresholds:
    load_utilization: float = setting(REQUIRED, "utilization (0..1) from which the link must run at max gen",
                                      between(0, 1))
    judge_in_p0: bool = setting(REQUIRED, "also judge the generation whenever the GPU is in P0")
    degraded_seconds: float = setting(REQUIRED, "seconds of uninterrupted degradation before a warning", at_least(0))
    replays_per_minute: float = setting(REQUIRED, "PCIe replays per minute, over the window, that warn", above(0))
    replay_window_seconds: float = setting(REQUIRED, "seconds of replay counts a rate is judged over", above(0))


@dataclass(frozen=True, slots=True)
class SlicesThresholds:
    compute_over_share_seconds: float = setting(
        REQUIRED, "seconds a slice's SM share stays above its compute share before a finding", above(0)
    )


@dataclass(frozen=True, slots=True)
class Thresholds:
    """Every section, under its detector's name (the top level of thresholds.yaml)."""

    machine: MachineThresholds
    lost_card: LostCardThresholds
    ecc: EccThresholds
    driver: DriverThresholds
    memory_leak: MemoryLeakThresholds
    nvlink: NvlinkThresholds
    compute_mode: ComputeModeThresholds
    thermal_power: ThermalPowerThresholds
    pcie: PcieThresholds
    inforom: InforomThresholds
    slices: SlicesThresholds


#: section name -> its dataclass (derived from ``Thresholds``).
SECTIONS: dict[str, type] = {f.name: typing.get_type_hints(Thresholds)[f.name] for f in dataclasses.fields(Thresholds)}
#: section -> key -> Key (derived from the dataclasses).
SCHEMA: dict[str, dict[str, Key]] = {name: schema_of(cls) for name, cls in SECTIONS.items()}
#: dotted key (``ecc.retired_pages_limit``) -> Key: what ``validate`` checks.
FLAT_SCHEMA: dict[str, Key] = {f"{s}.{k}": key for s, keys in SCHEMA.items() for k, key in keys.items()}


# -- the rules across keys ------------------------------------------------------------------------

def _cross_checks(values: Mapping[str, Mapping[str, Any]]) -> None:
    nv = values["nvlink"]
    if nv["error_per_second_warning"] > nv["error_per_second_critical"]:
        raise ThresholdError("nvlink.error_per_second_warning must not exceed nvlink.error_per_second_critical")
    tp = values["thermal_power"]
    if tp["thermal_critical_seconds"] < tp["thermal_seconds"]:
        raise ThresholdError("thermal_power.thermal_critical_seconds must be >= thermal_power.thermal_seconds")
    dr = values["driver"]
    if dr["app_xid_burst_seconds"] >= dr["app_xid_window_seconds"]:
        raise ThresholdError("driver.app_xid_burst_seconds must be shorter than driver.app_xid_window_seconds")


def _validate(data: Any, base: Mapping[str, Mapping[str, Any]] | None) -> dict[str, dict[str, Any]]:
    """Check ``data`` against the schema; with ``base`` (the defaults) missing keys are taken from it,
    without it every key must be present."""
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise ThresholdError("thresholds must be a mapping of detector name to its keys")
    out: dict[str, dict[str, Any]] = {s: dict(base[s]) for s in SCHEMA} if base is not None else {}
    for section, keys in data.items():
        if section not in SCHEMA:
            raise ThresholdError(f"{section}: unknown section (sections: {', '.join(SCHEMA)})")
        if keys is None:
            keys = {}
        if not isinstance(keys, Mapping):
            raise ThresholdError(f"{section}: must be a mapping of keys to values")
        values = out.setdefault(section, {})
        for key, value in keys.items():
            if key not in SCHEMA[section]:
                allowed = ", ".join(SCHEMA[section]) or "none"
                raise ThresholdError(f"{section}.{key}: unknown key (keys of {section}: {allowed})")
            try:
                dotted = f"{section}.{key}"
                values[key] = validate(FLAT_SCHEMA, dotted, yaml_number(FLAT_SCHEMA.get(dotted), value))
            except ConfigError as error:
                raise ThresholdError(str(error)) from None
    for section, keys in SCHEMA.items():
        for key in keys:
            if key not in out.get(section, {}):
                raise ThresholdError(f"{section}.{key}: missing")
    _cross_checks(out)
    return out


def _read(path: Path, what: str, *, complete: bool) -> dict[str, dict[str, Any]]:
    """The thresholds file at ``path`` read within the bounds of ``runtimekit.documents`` and
    validated (``parse_thresholds``); ThresholdError ``"<what>: <file>: <rule>"`` otherwise."""
    try:
        data = load_yaml_file(path, what=str(path))
    except OSError as error:
        raise ThresholdError(f"{what}: cannot read {path}: {error.strerror or error}") from None
    except DocumentError as error:
        raise ThresholdError(f"{what}: {error}") from None
    try:
        return parse_thresholds(data, complete=complete)
    except ThresholdError as error:
        raise ThresholdError(f"{what}: {path}: {error}") from None


def parse_thresholds(data: Any, *, complete: bool = False) -> dict[str, dict[str, Any]]:
    """Validate parsed YAML. ``complete``: every key must be present (the packaged defaults);
    otherwise ``data`` overrides the defaults."""
    return _validate(data, None if complete else defaults())


def load_thresholds(path: str | Path | None = None) -> dict[str, dict[str, Any]]:
    """The packaged defaults, overridden by the operator's file at ``path`` when given (the agent's
    ``health.thresholds``, which its errors name)."""
    if path is None:
        return defaults()
    return _read(Path(path), KEY, complete=False)


@lru_cache(maxsize=1)
def _defaults() -> dict[str, dict[str, Any]]:
    return _read(DEFAULT_PATH, "packaged thresholds", complete=True)


def defaults() -> dict[str, dict[str, Any]]:
    """The packaged thresholds (a fresh copy each call)."""
    return {section: dict(keys) for section, keys in _defaults().items()}


def for_detector(name: str, config: Mapping[str, Any] | None) -> dict[str, Any]:
    """One detector's thresholds: ``config`` (its own section, possibly partial) over the defaults.

    Values are not re-validated here: the checker validates once with ``load_thresholds``.
    """
    merged = dict(_defaults().get(name, {}))
    merged.update(config or {})
    return merged


def typed(values: Mapping[str, Mapping[str, Any]]) -> Thresholds:
    """Validated ``{section: {key: value}}`` (``load_thresholds``) as the typed ``Thresholds``."""
    return Thresholds(**{name: cls(**values[name]) for name, cls in SECTIONS.items()})
