"""The fault policy (``policy.yaml``): one table for every detector fault and every XID.

The policy lives in the YAML, one commented entry per fault and per code; this module validates
it with the project's schema mechanism (``runtimekit.schema.Key`` / ``validate``: the
keys of an entry are declared once, below) plus the cross-entry rules, and answers lookups.
Every error names the entry and the field (``faults.ecc_contained.severity: must be one of info,
warning, critical, got 'fatal'``), so a bad edit fails at start-up, not at the first fault.

Detectors never choose a severity, action or clearing rule: they name the fault and give the
evidence, and ``Policy.finding`` fills in the rest.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

from runtimekit.config import ConfigError, Key, validate
from runtimekit.documents import DocumentError, load_yaml_file
from runtimekit.healthcheck.types import (
    ACTIONS,
    CARD,
    CLEARS_ON_REBOOT,
    CLEARS_ON_RESET,
    CLEARS_WHEN_CLEAN,
    CRITICAL,
    INFO,
    INSTANCE,
    SCOPES,
    SEVERITIES,
    Finding,
)

DEFAULT_PATH = Path(__file__).with_name("policy.yaml")

APPLICATION = "application"
CLASSES = ("memory", "nvlink", "firmware", "bus", "driver", "thermal", "power", "pcie", "configuration",
           APPLICATION, "informational", "agent", "hardware")
CLEARS = (CLEARS_WHEN_CLEAN, CLEARS_ON_RESET, CLEARS_ON_REBOOT)
DETECTORS = ("lost_card", "driver", "ecc", "nvlink", "memory_leak", "compute_mode", "thermal_power", "pcie",
             "inforom", "slices", "checker", "machine")
SLICES = "slices"  # the detector whose faults are on a slice (healthcheck/detectors/slices.py)
XID_OWNERS = ("driver", "ecc", "lost_card")  # detectors that turn an XID into a finding
REPEATED = "xid_repeated"  # the fault raised for xid_<code>_repeated
_NAME = re.compile(r"^[a-z][a-z0-9_]*$")


def _name(value: str) -> str | None:
    return None if _NAME.match(value) else "must be a snake_case name"


def _text(value: str) -> str | None:
    return None if value.strip() else "must not be empty"


# The keys of a policy, declared once (types, allowed values, documentation).
POLICY_KEYS: dict[str, Key] = {
    "severity": Key(str, None, "info | warning | critical", allowed=SEVERITIES),
    "action": Key(str, None, "the step of the action ladder", allowed=ACTIONS),
    "class": Key(str, None, "the kind of fault (exported as the class label)", allowed=CLASSES),
    "schedulable": Key(bool, None, "new work may still be placed on the GPU"),
    "clears": Key(str, None, "how the fault clears once its signal is gone", allowed=CLEARS),
    "scope": Key(str, None, "raised in a MIG instance: holds the card (default) or only the instance", allowed=SCOPES),
    "slice_severity": Key(str, None, "with scope instance: the severity for the instance and its slice", allowed=SEVERITIES),
}
OPTIONAL = ("scope", "slice_severity")  # policy keys an entry may leave out (scope: card; slice_severity: severity)
FAULT_KEYS: dict[str, Key] = {
    "detector": Key(str, None, "the detector that raises the fault", allowed=DETECTORS),
    **POLICY_KEYS,
}
XID_KEYS: dict[str, Key] = {
    "meaning": Key(str, None, "what the driver is saying, one line", _text),
    "fault": Key(str, None, "the detector fault the XID raises (its policy applies)", _name),
    **POLICY_KEYS,
    "repeats_escalate": Key(bool, None, "bursts on one GPU raise xid_repeated"),
    "follows_companions": Key(bool, None, "take the strongest policy of the XIDs seen with it"),
}


class PolicyError(ValueError):
    """The policy is malformed; the message names the entry and the field."""


@dataclass(frozen=True, slots=True)
class FaultPolicy:
    """What a fault means for the GPU (one row of ``faults``)."""

    fault: str
    detector: str
    severity: str
    action: str
    fault_class: str
    schedulable: bool
    clears: str
    scope: str = CARD  # INSTANCE: raised in a MIG instance, it holds only that instance (and its slice)
    slice_severity: str | None = None  # with scope INSTANCE: its severity when an instance holds it

    @property
    def rank(self) -> tuple[int, int, int]:
        """Orders policies by strength: severity, then action, then how sticky the clearing is."""
        return (SEVERITIES.index(self.severity), ACTIONS.index(self.action), CLEARS.index(self.clears))


@dataclass(frozen=True, slots=True)
class XidEntry:
    """One XID: its meaning, the fault it raises and that fault's policy."""

    code: int
    meaning: str
    policy: FaultPolicy
    repeats_escalate: bool = False
    follows_companions: bool = False
    known: bool = True  # False for a code answered by the default entry

    @property
    def fault(self) -> str:
        return self.policy.fault

    @property
    def detector(self) -> str:
        return self.policy.detector

    @property
    def severity(self) -> str:
        return self.policy.severity

    @property
    def action(self) -> str:
        return self.policy.action

    @property
    def clears(self) -> str:
        return self.policy.clears

    @property
    def rank(self) -> tuple[int, int, int]:
        return self.policy.rank


