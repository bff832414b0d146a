"""The health checker's memory across agent restarts: ``<state_dir>/health.json``, loaded at start,
set aside when it cannot be read, and written atomically when something that matters changed. Its
format (fields, schema versions, what makes it unreadable) is ``healthcheck/statefile.py``.

An agent restart alone never clears a fault (gpu-faults.md §7.1, §7.7): the file keeps per GPU
uuid the state and the active faults, the node-level faults, the node's boot id
(``/proc/sys/kernel/random/boot_id`` by default — configurable, like every host path), the most
GPUs ever seen and the event counters.

The detectors' state is persisted with the verdict, so windows, baselines and burst counts survive
an agent restart: the ECC detector's judged counter baseline (a contained error is not re-judged
as uncorrectable after a restart), the XID bursts of the last 24 h, the GPUs the node is known to
have. The parts listed in ``detectors.DURABLE`` are written as soon as they change; the rest (runs
of conditions, memory histories, which change every sample) at most every
``DETECTOR_SAVE_SECONDS`` — after a crash those resume from at most that long ago, which only
delays (never invents) a finding. Retired GPU records (``retired: true``) are kept in the file.

Writes are atomic — a temporary file in the same directory, fsync, rename over the old one, fsync
the directory — and happen only when something that matters changed (``statefile.essential``:
state, faults, counters, expected GPUs, durable detector state; not ``last_seen``, evidence
wording or clean-sample progress, which would make it a write per sample). On load, a boot id
different from the saved one is reported as ``boot_id_changed`` so the machine clears what a
reboot clears (and logs it); while the agent runs, ``check_boot_id`` reads the boot id again (the
checker calls it every few seconds) and reports a change the same way, so a reboot the agent did
not see (``runtimekit sim reboot``) still counts. Load also removes the temporary files of writes
killed before their rename (each one up to ``MAX_STATE_BYTES``, a new one per crash): the agent
loads only once it holds the state directory's lock, so no writer of them is alive.

**A file it cannot read fails safe.** The file exists to remember GPUs known to be bad, so losing
it must never make one good. A file that cannot be read (by the rules of ``statefile``, or for an
I/O error or a directory in its place) is set aside — kept whole as
``health.json.corrupt-<unix time>`` (a hard link, or a rename where links are impossible; an
existing name is never reused) — and the node starts in the *state unknown* condition: a
node-level ``health_state_unreadable`` fault (``unknown_finding``: critical, not schedulable,
clears on ``node_reboot``), which the checker extends to every GPU present, written to the new
file at once (a crash before the first evaluation still remembers it). A GPU entry whose ``index``
and ``uuid`` are readable but whose other fields are not makes only that GPU unknown; the rest is
read as saved. A file that cannot be set aside is never overwritten: nothing is written while it
is there. While writes fail, ``write_error`` says why; the checker turns it into the node-level
``health_state_unwritable`` warning (``unwritable_finding``).
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from runtimekit.documents import load_json_file
from runtimekit.fileio import remove_leftovers, write_atomically
from runtimekit.healthcheck.detectors import DURABLE
from runtimekit.healthcheck.machine import MachineInput, MachineState, step
from runtimekit.healthcheck.resets import Counters
from runtimekit.healthcheck.statefile import (
    DECODE_ERRORS,
    MAX_STATE_BYTES,
    MAX_STATE_DEPTH,
    StoreFormatError,
    decode,
    decode_counters,
    encode,
    essential,
    reason,
)
from runtimekit.healthcheck.types import (
    CLEARS_ON_REBOOT,
    CLEARS_WHEN_CLEAN,
    CRITICAL,
    NONE,
    REBOOT_NODE,
    WARNING,
    Finding,
)
from runtimekit.state.health import STATE_UNREADABLE, STATE_UNWRITABLE

log = logging.getLogger("runtimekit.health")

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
    counters: Mapping[str, Counters] = field(default_factory=dict)  # each GPU's at the last write (resets.py)


def unknown_finding(gpu_index: int | None, uuid: str | None, evidence: str) -> Finding:
    """The ``health_state_unreadable`` finding for a GPU (or, with None and None, the node) whose
    saved health cannot be read: it may have been known bad, so it is treated as bad — critical, not
    schedulable, until the node reboots (a reboot clears every fault the lost state could have held).
    Fixed here, not in the policy table: a policy edit must not be able to make unknown mean good."""
    return Finding(gpu_index, uuid, STATE_UNREADABLE, CRITICAL, REBOOT_NODE, evidence, CLEARS_ON_REBOOT,
                   fault_class="agent", schedulable=False)


def unwritable_finding(why: str) -> Finding:
    """The node-level ``health_state_unwritable`` finding: writes fail (``why``), so a restart now
    would forget what changed since the last write. A warning that keeps GPUs schedulable (they
    are judged as before) and clears by clean samples once writes succeed again."""
    return Finding(None, None, STATE_UNWRITABLE, WARNING, NONE, f"the health state cannot be written: {why}",
                   CLEARS_WHEN_CLEAN, fault_class="agent", schedulable=True)


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
        self.write_error = ""  # why the last write failed ("" when it did not): the checker reports it
        self._blocked = False  # an unreadable file could not be set aside: never write over it
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
        """The saved state; an empty one when there is no file; the *state unknown* one (module
        docstring) when the file, or a GPU entry in it, cannot be read. Call it holding the state
        directory's lock: it removes the temporary files killed writers left."""
        boot_id = self._boot_id = self.read_boot_id()
        removed = remove_leftovers(self.path)
        if removed:
            log.info("removed %s: left by a health state write killed before its rename", ", ".join(removed))
        try:
            doc = load_json_file(self.path, what=str(self.path), max_bytes=MAX_STATE_BYTES, max_depth=MAX_STATE_DEPTH)
            state, expected, saved_boot_id, bad_gpus = decode(doc)
            detectors = doc.get("detectors") or {}
            if not isinstance(detectors, dict):
                raise StoreFormatError("detectors: not a JSON object")
        except FileNotFoundError:
            return Loaded(MachineState(), 0, boot_id, False)
        except (OSError, *DECODE_ERRORS) as error:
            evidence = f"the saved health state could not be read ({reason(error)}): GPUs known bad may be among these"
            return self._recover(reason(error), step(MachineState(), MachineInput(
                now=self._clock(), findings=(unknown_finding(None, None, evidence),), sampled=False)).state,
                Loaded(MachineState(), 0, boot_id, False))
        changed = bool(saved_boot_id and boot_id and saved_boot_id != boot_id)
        if changed:
            log.info("boot id changed (%s → %s): the node rebooted; faults cleared by a reboot or a GPU reset "
                     "will clear", saved_boot_id, boot_id)
        loaded = Loaded(state, expected, boot_id, changed, detectors, decode_counters(doc))
        if bad_gpus:
            findings = tuple(unknown_finding(index, uuid, f"its saved health entry could not be read ({why})")
                             for index, uuid, why in bad_gpus)
            why = "; ".join(f"GPU {index} ({uuid}): {why}" for index, uuid, why in bad_gpus)
            return self._recover(why, step(state, MachineInput(now=self._clock(), findings=findings, sampled=False)).state,
                                 loaded)
        self._written = self._essential(doc, detectors)
        self._written_detectors = detectors
        self._written_at = self._clock()
        return loaded

    def _recover(self, why: str, state: MachineState, loaded: Loaded) -> Loaded:
        """Set the file that could not be (wholly) read aside, and write ``state`` in its place at once."""
        try:
            aside = self._set_aside()
        except OSError as error:
            self._blocked = True
            self.write_error = f"{self.path} could not be read nor set aside ({error.strerror or error})"
            log.error("health state %s is unreadable (%s) and cannot be set aside (%s); will not overwrite it: "
                      "health is not persisted until it is moved away", self.path, why, error.strerror or error)
        else:
            log.error("health state %s is unreadable (%s); set aside as %s; the GPUs it names start unknown "
                      "(health_state_unreadable: not schedulable until the node reboots)", self.path, why, aside.name)
        loaded = replace(loaded, state=state)
        self.save(state, loaded.expected_gpus, loaded.detectors)
        return loaded

    def _set_aside(self) -> Path:
        """Keep the unreadable file whole under an unused ``.corrupt-<unix time>`` name: a hard link
        (``health.json`` itself is replaced by the next write), or a rename where a link cannot be
        made (a directory, a filesystem without links). Never replaces an existing file."""
        stamp = int(self._clock())
        for attempt in range(1000):
            aside = self.path.with_name(f"{self.path.name}.corrupt-{stamp}" + (f"-{attempt}" if attempt else ""))
            if os.path.lexists(aside):
                continue
            try:
                os.link(self.path, aside, follow_symlinks=False)
            except FileExistsError:
                continue
            except OSError:
                os.rename(self.path, aside)
            return aside
        raise OSError(f"no unused name {self.path.name}.corrupt-{stamp}-N")

    def _essential(self, doc: dict[str, Any], detectors: Mapping[str, Any]) -> Any:
        durable = {name: {key: (state or {}).get(key) for key in self._durable.get(name, ())}
                   for name, state in sorted(detectors.items()) if isinstance(state, Mapping)}
        return (essential(doc), json.dumps(durable, sort_keys=True, default=list))

    # ---- writing -------------------------------------------------------------------------------
    def save(self, state: MachineState, expected_gpus: int, detectors: Mapping[str, Any] | None = None,
             counters: Mapping[str, Counters] | None = None) -> bool:
        """Write the state (and the detectors' states, and the GPUs' ``counters``, which ride along
        with any write) if something that matters changed, or the
        detectors' states changed and the last write is ``detector_save_seconds`` old; True when
        the file was written. A failed write is logged (once, until a write succeeds again) and
        retried on the next call. Nothing is written over an unreadable file that could not be set
        aside (``load``), until it is gone.
        """
        if self._blocked and os.path.lexists(self.path):
            return False
        self._blocked = False
        if self._boot_id is None:
            self._boot_id = self.read_boot_id()
        now = self._clock()
        detectors = dict(detectors or {})
        doc = encode(state, expected_gpus, self._boot_id, saved_at=now, detectors=detectors, counters=counters)
        essential = self._essential(doc, detectors)
        if essential == self._written and (
            now - self._written_at < self._detector_save_seconds or detectors == self._written_detectors
        ):
            return False
        try:
            write_atomically(self.path, json.dumps(doc, indent=1, sort_keys=True).encode() + b"\n")
        except OSError as error:
            if not self.write_error:
                log.error("cannot write health state %s (%s); will retry", self.path, error.strerror or error)
            self.write_error = f"{self.path}: {error.strerror or error}"
            return False
        if self.write_error:
            log.info("health state written to %s again", self.path)
        self.write_error = ""
        self._written = essential
        self._written_detectors = detectors
        self._written_at = now
        return True
