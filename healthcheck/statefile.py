"""The health state file's format: the fields of ``<state_dir>/health.json``, its schema versions and
what makes a file (or one GPU entry in it) unreadable. Reading the file, writing it atomically and
what the agent does with a file it cannot read are the store's (``healthcheck/store.py``).

**Fields** (schema version 2; times in unix seconds): ``version``; ``saved_at``; ``boot_id`` (the
node's boot id when written); ``expected_gpus`` (the most GPUs ever seen: lost-card detection
compares against it); ``gpus``, per GPU ``index``, ``uuid``, ``state``, ``since``, ``retired``,
its active ``faults`` (``ActiveFault``'s fields, with ``first_seen`` and ``last_seen``; ``scope``,
``card`` or ``instance``, is read as ``card`` when absent, as files written before it have it) and
``interventions`` (the times its recent resets or reboots began, ``healthcheck/recurrence.py``; read
as none when absent, as files written before it have it, and an unreadable time is left out); ``node``,
the node-level ``state``, ``since`` and ``faults`` (it names no GPU); ``transitions_total`` and
``fault_events_total`` per GPU uuid, and the node's ``node_fault_events_total``; ``detectors``,
each detector's JSON-friendly state by name; ``reset_counters``, per GPU uuid [sample time, energy
J, corrected and uncorrected volatile ECC] of the last sample (``healthcheck/resets.py``: how a
reset made while the agent was stopped is seen; absent in older files, and an entry that cannot
be read is left out — neither stops the file from being read).

**Versions.** Version 2 gives the node its own shape; version 1 files (written before, with the
node as a record at index -1 and uuid "", and its fault events under uuid "") are still read: the
node entry and its counters are mapped over, and the next write is version 2. A newer version is
unreadable.

**Validation.** A readable file is at most ``MAX_STATE_BYTES``, nested at most
``MAX_STATE_DEPTH`` deep, UTF-8 JSON (``runtimekit.documents`` enforces these three), an object of
a version in ``READABLE_VERSIONS`` with every field present: states and severities from
``healthcheck.types``, counts non-negative integers (not booleans), ``retired`` true or false,
``boot_id`` a string, every time ``plausible_time`` (a finite number of unix seconds from 1970 to
2100: not NaN, infinite, negative or 1e300); GPU uuids non-empty strings. Anything else raises one of
``DECODE_ERRORS`` and the whole file is unknown — except a GPU entry whose ``index`` and ``uuid``
are readable but whose other fields are not: ``decode`` lists it, leaves it out of the state and
reads the rest.

**What a write must keep** (``essential``): the document less ``saved_at`` and the per-sample
fields of faults (``last_seen``, evidence wording, clean-sample progress), so that the store does
not write once per sample.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict
from types import MappingProxyType
from typing import Any

from runtimekit.documents import DocumentError
from runtimekit.healthcheck.machine import GpuRecord, MachineState, NodeRecord
from runtimekit.healthcheck.resets import Counters
from runtimekit.healthcheck.types import CARD, SCOPES, SEVERITIES, STATES, ActiveFault
from runtimekit.state.health import plausible_time

SCHEMA_VERSION = 2
READABLE_VERSIONS = (1, 2)  # version 1: the node as a record at index -1, uuid ""
MAX_STATE_BYTES = 16 << 20  # a full node's file is ~100 KB; detector histories of many processes add to it
MAX_STATE_DEPTH = 64  # the file nests 6 deep
DECODE_ERRORS = (ValueError, TypeError, KeyError, AttributeError, OverflowError)  # what decoding a malformed document raises


class StoreFormatError(ValueError):
    """The file is not a health state this version can read."""


def encode(state: MachineState, expected_gpus: int, boot_id: str, *, saved_at: float,
           detectors: Mapping[str, Any] | None = None, counters: Mapping[str, Counters] | None = None) -> dict[str, Any]:
    """The document for ``state`` (version ``SCHEMA_VERSION``), written at ``saved_at`` (unix seconds)."""
    return {
        "reset_counters": {uuid: [c.at, c.energy_joules, c.corrected_volatile, c.uncorrected_volatile]
                           for uuid, c in sorted((counters or {}).items())},
        "version": SCHEMA_VERSION,
        "saved_at": saved_at,
        "boot_id": boot_id,
        "expected_gpus": expected_gpus,
        "gpus": [_record(r) for r in sorted(state.gpus.values(), key=lambda r: (r.index, r.uuid))],
        "node": {"state": state.node.state, "since": state.node.since,
                 "faults": [asdict(f) for f in state.node.faults]},
        "transitions_total": [
            {"uuid": u, "from": a, "to": b, "count": n} for (u, a, b), n in sorted(state.transitions_total.items())
        ],
        "fault_events_total": [
            {"uuid": u, "fault": f, "severity": s, "count": n} for (u, f, s), n in sorted(state.fault_events_total.items())
        ],
        "node_fault_events_total": [
            {"fault": f, "severity": s, "count": n} for (f, s), n in sorted(state.node_fault_events_total.items())
        ],
        "detectors": dict(detectors or {}),
    }


def _record(record: GpuRecord) -> dict[str, Any]:
    return {"index": record.index, "uuid": record.uuid, "state": record.state, "since": record.since,
            "retired": record.retired, "faults": [asdict(f) for f in record.faults],
            "interventions": list(record.interventions)}


_VOLATILE = ("last_seen", "evidence", "clean_samples")


def essential(doc: dict[str, Any]) -> Any:
    """What must be on disk: the document less saved_at and the per-sample fields of faults."""
    def record(r: dict[str, Any]) -> Any:  # the node entry has no index and uuid (in version 1, -1 and "")
        return (r.get("index"), r.get("uuid"), r["state"], r["since"], r.get("retired", False),
                [{k: v for k, v in f.items() if k not in _VOLATILE} for f in r["faults"]], r.get("interventions"))
    return (doc.get("version"), doc["boot_id"], doc["expected_gpus"], [record(r) for r in doc["gpus"]],
            record(doc["node"]), doc["transitions_total"], doc["fault_events_total"],
            doc.get("node_fault_events_total"))


BadGpu = tuple[int, str, str]  # (index, uuid, why) of a GPU entry that could not be read


def decode_counters(doc: Mapping[str, Any]) -> dict[str, Counters]:
    """The saved ``reset_counters`` by GPU UUID; an entry that is not [time, number or null × 3] is
    left out (no reset is then seen for that GPU: its faults stay held, the safe side)."""
    saved = doc.get("reset_counters")
    out: dict[str, Counters] = {}
    for uuid, entry in (saved.items() if isinstance(saved, dict) else ()):
        if (isinstance(uuid, str) and isinstance(entry, list) and len(entry) == 4 and plausible_time(entry[0])
                and all(v is None or (_real(v) and v >= 0) for v in entry[1:])):
            out[uuid] = Counters(float(entry[0]), *(None if v is None else float(v) for v in entry[1:]))
    return out


def _real(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def decode(doc: Any) -> tuple[MachineState, int, str, list[BadGpu]]:
    """(state, expected GPUs, saved boot id, unreadable GPU entries). A GPU entry with a readable
    ``index`` and ``uuid`` but other fields malformed is left out of the state and listed; anything
    else malformed raises ValueError/TypeError/KeyError/AttributeError (the whole file is unknown)."""
    if not isinstance(doc, dict):
        raise StoreFormatError("not a JSON object")
    version = doc.get("version")
    if version not in READABLE_VERSIONS:
        raise StoreFormatError(f"schema version {version!r}, this agent reads {', '.join(map(str, READABLE_VERSIONS))}")
    gpus, bad = {}, []
    for item in _list(doc["gpus"], "gpus"):
        try:
            record = _decode_record(item)
        except DECODE_ERRORS as error:
            bad.append((*_identity(item, error), reason(error)))
            continue
        gpus[record.uuid] = record
    node_item = doc["node"]
    node = NodeRecord(_state(node_item["state"]), _time(node_item["since"], "node.since"),
                      _decode_faults(node_item["faults"]))
    transitions = {(str(t["uuid"]), _state(t["from"]), _state(t["to"])): _count(t["count"])
                   for t in _list(doc["transitions_total"], "transitions_total")}
    events: dict[tuple[str, str, str], int] = {}
    node_events: dict[tuple[str, str], int] = {}
    for e in _list(doc["fault_events_total"], "fault_events_total"):
        uuid, key = str(e["uuid"]), (str(e["fault"]), _severity(e["severity"]))
        if uuid:
            events[(uuid, *key)] = _count(e["count"])
        elif version == 1:  # version 1 kept the node's fault events under uuid ""
            node_events[key] = node_events.get(key, 0) + _count(e["count"])
        else:
            raise StoreFormatError("a GPU fault event without uuid")
    for e in _list(doc.get("node_fault_events_total") or [], "node_fault_events_total"):
        key = (str(e["fault"]), _severity(e["severity"]))
        node_events[key] = node_events.get(key, 0) + _count(e["count"])
    expected = _count(doc["expected_gpus"])
    boot_id = doc["boot_id"]
    if not isinstance(boot_id, str):
        raise StoreFormatError("boot_id: not a string")
    state = MachineState(MappingProxyType(gpus), node, MappingProxyType(transitions), MappingProxyType(events),
                         MappingProxyType(node_events))
    return state, expected, boot_id, bad


def _identity(item: Any, error: Exception) -> tuple[int, str]:
    """(index, uuid) of a GPU entry that could not be read, or StoreFormatError when even those cannot."""
    index, uuid = (item.get("index"), item.get("uuid")) if isinstance(item, dict) else (None, None)
    if isinstance(index, bool) or not isinstance(index, int) or index < 0 or not isinstance(uuid, str) or not uuid:
        raise StoreFormatError(f"a GPU entry without a readable index and uuid ({reason(error)})")
    return index, uuid


def _decode_record(item: dict[str, Any]) -> GpuRecord:
    retired = item.get("retired", False)
    if not isinstance(retired, bool):
        raise StoreFormatError(f"retired: not true or false: {retired!r}")
    uuid = item["uuid"]
    if not isinstance(uuid, str) or not uuid:
        raise StoreFormatError("a GPU without uuid")
    # Optional history: an unreadable time (or list) is left out rather than making the GPU unknown.
    listed = item.get("interventions", [])
    interventions = tuple(float(t) for t in listed if plausible_time(t)) if isinstance(listed, list) else ()
    return GpuRecord(int(item["index"]), uuid, _state(item["state"]), _time(item["since"], "since"),
                     _decode_faults(item["faults"]), retired, interventions)


def _decode_faults(items: Any) -> tuple[ActiveFault, ...]:
    faults = []
    for f in _list(items, "faults"):
        fault = ActiveFault(
            fault=str(f["fault"]), severity=_severity(f["severity"]), action=str(f["action"]),
            evidence=str(f["evidence"]), clears=str(f["clears"]), first_seen=_time(f["first_seen"], "first_seen"),
            last_seen=_time(f["last_seen"], "last_seen"),
            gpu_instance_id=None if f.get("gpu_instance_id") is None else int(f["gpu_instance_id"]),
            clean_samples=int(f.get("clean_samples", 0)),
            fault_class=str(f.get("fault_class", "")),
            schedulable=None if f.get("schedulable") is None else bool(f["schedulable"]),
            scope=_scope(f.get("scope", CARD)),
        )
        faults.append(fault)
    return tuple(faults)


def reason(error: BaseException) -> str:
    """A short reason for a log line or evidence: the document rule, the OS's words, the field."""
    if isinstance(error, DocumentError):
        return error.rule
    if isinstance(error, OSError):
        return error.strerror or str(error)
    if isinstance(error, KeyError):
        return f"{error.args[0] if error.args else error}: missing"
    return str(error)[:200]


def _list(value: Any, name: str) -> list[Any]:
    if not isinstance(value, list):
        raise StoreFormatError(f"{name}: not a list")
    return value


def _time(value: Any, name: str) -> float:
    if not plausible_time(value):
        raise StoreFormatError(f"{name}: not a time in unix seconds (1970 to 2100): {value!r}")
    return float(value)


def _state(value: Any) -> str:
    if value not in STATES:
        raise StoreFormatError(f"unknown state {value!r}")
    return value


def _scope(value: Any) -> str:
    if value not in SCOPES:
        raise StoreFormatError(f"unknown scope {value!r} (one of {', '.join(SCOPES)})")
    return value


def _severity(value: Any) -> str:
    if value not in SEVERITIES:
        raise StoreFormatError(f"unknown severity {value!r}")
    return value


def _count(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise StoreFormatError(f"not a count: {value!r}")
    return value
