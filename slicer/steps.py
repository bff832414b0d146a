"""The journaled steps that make and unmake a slice's device: the one place the node is changed.

Every step is journaled before it is made (the intent) and recorded after; a failpoint marks each
boundary, so a test can kill the process at every one, including the hard windows between an NVML
call that returned and the journal write that records it (``runtimekit.failpoints``):

create  insert (creating) ─ slicer.create.journaled
        [MIG] GPU instance at the intended placement ─ slicer.create.gpu_instance
              ─ record gi id ─ slicer.create.gpu_instance_recorded
        [MIG] compute instance ─ slicer.create.compute_instance ─ record ci id, MIG UUID
              ─ slicer.create.compute_instance_recorded
        CDI spec written ─ slicer.create.cdi_written
        phase ready ─ slicer.create.committed
delete  phase deleting ─ slicer.delete.journaled
        [MIG] compute instance destroyed ─ slicer.delete.compute_instance
              ─ record it gone ─ slicer.delete.compute_instance_recorded
        [MIG] GPU instance destroyed ─ slicer.delete.gpu_instance ─ record it gone
              ─ slicer.delete.gpu_instance_recorded
        CDI spec removed (if there is one) ─ slicer.delete.cdi_removed
        row removed

A restart's recovery (``runtimekit.slicer.reconcile``) finishes or rolls back a slice with the
same steps, each marked ``slicer.recover.<step>`` (``recovery_step``), so that a test can kill the
recovery itself at every step and restart again.

``unmake`` is idempotent and reads NVML for what exists, so the reconciler calls it to finish a
``deleting`` slice and to roll back a ``creating`` one (see ``runtimekit.slicer.reconcile``).

A slice's GPU is its UUID: the NVML index is looked up in the current sample (``Books.gpus``) at
every step that calls NVML, never taken from the journal (NVML renumbers GPUs when one is added,
removed or falls off the bus); a GPU not in the sample refuses the step (``GpuMissing``).

An instance is found by its recorded ids *and* its recorded profile and placement (ids are reused).
A GPU instance made before its id was journaled can only be found by the intended profile and
placement, and another one may be there by then (made by an operator or another tool after a
crash): such an instance is taken for the slice's only while it has no compute instance, because
the slice's own compute instance is made after the GPU instance's id is journaled. One with a
compute instance is left alone (the orphan rule judges it; one with a process is never destroyed);
an empty one, which can run nothing, is destroyed either way. All calls block (NVML, SQLite, fsync).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from runtimekit.failpoints import failpoint
from runtimekit.gpu.mig import GpuInstanceInfo, MigControl, MigOpError

from . import cdi
from .journal import Journal, Record

log = logging.getLogger("runtimekit.slicer")


class InUse(Exception):
    """NVML refused to destroy an instance a process runs in; nothing of it was destroyed."""


class GpuMissing(Exception):
    """A slice's GPU (its UUID) is not in the current sample: no NVML step can be made for it."""


@dataclass
class Books:
    """What the steps write to: the journal, its rows mirrored in ``records`` (slice id -> Record),
    NVML's MIG control, where CDI specs go, and ``gpus``: each usable GPU's NVML index by UUID in
    the current sample (the slicer sets it every time it reads the cards)."""

    journal: Journal
    mig: MigControl
    cdi_vendor: str
    records: dict[str, Record] = field(default_factory=dict)
    gpus: Mapping[str, int] = field(default_factory=dict)

    def gpu_index(self, record: Record) -> int:
        """The NVML index of ``record``'s GPU now; GpuMissing when the sample lacks its UUID."""
        index = self.gpus.get(record.gpu_uuid)
        if index is None:
            raise GpuMissing(f"GPU {record.gpu_uuid} is not on the node (or not usable) now")
        return index

    def record(self, record: Record, **changes: Any) -> Record:
        """Journal ``changes`` to ``record`` (committed on return) and mirror them."""
        self.journal.update(record.id, **changes)
        new = self.records[record.id] = replace(record, **changes)
        return new

    def forget(self, record: Record) -> None:
        self.journal.remove(record.id)
        self.records.pop(record.id, None)