@dataclass(frozen=True, slots=True)
class Policy:
    faults: Mapping[str, FaultPolicy]
    xids: Mapping[int, XidEntry]
    default: XidEntry

    def fault(self, name: str) -> FaultPolicy:
        """The policy of a detector fault; KeyError naming the table when it is not there."""
        try:
            return self.faults[name]
        except KeyError:
            raise KeyError(f"fault {name!r} is not in the fault policy (healthcheck/policy.yaml)") from None

    def xid(self, code: int) -> XidEntry:
        """The entry for ``code``; an unknown code gets the default entry, as fault ``xid_<code>``."""
        entry = self.xids.get(code)
        if entry is not None:
            return entry
        return replace(self.default, code=code, policy=replace(self.default.policy, fault=f"xid_{code}"), known=False)

    def strongest(self, codes: Iterable[int]) -> XidEntry | None:
        """The strongest entry among ``codes`` (None for none); ties go to the first code."""
        best: XidEntry | None = None
        for code in codes:
            entry = self.xid(code)
            if best is None or entry.rank > best.rank:
                best = entry
        return best

    def finding(self, gpu_index: int, uuid: str, fault: str, evidence: str, gpu_instance_id: int | None = None,
                policy: FaultPolicy | None = None, slice_id: str | None = None) -> Finding:
        """A finding of ``fault`` on GPU ``gpu_index`` (``uuid``) with its policy (or ``policy``, for
        XIDs that follow another's); raised in MIG instance ``gpu_instance_id``, or on slice
        ``slice_id``. The policy's ``scope`` travels with it: whether an instance's fault holds the card
        or only the instance is decided here, once (``ActiveFault.instance_scoped``)."""
        p = policy or self.fault(fault)
        severity = p.severity
        if gpu_instance_id is not None and p.scope == INSTANCE and p.slice_severity is not None:
            severity = p.slice_severity  # held by the instance (and its slice) only: the card never sees it
        return Finding(gpu_index, uuid, fault, severity, p.action, evidence, p.clears, gpu_instance_id,
                       p.fault_class, p.schedulable, p.scope, slice_id)

    def node_finding(self, fault: str, evidence: str, policy: FaultPolicy | None = None) -> Finding:
        """A node-level finding of ``fault`` (no GPU: ``gpu_index`` and ``uuid`` are None)."""
        p = policy or self.fault(fault)
        return Finding(None, None, fault, p.severity, p.action, evidence, p.clears, None, p.fault_class,
                       p.schedulable)


def _fields(where: str, raw: Any, keys: Mapping[str, Key]) -> dict[str, Any]:
    if not isinstance(raw, Mapping):
        raise PolicyError(f"{where}: must be a mapping of fields, got {type(raw).__name__}")
    out = {}
    for name, value in raw.items():
        try:
            out[str(name)] = validate(keys, str(name), value)
        except ConfigError as error:
            raise PolicyError(f"{where}.{error}") from None
    return out


def _policy(where: str, name: str, detector: str, values: Mapping[str, Any]) -> FaultPolicy:
    for key in POLICY_KEYS:
        if key not in values and key not in OPTIONAL:
            raise PolicyError(f"{where}.{key}: missing")
    p = FaultPolicy(name, detector, values["severity"], values["action"], values["class"], values["schedulable"],
                    values["clears"], values.get("scope", CARD), values.get("slice_severity"))
    if p.slice_severity is not None and p.scope != INSTANCE:
        raise PolicyError(f"{where}.slice_severity: only a fault an instance holds (scope: instance) has one")
    if detector == SLICES and p.scope != INSTANCE:
        raise PolicyError(f"{where}.scope: a slice's fault is held by the slice, never the card: must be instance")
    if detector not in (SLICES, *XID_OWNERS) and p.scope == INSTANCE:
        raise PolicyError(f"{where}.scope: only an XID names a MIG instance; the {detector} detector's faults "
                          "hold the card: must be card")
    if p.severity == CRITICAL and p.schedulable:
        raise PolicyError(f"{where}.schedulable: a critical fault makes the GPU unhealthy, it cannot be schedulable")
    if p.severity == INFO and (not p.schedulable or p.clears != CLEARS_WHEN_CLEAN):
        raise PolicyError(f"{where}: an info fault changes nothing: it must be schedulable and clear on clean_samples")
    return p


