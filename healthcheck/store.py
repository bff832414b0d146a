"""The health checker's memory across agent restarts: one versioned JSON file in the state directory.

An agent restart alone never clears a fault (gpu-faults.md §7.1, §7.7): per GPU uuid the file
keeps the state, its ``since``, the active faults with ``first_seen``; the node-level faults (the
``node`` entry, which names no GPU); the node's boot id (``/proc/sys/kernel/random/boot_id`` by default — configurable, like every host
path); the most GPUs ever seen (lost-card detection compares against it); the transition and
fault-event counters (per GPU by UUID; the node's in ``node_fault_events_total``).

Schema version 2 gives the node its own shape; version 1 files (written before, with the node as
a record at index -1 and uuid "", and its fault events under uuid "") are still read: the node
entry and its counters are mapped over, and the next write is version 2.

The detectors' state is persisted with the verdict (``detectors``: each detector's JSON-friendly
state by name), so windows, baselines and burst counts survive an agent restart: the ECC
detector's judged counter baseline (a contained error is not re-judged as uncorrectable after a
restart), the XID bursts of the last 24 h, the GPUs the node is known to have. The parts listed in
``detectors.DURABLE`` are written as soon as they change; the rest (runs of conditions, memory
histories, which change every sample) at most every ``DETECTOR_SAVE_SECONDS`` — after a crash
those resume from at most that long ago, which only delays (never invents) a finding. Retired GPU
records (``retired: true``) are kept in the file.

Writes are atomic — a temporary file in the same directory, fsync, rename over the old one, fsync
the directory — and happen only when something that matters changed (state, faults, counters,
expected GPUs, durable detector state; not ``last_seen``, evidence wording or clean-sample
progress, which would make it a write per sample). A file that cannot be parsed is logged and set aside (renamed
``health.json.corrupt-<unix time>``), never fatal: the checker starts from nothing and the detectors
see what is still there. On load, a boot id different from the saved one is reported as
``boot_id_changed`` so the machine clears what a reboot clears (and logs it); while the agent runs,
``check_boot_id`` reads the boot id again (the checker calls it every few seconds) and reports a
change the same way, so a reboot the agent did not see (``runtimekit sim reboot``) still counts.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Mapping
from contextlib import suppress
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from runtimekit.healthcheck.detectors import DURABLE
from runtimekit.healthcheck.machine import GpuRecord, MachineState, NodeRecord
from runtimekit.healthcheck.types import SEVERITIES, STATES, ActiveFault

log = logging.getLogger("runtimekit.health")

SCHEMA_VERSION = 2
READABLE_VERSIONS = (1, 2)  # version 1: the node as a record at index -1, uuid ""
FILE_NAME = "health.json"
DEFAULT_BOOT_ID_PATH = "/proc/sys/kernel/random/boot_id"
DETECTOR_SAVE_SECONDS = 60.0  # the longest the non-durable detector state on disk lags behind


@dataclass(frozen=True, slots=True)
class Loaded:
    state: MachineState
    expected_gpus: int  # the most GPUs ever seen (0: never saw one)
    boot_id: str  # the node's boot id now ("" when it cannot be read)
    boot_id_changed: bool  # the saved boot id differs from the current one: the node rebooted
    detectors: Mapping[str, Any] = field(default_factory=dict)  # each detector's saved state by name


class StoreFormatError(ValueError):
    """The file is not a health state this version can read."""


class HealthStore:
    """Reads and writes ``<state_dir>/health.json``."""

    def __init__(self, state_dir: str | Path, *, boot_id_path: str = DEFAULT_BOOT_ID_PATH,
                 clock=time.time, durable: Mapping[str, tuple[str, ...]] = DURABLE,
                 detector_save_seconds: float = DETECTOR_SAVE_SECONDS) -> None:
        self.path = Path(state_dir) / FILE_NAME
        self._boot_id_path = boot_id_path
        self._clock = clock
        self._durable = durable
        self._detector_save_seconds = detector_save_seconds
        self._boot_id: str | None = None  # read by load(), or by the first save()
        self._written: Any = None  # the essential content last written (or loaded)
        self._written_detectors: Any = None  # the detector states last written (or loaded)
        self._written_at = float("-inf")
        self._failing = False
        self._boot_id_unreadable = False  # warned that the boot id cannot be read (once, until it can)

    # ---- reading -------------------------------------------------------------------------------
    def read_boot_id(self) -> str:
        """The node's boot id now, "" when it cannot be read (warned once until it can)."""
        try:
            boot_id = Path(self._boot_id_path).read_text().strip()
        except OSError as error:
            if not self._boot_id_unreadable:
                log.warning("cannot read the boot id from %s (%s): a reboot will not clear sticky faults",
                            self._boot_id_path, error.strerror or error)
            self._boot_id_unreadable = True
            return ""
        self._boot_id_unreadable = False
        return boot_id

    def check_boot_id(self) -> bool:
        """Read the boot id again (blocking file I/O: call it from a thread) and say whether it
        changed since ``load`` or the previous check: the node rebooted while the agent ran (or
        ``runtimekit sim reboot`` wrote a new one). The new id is what the next ``save`` writes. An
        unreadable boot id proves nothing; one readable for the first time is only remembered."""
        boot_id = self.read_boot_id()
        before = self._boot_id
        if not boot_id or boot_id == before:
            return False
        self._boot_id = boot_id
        if not before:
            return False
        log.info("boot id changed (%s → %s) while the agent runs: the node rebooted; faults cleared by a reboot "
                 "or a GPU reset will clear", before, boot_id)
        return True

    def load(self) -> Loaded:
        """The saved state, or an empty one (no file, or a corrupt one set aside)."""
        boot_id = self._boot_id = self.read_boot_id()
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return Loaded(MachineState(), 0, boot_id, False)
        except OSError as error:
            log.error("cannot read %s (%s); starting with no remembered health", self.path, error.strerror or error)
            return Loaded(MachineState(), 0, boot_id, False)
        try:
            doc = json.loads(text)
            state, expected, saved_boot_id = decode(doc)
            detectors = doc.get("detectors") or {}
            if not isinstance(detectors, dict):
                raise StoreFormatError("detectors: not a JSON object")
        except (ValueError, TypeError, KeyError, AttributeError) as error:
            self._set_aside(error)
            return Loaded(MachineState(), 0, boot_id, False)
        self._written = self._essential(doc, detectors)
        self._written_detectors = detectors
        self._written_at = self._clock()
        changed = bool(saved_boot_id and boot_id and saved_boot_id != boot_id)
        if changed:
            log.info("boot id changed (%s → %s): the node rebooted; faults cleared by a reboot or a GPU reset "
                     "will clear", saved_boot_id, boot_id)
        return Loaded(state, expected, boot_id, changed, detectors)

    def _essential(self, doc: dict[str, Any], detectors: Mapping[str, Any]) -> Any:
        durable = {name: {key: (state or {}).get(key) for key in self._durable.get(name, ())}
                   for name, state in sorted(detectors.items()) if isinstance(state, Mapping)}
        return (_essential(doc), json.dumps(durable, sort_keys=True, default=list))

    def _set_aside(self, error: Exception) -> None:
        aside = self.path.with_name(f"{self.path.name}.corrupt-{int(self._clock())}")
        try:
            os.replace(self.path, aside)
            where = f"set aside as {aside.name}"
        except OSError as rename_error:
            where = f"could not be set aside ({rename_error.strerror or rename_error})"
        log.error("health state %s is unreadable (%s); %s; starting with no remembered health",
                  self.path, error, where)

    # ---- writing -------------------------------------------------------------------------------
    def save(self, state: MachineState, expected_gpus: int, detectors: Mapping[str, Any] | None = None) -> bool:
        """Write the state (and the detectors' states) if something that matters changed, or the
        detectors' states changed and the last write is ``detector_save_seconds`` old; True when
        the file was written. A failed write is logged (once, until a write succeeds again) and
        retried on the next call.
        """
        if self._boot_id is None:
            self._boot_id = self.read_boot_id()
        now = self._clock()
        detectors = dict(detectors or {})
        doc = encode(state, expected_gpus, self._boot_id, saved_at=now, detectors=detectors)
        essential = self._essential(doc, detectors)
        if essential == self._written and (
            now - self._written_at < self._detector_save_seconds or detectors == self._written_detectors
        ):
            return False
        try:
            write_atomically(self.path, json.dumps(doc, indent=1, sort_keys=True).encode() + b"\n")
        except OSError as error:
            if not self._failing:
                log.error("cannot write health state %s (%s); will retry", self.path, error.strerror or error)
            self._failing = True
            return False
        if self._failing:
            log.info("health state written to %s again", self.path)
        self._failing = False
        self._written = essential
        self._written_detectors = detectors
        self._written_at = now
        return True


