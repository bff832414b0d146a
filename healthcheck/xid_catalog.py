"""The XID catalog (``xid_catalog.yaml``): loaded once, validated, looked up by code.

The policy lives in the YAML, one commented entry per code; this module only checks it. Every
error names the code and the field (``XID 48: severity 'fatal' is not one of info, warning,
critical``), so a bad edit fails at start-up, not at the first fault.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

from runtimekit.healthcheck.types import (
    ACTIONS,
    CLEARS_ON_REBOOT,
    CLEARS_ON_RESET,
    CLEARS_WHEN_CLEAN,
    CRITICAL,
    INFO,
    SEVERITIES,
    WARNING,
)

DEFAULT_PATH = Path(__file__).with_name("xid_catalog.yaml")

APPLICATION = "application"
CLASSES = (APPLICATION, "memory", "nvlink", "firmware", "bus", "informational")
CLEARS = (CLEARS_WHEN_CLEAN, CLEARS_ON_RESET, CLEARS_ON_REBOOT)
DETECTORS = ("driver", "ecc", "lost_card")  # the detectors that turn an XID into a finding
_FAULT = re.compile(r"^[a-z][a-z0-9_]*$")

_REQUIRED = ("meaning", "class", "severity", "action", "clears")
_OPTIONAL = ("detector", "fault", "repeats_escalate", "follows_companions")


class XidCatalogError(ValueError):
    """The catalog is malformed; the message names the code and the field."""


@dataclass(frozen=True, slots=True)
class XidEntry:
    code: int
    meaning: str
    xid_class: str
    severity: str
    action: str
    clears: str
    detector: str = "driver"
    fault: str = ""
    repeats_escalate: bool = False
    follows_companions: bool = False
    known: bool = True  # False for a code answered by the catalog's default entry

    @property
    def rank(self) -> tuple[int, int, int]:
        """Orders entries by strength: severity, then action, then how sticky the clearing is."""
        return (SEVERITIES.index(self.severity), ACTIONS.index(self.action), CLEARS.index(self.clears))


@dataclass(frozen=True, slots=True)
class XidCatalog:
    entries: Mapping[int, XidEntry]
    default: XidEntry

    def get(self, code: int) -> XidEntry:
        """The entry for ``code``; an unknown code gets the default entry, named ``xid_<code>``."""
        entry = self.entries.get(code)
        if entry is not None:
            return entry
        return replace(self.default, code=code, fault=f"xid_{code}", known=False)

    def strongest(self, codes: Iterable[int]) -> XidEntry | None:
        """The strongest entry among ``codes`` (None for none); ties go to the first code."""
        best: XidEntry | None = None
        for code in codes:
            entry = self.get(code)
            if best is None or entry.rank > best.rank:
                best = entry
        return best


def _entry(where: str, code: int, raw: Any) -> XidEntry:
    if not isinstance(raw, Mapping):
        raise XidCatalogError(f"{where}: must be a mapping of fields, got {type(raw).__name__}")
    unknown = sorted(str(k) for k in raw if k not in _REQUIRED + _OPTIONAL)
    if unknown:
        raise XidCatalogError(f"{where}: unknown field {unknown[0]!r} (fields: {', '.join(_REQUIRED + _OPTIONAL)})")
    for name in _REQUIRED:
        if name not in raw:
            raise XidCatalogError(f"{where}: missing field {name!r}")

    def choice(name: str, allowed: tuple[str, ...], default: str | None = None) -> str:
        value = raw.get(name, default)
        if value not in allowed:
            raise XidCatalogError(f"{where}: {name} {value!r} is not one of {', '.join(allowed)}")
        return value

    def flag(name: str, default: bool) -> bool:
        value = raw.get(name, default)
        if not isinstance(value, bool):
            raise XidCatalogError(f"{where}: {name} must be true or false, got {value!r}")
        return value

    meaning = raw["meaning"]
    if not isinstance(meaning, str) or not meaning.strip():
        raise XidCatalogError(f"{where}: meaning must be a non-empty string")
    xid_class = choice("class", CLASSES)
    severity = choice("severity", SEVERITIES)
    action = choice("action", ACTIONS)
    clears = choice("clears", CLEARS)
    detector = choice("detector", DETECTORS, "driver")
    fault = raw.get("fault", f"xid_{code}")
    if not isinstance(fault, str) or not _FAULT.match(fault):
        raise XidCatalogError(f"{where}: fault {fault!r} must be a snake_case name")
    repeats = flag("repeats_escalate", xid_class == APPLICATION)
    follows = flag("follows_companions", False)
    if severity == INFO and clears != CLEARS_WHEN_CLEAN:
        raise XidCatalogError(f"{where}: an info entry cannot be sticky (clears {clears!r})")
    if severity == CRITICAL and action in ("none", "restart_application"):
        raise XidCatalogError(f"{where}: a critical entry needs a GPU or node action, not {action!r}")
    if xid_class == APPLICATION and severity not in (INFO, WARNING):
        raise XidCatalogError(f"{where}: an application XID never changes health on its own (severity {severity!r})")
    return XidEntry(code, meaning.strip(), xid_class, severity, action, clears, detector, fault, repeats, follows)


def parse_catalog(data: Any) -> XidCatalog:
    """Validate the catalog's parsed YAML (``{default: {...}, xids: {code: {...}}}``)."""
    if not isinstance(data, Mapping):
        raise XidCatalogError("the catalog must be a mapping with 'default' and 'xids'")
    unknown = sorted(str(k) for k in data if k not in ("default", "xids"))
    if unknown:
        raise XidCatalogError(f"unknown top-level key {unknown[0]!r} (expected 'default' and 'xids')")
    if "default" not in data:
        raise XidCatalogError("missing 'default' entry (what an unknown XID means)")
    default = _entry("default", 0, data["default"])
    if default.detector != "driver":
        raise XidCatalogError("default: detector must be 'driver'")
    xids = data.get("xids")
    if not isinstance(xids, Mapping) or not xids:
        raise XidCatalogError("'xids' must be a non-empty mapping of XID code to entry")
    entries: dict[int, XidEntry] = {}
    for code, raw in xids.items():
        if isinstance(code, bool) or not isinstance(code, int) or not 0 < code < 1000:
            raise XidCatalogError(f"XID {code!r}: the code must be an integer between 1 and 999")
        entries[code] = _entry(f"XID {code}", code, raw)
    return XidCatalog(entries=dict(sorted(entries.items())), default=replace(default, code=0, fault="xid_unknown"))


def load_catalog(path: str | Path | None = None) -> XidCatalog:
    """Read and validate a catalog file (the packaged one by default)."""
    path = Path(path) if path is not None else DEFAULT_PATH
    try:
        text = path.read_text()
    except OSError as error:
        raise XidCatalogError(f"cannot read XID catalog {path}: {error.strerror}") from error
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise XidCatalogError(f"XID catalog {path} is not valid YAML: {error}") from error
    try:
        return parse_catalog(data)
    except XidCatalogError as error:
        raise XidCatalogError(f"XID catalog {path}: {error}") from None


@lru_cache(maxsize=1)
def default_catalog() -> XidCatalog:
    """The packaged catalog, read once."""
    return load_catalog()