def _xid(where: str, code: int, raw: Any, faults: Mapping[str, FaultPolicy]) -> XidEntry:
    values = _fields(where, raw, XID_KEYS)
    if "meaning" not in values:
        raise PolicyError(f"{where}.meaning: missing")
    if "fault" in values:
        extra = sorted(k for k in values if k not in ("meaning", "fault"))
        if extra:
            raise PolicyError(f"{where}.{extra[0]}: an XID that names a fault takes that fault's policy; "
                              "remove the field or the fault")
        target = faults.get(values["fault"])
        if target is None:
            raise PolicyError(f"{where}.fault: {values['fault']!r} is not in faults")
        if target.detector not in XID_OWNERS:
            raise PolicyError(f"{where}.fault: {values['fault']!r} belongs to the {target.detector} detector, "
                              f"which reads no XIDs ({', '.join(XID_OWNERS)} do)")
        return XidEntry(code, values["meaning"].strip(), target)
    policy = _policy(where, f"xid_{code}", "driver", values)
    if policy.fault_class == APPLICATION and policy.severity not in (INFO, "warning"):
        raise PolicyError(f"{where}.severity: an application XID never changes health on its own, "
                          f"got {policy.severity!r}")
    if policy.severity == CRITICAL and policy.action in ("none", "restart_application"):
        raise PolicyError(f"{where}.action: a critical XID needs a GPU or node action, got {policy.action!r}")
    return XidEntry(code, values["meaning"].strip(), policy,
                    repeats_escalate=values.get("repeats_escalate", policy.fault_class == APPLICATION),
                    follows_companions=values.get("follows_companions", False))


def parse_policy(data: Any) -> Policy:
    """Validate the policy's parsed YAML (``{faults: {...}, default: {...}, xids: {code: {...}}}``)."""
    if not isinstance(data, Mapping):
        raise PolicyError("the policy must be a mapping with 'faults', 'default' and 'xids'")
    for key in data:
        if key not in ("faults", "default", "xids"):
            raise PolicyError(f"{key}: unknown top-level key (expected faults, default, xids)")
    for key in ("faults", "default", "xids"):
        if key not in data:
            raise PolicyError(f"{key}: missing")
    raw_faults = data["faults"]
    if not isinstance(raw_faults, Mapping) or not raw_faults:
        raise PolicyError("faults: must be a non-empty mapping of fault name to policy")
    faults: dict[str, FaultPolicy] = {}
    for name, raw in raw_faults.items():
        where = f"faults.{name}"
        if not isinstance(name, str) or _name(name):
            raise PolicyError(f"{where}: the fault name must be a snake_case name")
        values = _fields(where, raw, FAULT_KEYS)
        if "detector" not in values:
            raise PolicyError(f"{where}.detector: missing")
        faults[name] = _policy(where, name, values["detector"], values)
    if REPEATED not in faults:
        raise PolicyError(f"faults.{REPEATED}: missing (the policy of repeated application XIDs)")
    default = _xid("default", 0, data["default"], faults)
    if default.policy.fault != "xid_0":
        raise PolicyError("default.fault: the default entry carries its own policy")
    raw_xids = data["xids"]
    if not isinstance(raw_xids, Mapping) or not raw_xids:
        raise PolicyError("xids: must be a non-empty mapping of XID code to entry")
    xids: dict[int, XidEntry] = {}
    for code, raw in raw_xids.items():
        if isinstance(code, bool) or not isinstance(code, int) or not 0 < code < 1000:
            raise PolicyError(f"xids.{code!r}: the code must be an integer between 1 and 999")
        xids[code] = _xid(f"xids.{code}", code, raw, faults)
    return Policy(faults=dict(faults), xids=dict(sorted(xids.items())),
                  default=replace(default, policy=replace(default.policy, fault="xid_unknown")))


def load_policy(path: str | Path | None = None) -> Policy:
    """Read and validate a policy file (the packaged one by default)."""
    path = Path(path) if path is not None else DEFAULT_PATH
    what = f"fault policy {path}"
    try:
        data = load_yaml_file(path, what=what)
    except OSError as error:
        raise PolicyError(f"cannot read fault policy {path}: {error.strerror}") from error
    except DocumentError as error:
        raise PolicyError(str(error)) from None
    try:
        return parse_policy(data)
    except PolicyError as error:
        raise PolicyError(f"fault policy {path}: {error}") from None


@lru_cache(maxsize=1)
def default_policy() -> Policy:
    """The packaged policy, read once."""
    return load_policy()