def write_atomically(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so that a crash leaves the old file or the new one, never a mix."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        with suppress(OSError):
            os.unlink(tmp)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


# ---- the file format -------------------------------------------------------------------------------

def encode(state: MachineState, expected_gpus: int, boot_id: str, *, saved_at: float,
           detectors: Mapping[str, Any] | None = None) -> dict[str, Any]:
    return {
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
            "retired": record.retired, "faults": [asdict(f) for f in record.faults]}


_VOLATILE = ("last_seen", "evidence", "clean_samples")


def _essential(doc: dict[str, Any]) -> Any:
    """What must be on disk: the document less saved_at and the per-sample fields of faults."""
    def record(r: dict[str, Any]) -> Any:  # the node entry has no index and uuid (in version 1, -1 and "")
        return (r.get("index"), r.get("uuid"), r["state"], r["since"], r.get("retired", False),
                [{k: v for k, v in f.items() if k not in _VOLATILE} for f in r["faults"]])
    return (doc.get("version"), doc["boot_id"], doc["expected_gpus"], [record(r) for r in doc["gpus"]],
            record(doc["node"]), doc["transitions_total"], doc["fault_events_total"],
            doc.get("node_fault_events_total"))


def decode(doc: Any) -> tuple[MachineState, int, str]:
    """(state, expected GPUs, saved boot id); raises ValueError/TypeError/KeyError on a bad file."""
    if not isinstance(doc, dict):
        raise StoreFormatError("not a JSON object")
    version = doc.get("version")
    if version not in READABLE_VERSIONS:
        raise StoreFormatError(f"schema version {version!r}, this agent reads {', '.join(map(str, READABLE_VERSIONS))}")
    gpus = {}
    for item in doc["gpus"]:
        record = _decode_record(item)
        if not record.uuid:
            raise StoreFormatError("a GPU without uuid")
        gpus[record.uuid] = record
    node_item = doc["node"]
    node = NodeRecord(_state(node_item["state"]), float(node_item["since"]), _decode_faults(node_item["faults"]))
    transitions = {(str(t["uuid"]), _state(t["from"]), _state(t["to"])): _count(t["count"])
                   for t in doc["transitions_total"]}
    events: dict[tuple[str, str, str], int] = {}
    node_events: dict[tuple[str, str], int] = {}
    for e in doc["fault_events_total"]:
        uuid, key = str(e["uuid"]), (str(e["fault"]), _severity(e["severity"]))
        if uuid:
            events[(uuid, *key)] = _count(e["count"])
        elif version == 1:  # version 1 kept the node's fault events under uuid ""
            node_events[key] = node_events.get(key, 0) + _count(e["count"])
        else:
            raise StoreFormatError("a GPU fault event without uuid")
    for e in doc.get("node_fault_events_total") or ():
        key = (str(e["fault"]), _severity(e["severity"]))
        node_events[key] = node_events.get(key, 0) + _count(e["count"])
    expected = _count(doc["expected_gpus"])
    boot_id = doc["boot_id"]
    if not isinstance(boot_id, str):
        raise StoreFormatError("boot_id: not a string")
    state = MachineState(MappingProxyType(gpus), node, MappingProxyType(transitions), MappingProxyType(events),
                         MappingProxyType(node_events))
    return state, expected, boot_id


def _decode_record(item: dict[str, Any]) -> GpuRecord:
    retired = item.get("retired", False)
    if not isinstance(retired, bool):
        raise StoreFormatError(f"retired: not true or false: {retired!r}")
    return GpuRecord(int(item["index"]), str(item["uuid"]), _state(item["state"]), float(item["since"]),
                     _decode_faults(item["faults"]), retired)


def _decode_faults(items: Any) -> tuple[ActiveFault, ...]:
    faults = []
    for f in items:
        fault = ActiveFault(
            fault=str(f["fault"]), severity=_severity(f["severity"]), action=str(f["action"]),
            evidence=str(f["evidence"]), clears=str(f["clears"]), first_seen=float(f["first_seen"]),
            last_seen=float(f["last_seen"]),
            gpu_instance_id=None if f.get("gpu_instance_id") is None else int(f["gpu_instance_id"]),
            clean_samples=int(f.get("clean_samples", 0)),
            fault_class=str(f.get("fault_class", "")),
            schedulable=None if f.get("schedulable") is None else bool(f["schedulable"]),
        )
        faults.append(fault)
    return tuple(faults)


def _state(value: Any) -> str:
    if value not in STATES:
        raise StoreFormatError(f"unknown state {value!r}")
    return value


def _severity(value: Any) -> str:
    if value not in SEVERITIES:
        raise StoreFormatError(f"unknown severity {value!r}")
    return value


def _count(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise StoreFormatError(f"not a count: {value!r}")
    return value