def make(books: Books, record: Record) -> Record:
    """Make a new slice's device from its ``creating`` record (MIG: ``profile_id``, ``start`` set);
    returns it ``ready``. ValueError, before anything is journaled, for a MIG record without its
    placement. MigOpError/OSError/GpuMissing from a step propagate with the row left ``creating``:
    the caller rolls it back (``unmake``)."""
    if record.mode == "mig" and (record.profile_id is None or record.start is None):
        raise ValueError(f"slice {record.id}: profile_id and start: both set for a MIG slice, "
                         f"got profile_id={record.profile_id}, start={record.start}")
    books.journal.insert(record)
    books.records[record.id] = record
    failpoint("slicer.create.journaled")
    if record.profile_id is not None and record.start is not None:  # MIG (checked above)
        index = books.gpu_index(record)
        gi = books.mig.create_gpu_instance(index, record.profile_id, record.start)
        failpoint("slicer.create.gpu_instance")
        record = books.record(record, gi_id=gi.id, size=gi.size)
        failpoint("slicer.create.gpu_instance_recorded")
        ci = books.mig.create_compute_instance(index, gi.id)
        failpoint("slicer.create.compute_instance")
        record = books.record(record, ci_id=ci.id, mig_uuid=ci.uuid)
        failpoint("slicer.create.compute_instance_recorded")
        env = cdi.mig_env(ci.uuid) if ci.uuid else []
    else:
        env = cdi.tdm_env(record.gpu_uuid, record.memory_mib, record.compute)
    if env:
        annotations = {f"{books.cdi_vendor}/slice-id": record.id, f"{books.cdi_vendor}/gpu-uuid": record.gpu_uuid}
        cdi.write_spec(Path(record.cdi_path), cdi.spec_document(books.cdi_vendor, record.id, env, annotations))
        failpoint("slicer.create.cdi_written")
    record = books.record(record, phase="ready", reason="")
    failpoint("slicer.create.committed")
    return record


def find_instance(books: Books, record: Record) -> GpuInstanceInfo | None:
    """The GPU instance a MIG record made, as NVML lists it now on the record's GPU (found by UUID),
    or None. By recorded id, profile and start; a ``creating`` record without an id by its intended
    profile and start, and only an instance with no compute instance (module docstring)."""
    if record.mode != "mig" or record.profile_id is None or record.start is None:
        return None
    if record.gi_id is None and record.phase != "creating":
        return None  # recorded as destroyed
    for gi in books.mig.instances(books.gpu_index(record)):
        if gi.profile_id != record.profile_id or gi.start != record.start:
            continue
        if gi.id == record.gi_id or (record.gi_id is None and not gi.compute_instances):
            return gi
    return None


def unmake(books: Books, record: Record, *, on_step: Callable[[str], None] = failpoint) -> None:
    """Destroy what a slice made (compute instance, GPU instance, CDI spec) and forget the slice.
    Raises InUse (nothing more destroyed; the record keeps what is left) when NVML refuses because a
    process runs in the instance, GpuMissing when a MIG slice's GPU is not in the sample now,
    MigOpError/OSError for other refusals (retried by the reconciler). ``on_step(name)`` is called
    after each step with its failpoint name (``slicer.delete.<step>``); ``recovery_step`` renames
    them for a restart's recovery, ``no_step`` fires none."""
    gi = find_instance(books, record)
    if gi is not None:
        index = books.gpu_index(record)
        for ci in gi.compute_instances:
            _destroy(books.mig.destroy_compute_instance, index, gi.id, ci.id)
        on_step("slicer.delete.compute_instance")
        record = books.record(record, ci_id=None)
        on_step("slicer.delete.compute_instance_recorded")
        _destroy(books.mig.destroy_gpu_instance, index, gi.id)
        on_step("slicer.delete.gpu_instance")
        record = books.record(record, gi_id=None)
        on_step("slicer.delete.gpu_instance_recorded")
    if record.cdi_path:
        cdi.remove_spec(Path(record.cdi_path))
    on_step("slicer.delete.cdi_removed")  # with or without a spec to remove: the window before the row goes
    books.forget(record)


def _destroy(call: Callable[..., None], *args: int) -> None:
    try:
        call(*args)
    except MigOpError as error:
        if error.kind == "in_use":
            raise InUse(str(error)) from None
        if error.kind != "not_found":  # already gone: what destroying wanted
            raise


def recovery_step(name: str) -> None:
    """``unmake``'s ``on_step`` for a restart's recovery: the step's own failpoint, renamed
    ``slicer.recover.<step>`` (a crash while recovering is a window of its own)."""
    failpoint(name.replace("slicer.delete.", "slicer.recover.", 1))


def no_step(_: str) -> None:
    """``unmake``'s ``on_step`` for rolling back a create that failed at once: no failpoint fires
    (the ``slicer.delete.*`` ones mark the steps of a delete asked for)."""
