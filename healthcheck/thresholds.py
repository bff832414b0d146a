"""Health-check thresholds (``thresholds.yaml``): loaded, validated, one plain mapping per detector.

The numbers and their reasons live in the YAML; ``SCHEMA`` here declares each key's type and
range so that a typo or a nonsense value fails at start-up with the key named
(``ecc.retired_pages_limt: unknown key``). ``load_thresholds`` returns
``{section: {key: value}}``; ``for_detector`` gives one detector its section merged over the
packaged defaults, so a detector called with a partial (or empty) config still has every key.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

DEFAULT_PATH = Path(__file__).with_name("thresholds.yaml")

COMPUTE_MODES = ("default", "exclusive_thread", "prohibited", "exclusive_process")


class ThresholdError(ValueError):
    """Invalid thresholds; the message names the key (``section.key``) and the rule."""


Check = Callable[[Any], str | None]


def _int(low: int, high: int | None = None) -> Check:
    def check(v: Any) -> str | None:
        if isinstance(v, bool) or not isinstance(v, int):
            return "must be an integer"
        if v < low or (high is not None and v > high):
            return f"must be between {low} and {high}" if high is not None else f"must be >= {low}"
        return None
    return check


def _number(low: float, high: float | None = None, *, strict: bool = False) -> Check:
    def check(v: Any) -> str | None:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            return "must be a finite number"
        if v < low or (strict and v == low) or (high is not None and v > high):
            bound = f"> {low}" if strict else f">= {low}"
            return f"must be {bound}" + (f" and <= {high}" if high is not None else "")
        return None
    return check


def _bool(v: Any) -> str | None:
    return None if isinstance(v, bool) else "must be true or false"


def _optional(check: Check) -> Check:
    return lambda v: None if v is None else check(v)


def _mode(v: Any) -> str | None:
    return None if v in COMPUTE_MODES else f"must be one of {', '.join(COMPUTE_MODES)} or null"


# section -> key -> check. Documentation is in thresholds.yaml, next to the values.
SCHEMA: dict[str, dict[str, Check]] = {
    "machine": {"clean_samples": _int(1)},
    "lost_card": {},
    "ecc": {
        "retired_pages_limit": _int(1, 64),
        "remapped_rows_uncorrectable_limit": _int(1),
        "contained_xid_window_seconds": _number(0, strict=True),
    },
    "driver": {
        "error_seconds": _number(0),
        "app_xid_burst_seconds": _number(0, strict=True),
        "app_xid_bursts": _int(1),
        "app_xid_window_seconds": _number(0, strict=True),
        "companion_window_seconds": _number(0),
    },
    "memory_leak": {
        "orphan_used_bytes": _int(0),
        "orphan_seconds": _number(0),
        "require_visible_processes": _bool,
        "ghost_utilization": _number(0, 1, strict=True),
        "ghost_seconds": _number(0),
        "leak_bytes_per_second": _number(0, strict=True),
        "leak_window_seconds": _number(0, strict=True),
    },
    "nvlink": {
        "expected_active_links": _optional(_int(0)),
        "error_per_second_critical": _number(0, strict=True),
        "error_per_second_warning": _number(0, strict=True),
        "recovery_increase": _int(1),
    },
    "compute_mode": {"expected": _optional(_mode)},
    "thermal_power": {
        "thermal_seconds": _number(0),
        "thermal_critical_seconds": _number(0),
        "power_brake_seconds": _number(0),
    },
    "pcie": {"load_utilization": _number(0, 1), "judge_in_p0": _bool, "degraded_seconds": _number(0)},
}


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
    """Check ``data`` against SCHEMA; with ``base`` (the defaults) missing keys are taken from it,
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
            check = SCHEMA[section].get(key)
            if check is None:
                allowed = ", ".join(SCHEMA[section]) or "none"
                raise ThresholdError(f"{section}.{key}: unknown key (keys of {section}: {allowed})")
            problem = check(value)
            if problem:
                raise ThresholdError(f"{section}.{key}: {problem}, got {value!r}")
            values[key] = value
    for section, keys in SCHEMA.items():
        for key in keys:
            if key not in out.get(section, {}):
                raise ThresholdError(f"{section}.{key}: missing")
    _cross_checks(out)
    return out


def _read(path: Path) -> Any:
    try:
        text = path.read_text()
    except OSError as error:
        raise ThresholdError(f"cannot read thresholds {path}: {error.strerror}") from error
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise ThresholdError(f"thresholds {path} are not valid YAML: {error}") from error


def parse_thresholds(data: Any, *, complete: bool = False) -> dict[str, dict[str, Any]]:
    """Validate parsed YAML. ``complete``: every key must be present (the packaged defaults);
    otherwise ``data`` overrides the defaults."""
    return _validate(data, None if complete else defaults())


def load_thresholds(path: str | Path | None = None) -> dict[str, dict[str, Any]]:
    """The packaged defaults, overridden by the operator's file at ``path`` when given."""
    if path is None:
        return {section: dict(keys) for section, keys in defaults().items()}
    path = Path(path)
    try:
        return parse_thresholds(_read(path))
    except ThresholdError as error:
        raise ThresholdError(f"thresholds {path}: {error}") from None


@lru_cache(maxsize=1)
def _defaults() -> dict[str, dict[str, Any]]:
    try:
        return _validate(_read(DEFAULT_PATH), None)
    except ThresholdError as error:
        raise ThresholdError(f"thresholds {DEFAULT_PATH}: {error}") from None


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
