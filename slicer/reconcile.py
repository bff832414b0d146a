"""Reconciliation: the journal, NVML and the CDI folder brought back to agreement, at start and every
``slicer.reconcile_seconds``. Blocking (NVML, SQLite): run from the slicer's executor thread.

The rules, one pass:

1. A ``creating`` slice is **rolled back**: whatever it made (compute and GPU instance, found by the
   journal's ids or, for a GPU instance made before its id was journaled, by the intended profile
   and placement while it has no compute instance: ``runtimekit.slicer.steps``; its CDI spec) is
   destroyed and the row removed. Rolling back rather than completing: a slice left ``creating``
   was never answered (the agent died, or the step failed and its rollback did too), so its caller
   retries (a new id); completing would need every later step re-derived from a partial record.
   A ``ready`` slice, committed, is never rolled back — even one whose caller never saw it: a
   create cancelled by the client's deadline (DEADLINE_EXCEEDED) while the executor thread commits
   it stays, and lives until it is deleted (a free owner's) or its pod owner is gone (rule 5).
2. A ``deleting`` slice is **finished**: the delete was asked for and journaled.
   Either one waits (the row stays, its ``reason`` says why) while a process runs in its instance,
   or while its GPU is not in the sample (the GPU is its UUID; ``runtimekit.slicer.steps``).
3. A MIG GPU instance that no slice owns and nobody uses is destroyed after
   ``slicer.orphan_grace_seconds``. In use: a sampled process runs in it, or the kubelet allocated
   it to a container (pod-resources, through attribution's ``allocations``: a pod whose container
   has not started a CUDA process yet). While the allocations are unknown (no attribution yet,
   attribution disabled, or its kubelet source down) nothing is an orphan and every grace period
   starts again. NVML's own
   in-use refusal is the last word: an instance with a process is never destroyed.
4. A CDI spec of ours (``{vendor}-slice-s-….json``) whose slice the journal does not hold is removed.
5. A slice whose pod owner is gone — seen running, then missing for ``slicer.owner_grace_seconds``,
   or never seen running for ``slicer.owner_start_seconds`` (``runtimekit.slicer.owners``) — is
   deleted the normal way.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from runtimekit.attribution.types import AttributionSnapshot
from runtimekit.gpu.mig import MigOpError
from runtimekit.gpu.nvml import NVML_DOWN, GpuLostError
from runtimekit.gpu.types import NodeSnapshot

from . import cdi
from .cards import Card
from .journal import Record
from .owners import Grace
from .steps import Books, GpuMissing, InUse, recovery_step, unmake

log = logging.getLogger("runtimekit.slicer")

OrphanKey = tuple[str, int, int, int]  # (GPU UUID, GPU instance id, profile id, start)
WAITING_IN_USE = "waiting: a process runs in its MIG instance"


@dataclass(frozen=True, slots=True)
class Outcome:
    """What one pass did: slices rolled back, finished, orphan instances and stray CDI specs removed."""

    rolled_back: tuple[str, ...] = ()
    finished: tuple[str, ...] = ()
    orphans_destroyed: tuple[OrphanKey, ...] = ()
    specs_removed: tuple[str, ...] = ()

    @property
    def changed(self) -> bool:
        return bool(self.rolled_back or self.finished or self.orphans_destroyed or self.specs_removed)


def settle(books: Books) -> tuple[list[str], list[str]]:
    """Rules 1-2: roll back ``creating`` slices, finish ``deleting`` ones. Returns (rolled back,
    finished) slice ids. A MIG slice whose GPU is not in the sample now waits (its ``reason`` says so)."""
    rolled_back: list[str] = []
    finished: list[str] = []
    for record in list(books.records.values()):
        if record.phase == "ready":
            continue
        try:
            unmake(books, record, on_step=recovery_step)
        except InUse:
            _wait(books, books.records[record.id], WAITING_IN_USE)
            continue
        except GpuMissing as error:
            _wait(books, books.records[record.id], f"waiting: {error}")
            continue
        except (MigOpError, OSError, *NVML_DOWN) as error:
            _wait(books, books.records[record.id], f"retrying: {error}")
            continue
        (rolled_back if record.phase == "creating" else finished).append(record.id)
        log.info("slice %s: %s after a restart", record.id, "rolled back" if record.phase == "creating" else "deleted")
    return rolled_back, finished


def _wait(books: Books, record: Record, reason: str) -> None:
    if record.reason != reason:
        log.warning("slice %s (%s): %s", record.id, record.phase, reason)
        books.record(record, reason=reason)


def _used_instances(cards: Mapping[int, Card], snapshot: NodeSnapshot | None,
                    attribution: AttributionSnapshot) -> set[tuple[str, int]]:
    """(GPU UUID, GPU instance id) of every instance in use: a sampled process runs in it, or one of
    its compute instances is a MIG device the kubelet allocated (the MIG identity attribution found
    for the allocation, else the allocated device id itself: a MIG UUID)."""
    uuid = {card.index: card.gpu.uuid for card in cards.values()}
    used: set[tuple[str, int]] = set()
    for gpu in snapshot.gpus if snapshot is not None else ():
        for process in gpu.processes:
            if isinstance(process.gpu_instance_id, int) and gpu.index in uuid:
                used.add((uuid[gpu.index], process.gpu_instance_id))
    allocated = {a.mig.uuid if a.mig is not None else a.device_id for a in attribution.allocations}
    for card in cards.values():
        for gi in card.instances:
            if any(ci.uuid in allocated for ci in gi.compute_instances):
                used.add((card.gpu.uuid, gi.id))
    return used


def orphans(books: Books, cards: Mapping[int, Card], snapshot: NodeSnapshot | None,
            attribution: AttributionSnapshot) -> list[OrphanKey]:
    """GPU instances on MIG cards that no slice owns (by id, or by a ``creating`` slice's intended
    placement) and nobody uses (``_used_instances``)."""
    owned = {(r.gpu_uuid, r.gi_id) for r in books.records.values() if r.gi_id is not None}
    intended = {(r.gpu_uuid, r.profile_id, r.start) for r in books.records.values() if r.phase == "creating"}
    used = _used_instances(cards, snapshot, attribution)
    found: list[OrphanKey] = []
    for card in cards.values():
        for gi in card.instances:
            if ((card.gpu.uuid, gi.id) in owned or (card.gpu.uuid, gi.profile_id, gi.start) in intended
                    or (card.gpu.uuid, gi.id) in used):
                continue
            found.append((card.gpu.uuid, gi.id, gi.profile_id, gi.start))
    return found


def destroy_orphans(books: Books, cards: Mapping[int, Card], snapshot: NodeSnapshot | None,
                    attribution: AttributionSnapshot | None, grace: Grace[OrphanKey], now: float) -> list[OrphanKey]:
    """Rule 3: destroy the orphan instances past their grace period; returns those destroyed. None
    while the kubelet's allocations are unknown (no attribution, or its kubelet source down — an
    instance the kubelet handed a pod would look free): the grace periods start again once known."""
    if attribution is None or not attribution.kubelet_known:
        grace.clear()
        return []
    index = {card.gpu.uuid: card.index for card in cards.values()}
    by_key = {(card.gpu.uuid, gi.id, gi.profile_id, gi.start): gi for card in cards.values() for gi in card.instances}
    destroyed: list[OrphanKey] = []
    for key in grace.due(orphans(books, cards, snapshot, attribution), now):
        gpu, gi = index[key[0]], by_key[key]
        try:
            for ci in gi.compute_instances:
                books.mig.destroy_compute_instance(gpu, gi.id, ci.id)
            books.mig.destroy_gpu_instance(gpu, gi.id)
        except GpuLostError as error:  # that card only (NVML itself down ends the pass: the caller logs it once)
            log.warning("GPU %d: orphan GPU instance %d not destroyed now: %s", gpu, gi.id, error)
            continue
        except MigOpError as error:
            if error.kind != "not_found":
                log.warning("GPU %d: orphan GPU instance %d not destroyed: %s", gpu, gi.id, error)
                continue
        log.info("GPU %d: destroyed GPU instance %d (profile %d at %d): no slice owned it and no process "
                 "used it for %.0f s", gpu, gi.id, gi.profile_id, gi.start, grace.grace_seconds)
        destroyed.append(key)
    return destroyed


def remove_stray_specs(books: Books, cdi_dir: str | Path) -> list[str]:
    """Rule 4: remove our CDI specs of slices the journal does not hold; returns their slice ids."""
    removed = []
    for slice_id, path in cdi.slice_specs(cdi_dir, books.cdi_vendor).items():
        if slice_id not in books.records:
            cdi.remove_spec(path)
            log.info("removed the CDI spec %s: no slice %s", path, slice_id)
            removed.append(slice_id)
    return removed
