"""The slicer: TDM shares and MIG instances made on demand, journaled, reconciled; the
``SliceService`` the gRPC API reaches it through.

    slicer = Slicer(state, session, config.slicer, config.state_dir)
    await slicer.start()     # open the journal (JournalError: refuse to start), recover
    await slicer.run()       # reconcile every slicer.reconcile_seconds until cancelled
    await slicer.close()

One asyncio lock serializes every change (create, delete, mode, reconcile) and ``close``; every blocking call
(NVML through ``MigControl``, SQLite, fsync) runs in one dedicated executor thread, never on the
event loop. Cards come from the sampled view (identity, memory) and NVML (MIG mode, profiles,
instances: ``runtimekit.slicer.cards``); the steps that change the node are
``runtimekit.slicer.steps``, the recovery rules ``runtimekit.slicer.reconcile``. A ``SliceTable``
(every slice, every card's ``DeviceModeInfo``) is published to the node state at start and after
every committed change. Every refusal is a ``SliceError`` and changes nothing.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from types import MappingProxyType
from typing import Any, TypeVar

from runtimekit.attribution.types import AttributionSnapshot
from runtimekit.config import SlicerConfig
from runtimekit.failpoints import failpoint
from runtimekit.gpu.mig import MigControl, MigOpError
from runtimekit.gpu.nvml import NVML_DOWN, NvmlSession
from runtimekit.state import NodeState
from runtimekit.state.refs import GpuRef, MigRef
from runtimekit.state.slices import DeviceModeInfo, DeviceSelector, ErrorCode, Slice, SliceError, SliceRequest, SliceSpec, SliceTable

from . import cdi
from .cards import (
    Card,
    ProfileCache,
    check_mode,
    device_info,
    held_by_pods,
    mig_card,
    no_card,
    read_cards,
    schedulable,
    select_card,
    tdm_card,
    unschedulable,
)
from .journal import Journal, JournalUnwritable, Record
from .mig_planner import plan_mig
from .owners import Grace, OwnerWatch
from .reconcile import WAITING_IN_USE, OrphanKey, Outcome, destroy_orphans, remove_stray_specs, settle
from .spec import MAX_COMPUTE, check_fits_card, parse_card, parse_mode, parse_request
from .steps import Books, GpuMissing, InUse, make, no_step, unmake
from .tdm import choose_tdm_card

log = logging.getLogger("runtimekit.slicer")

T = TypeVar("T")
_MIG_CODES: dict[str, ErrorCode] = {"insufficient_resources": "resource_exhausted", "in_use": "failed_precondition",
                                     "not_supported": "failed_precondition"}


def _nvml_code(error: Exception) -> ErrorCode:
    """The SliceError code of a failed NVML step: by ``MigOpError.kind`` (no room, in use, not
    supported: the caller can act), else unavailable (NVML down, a GPU lost, I/O: retry later)."""
    return _MIG_CODES.get(error.kind, "unavailable") if isinstance(error, MigOpError) else "unavailable"


def _note(books: Books, slice_id: str, **changes: Any) -> None:
    """Journal ``changes`` to a slice on a failure path; a journal that cannot be written then is
    logged, not raised over the failure being answered (the reconciler reads the row as it is)."""
    try:
        books.record(books.records[slice_id], **changes)
    except JournalUnwritable as error:
        log.warning("slice %s: %s not recorded: %s", slice_id, ", ".join(sorted(changes)), error)


class Slicer:
    """Implements ``runtimekit.state.slices.SliceService`` (see the module docstring)."""

    def __init__(self, state: NodeState, session: NvmlSession, config: SlicerConfig, state_dir: str,
                 *, clock: Callable[[], float] = time.time) -> None:
        self._state = state
        self._session = session
        self._config = config
        self._state_dir = Path(state_dir)
        self._clock = clock
        self._mig = MigControl(session)
        self._executor: ThreadPoolExecutor | None = None  # made by start, shut down by close
        self._lock = asyncio.Lock()
        self._books: Books | None = None
        self._profiles = ProfileCache()
        self._cards: dict[int, Card] = {}
        self._table = SliceTable()
        self._published = False  # the table has been published at least once
        self._orphans: Grace[OrphanKey] = Grace(config.orphan_grace_seconds)
        self._owners = OwnerWatch(config.owner_grace_seconds, config.owner_start_seconds)
        self._recovered = False
        self._last_problem = ""

    # ---- lifecycle -------------------------------------------------------------------------
    async def start(self) -> None:
        """Open the journal (``JournalError``: a clear refusal to start) and recover what a crash left.
        One Slicer may be started again after ``close`` (the supervisor restarts its component)."""
        if self._executor is None:
            self._executor = ThreadPoolExecutor(1, thread_name_prefix="runtimekit-slicer")
        async with self._lock:
            await self._blocking(self._open)

    async def run(self) -> None:
        """Reconcile every ``reconcile_seconds`` until cancelled."""
        while True:
            await asyncio.sleep(self._config.reconcile_seconds)
            await self.reconcile()

    async def reconcile(self) -> Outcome:
        """One reconciliation pass now (``runtimekit.slicer.reconcile``)."""
        async with self._lock:
            return await self._blocking(self._reconcile)

    async def close(self) -> None:
        """Wait for the change in flight and those already waiting for the lock, then close the
        journal and the executor thread. Every later call is refused (SliceError unavailable) until
        ``start``."""
        async with self._lock:
            if self._books is not None:
                await self._blocking(self._books.journal.close)
                self._books = None
            self._recovered = False
            if self._executor is not None:
                self._executor.shutdown(wait=False)
                self._executor = None

    # ---- SliceService ----------------------------------------------------------------------
    async def create(self, request: SliceRequest) -> Slice:
        spec = parse_request(request)
        async with self._lock:
            record = await self._blocking(self._create, spec)
        return self._table.slices[record.id]

    async def delete(self, slice_id: str) -> Slice:
        async with self._lock:
            return await self._blocking(self._delete, slice_id)

    def table(self) -> SliceTable:
        return self._table

    async def set_device_mode(self, device: str, mode: str) -> DeviceModeInfo:
        selector = parse_card(device)
        wanted = parse_mode(mode)
        async with self._lock:
            return await self._blocking(self._set_mode, selector, wanted)

    # ---- the executor thread ---------------------------------------------------------------
    async def _blocking(self, call: Callable[..., T], *args: object) -> T:
        if self._executor is None:
            raise SliceError("unavailable", "", "the slicer is not running")
        return await asyncio.get_running_loop().run_in_executor(self._executor, call, *args)

    def _open(self) -> None:
        journal = Journal.in_state_dir(self._state_dir)
        self._books = Books(journal, self._mig, self._config.cdi_vendor, {r.id: r for r in journal.records()})
        log.info("slicer journal %s: %d slice(s)", journal.path, len(self._books.records))
        self._reconcile()
        self._publish()

    def _started(self) -> Books:
        """The books, recovered; SliceError (unavailable) while that cannot be done."""
        if self._books is None:
            raise SliceError("unavailable", "", "the slicer has not started")
        if not self._recovered:
            self._reconcile()
        if not self._recovered:
            raise SliceError("unavailable", "", f"the slicer cannot read the GPUs yet ({self._last_problem or 'no sample yet'})")
        return self._books

    def _read(self) -> dict[int, Card]:
        """The cards now (NVML), and the books' GPU indexes by UUID from the same sample;
        SliceError (unavailable) when NVML cannot be used."""
        try:
            self._session.init()
            self._cards = read_cards(self._state.view().snapshot, self._mig, self._profiles)
        except (*NVML_DOWN, MigOpError) as error:
            raise SliceError("unavailable", "", f"NVML cannot be used now: {error}") from None
        if self._books is not None:
            self._books.gpus = {card.gpu.uuid: index for index, card in self._cards.items()}
        return self._cards

    def _reconcile(self) -> Outcome:
        books = self._books
        view = self._state.view()
        snapshot = view.snapshot
        if books is None or snapshot is None or not snapshot.nvml_up:
            self._last_problem = "no sample of the GPUs yet" if snapshot is None else "NVML is down"
            return Outcome()
        try:
            cards = self._read()
            rolled_back, finished = settle(books)
            self._recovered = True
            if rolled_back or finished:  # their instances are gone: not orphans of the cards read before
                cards = self._read()
            destroyed = destroy_orphans(books, cards, snapshot, view.attribution, self._orphans, self._clock())
            removed = remove_stray_specs(books, self._config.cdi_dir)
            self._reclaim(books, view.attribution)
        except (SliceError, OSError, MigOpError, *NVML_DOWN) as error:  # the next pass tries again
            if str(error) != self._last_problem:
                log.warning("slicer reconciliation failed: %s", error)
            self._last_problem = str(error)
            return Outcome()
        if self._last_problem:
            log.info("slicer reconciliation works again")
        self._last_problem = ""
        outcome = Outcome(tuple(rolled_back), tuple(finished), tuple(destroyed), tuple(removed))
        self._publish(refresh=outcome.changed)
        return outcome

    def _reclaim(self, books: Books, attribution: AttributionSnapshot | None) -> None:
        """Delete the ready slices whose pod owner has been gone for the grace period (the live
        pods from ``attribution``, the pass's view)."""
        ready = [(r.id, r.spec.owner) for r in books.records.values() if r.phase == "ready"]
        live = attribution.pod_uids if attribution is not None else None  # None: unknown, nothing is gone
        for slice_id in self._owners.due(ready, live, self._clock()):
            log.info("slice %s: its owner %s is gone; deleting it", slice_id, books.records[slice_id].spec.owner)
            try:
                self._delete(slice_id, reason="owner gone")
            except SliceError as error:
                log.warning("slice %s: not reclaimed: %s", slice_id, error)

    def _create(self, spec: SliceSpec) -> Record:
        books = self._started()
        record = self._plan(spec, self._read(), books)
        try:
            return make(books, record)
        except (MigOpError, OSError, GpuMissing, *NVML_DOWN) as error:
            self._roll_back(books, record.id)
            raise SliceError(_nvml_code(error), "", f"creating the slice failed, nothing was kept: {error}") from None
        finally:
            self._publish(refresh=True)

    def _roll_back(self, books: Books, slice_id: str) -> None:
        """Undo a create that failed (no delete failpoint fires); what cannot be undone now is left,
        ``creating``, for the reconciler."""
        record = books.records.get(slice_id)
        if record is None:
            return
        try:
            unmake(books, record, on_step=no_step)
        except (InUse, GpuMissing, MigOpError, OSError, *NVML_DOWN) as error:
            log.warning("slice %s: rollback left for the reconciler: %s", slice_id, error)
            _note(books, slice_id, reason=f"rolling back: {error}")

    def _plan(self, spec: SliceSpec, cards: dict[int, Card], books: Books) -> Record:
        """The card, and for MIG the profile and placement, of a new slice: its ``creating`` record.
        SliceError when the card-mode rule, the card's memory or its free capacity refuse it, or a
        profile or placement asked for does not fit (``mig_planner``). The device selector is
        applied here, once: the planners choose among the candidates."""
        view = self._state.view()
        # No new work where the health checker says so, nor (time-shared: a MIG slice is its own
        # instance, the kubelet's MIG devices are the planner's) on a GPU the kubelet gave a pod.
        blocked = {uuid: ("the health checker", why) for uuid, why in unschedulable(view.health).items()}
        if spec.mode == "tdm":
            for uuid, why in held_by_pods(view.attribution, spec.owner.pod_uid).items():
                blocked.setdefault(uuid, ("the kubelet", why))
        reserve = self._config.memory_reserve_mib if spec.mode == "tdm" else 0  # MIG: the profiles decide
        if spec.device.any:
            candidates = [c for c in cards.values() if c.mode == spec.mode and c.pending is None]
            if not candidates:
                raise SliceError("failed_precondition", "mode", no_card(spec.mode, cards, books.records.values()))
            check_fits_card(spec, max(c.memory_mib for c in candidates), reserve)
        else:
            card = select_card(cards, spec.device)
            check_fits_card(spec, card.memory_mib, reserve)
            check_mode(card, spec, books.records.values())
            candidates = [card]
        candidates = schedulable(candidates, blocked, spec.mode)
        slice_id = "s-" + secrets.token_hex(6)
        record = Record(id=slice_id, phase="creating", spec=spec, gpu_uuid="", gpu_index=-1, created_at=self._clock(),
                        compute=spec.compute, memory_mib=spec.memory_mib,
                        cdi_path=str(cdi.spec_path(self._config.cdi_dir, self._config.cdi_vendor, slice_id)),
                        cdi_device=cdi.device_name(self._config.cdi_vendor, slice_id))
        if spec.mode == "tdm":
            chosen = choose_tdm_card([tdm_card(c, books.records.values(), reserve) for c in candidates], spec,
                                     self._config.policy)
            gpu = cards[chosen.index].gpu
            return replace(record, gpu_uuid=gpu.uuid, gpu_index=gpu.index)
        choice = plan_mig([mig_card(c, books.records.values()) for c in candidates], spec, self._config.policy)
        card, profile = cards[choice.index], choice.profile
        return replace(record, gpu_uuid=card.gpu.uuid, gpu_index=card.index,
                       compute=MAX_COMPUTE * profile.compute_slices // max(card.compute_slices_total, 1),
                       memory_mib=profile.memory_mib, profile=profile.name, profile_id=profile.id,
                       start=choice.start, size=profile.memory_slices)

    def _delete(self, slice_id: str, reason: str = "deleted on request") -> Slice:
        books = self._started()
        record = _record(books, slice_id)
        before = self._table.slices.get(slice_id) or self._slice(record)
        self._read()
        if record.mode == "mig":
            try:
                books.gpu_index(record)
            except GpuMissing as error:
                raise SliceError("failed_precondition", "slice_id", f"slice {slice_id}: its MIG instance cannot be "
                                 f"destroyed: {error}") from None
        try:  # a slice never made whole stays creating: its instance is found by its intended placement
            marked = books.record(record, phase="creating" if record.phase == "creating" else "deleting", reason=reason)
        except JournalUnwritable as error:
            raise SliceError("unavailable", "", f"slice {slice_id}: not deleted, nothing was changed: {error}") from None
        failpoint("slicer.delete.journaled")
        try:
            unmake(books, marked)
        except InUse as error:
            left = books.records[slice_id]
            if left.ci_id == record.ci_id:  # nothing destroyed: the slice is as it was
                _note(books, slice_id, phase=record.phase, reason=record.reason)
            else:
                _note(books, slice_id, reason=WAITING_IN_USE)
            raise SliceError("failed_precondition", "slice_id", f"slice {slice_id}: a process runs in its MIG instance; "
                             f"stop it first ({error})") from None
        except (MigOpError, OSError, *NVML_DOWN) as error:
            _note(books, slice_id, reason=f"retrying: {error}")
            raise SliceError("unavailable", "", f"slice {slice_id}: deleting failed ({error}); "
                             "the reconciler finishes it") from None
        finally:
            self._publish(refresh=True)
        return before

    def _set_mode(self, selector: DeviceSelector, wanted: str) -> DeviceModeInfo:
        books = self._started()
        cards = self._read()
        card = select_card(cards, selector)
        unchanged = card.mode == wanted and card.pending is None  # asking for what it is: allowed with slices
        slices = sorted(r.id for r in books.records.values() if r.gpu_uuid == card.gpu.uuid)
        if slices and not unchanged:
            raise SliceError("failed_precondition", "device", f"GPU {card.index} has {len(slices)} slice(s) "
                             f"({', '.join(slices)}); a card's mode changes only when it has none: delete them first")
        enabled = wanted == "mig"
        if enabled and not card.mig_capable:
            raise SliceError("failed_precondition", "mode", f"GPU {card.index} does not support MIG")
        if card.mig_capable and card.mig_pending != enabled:
            try:
                self._mig.set_mode(card.index, enabled)
            except MigOpError as error:
                raise SliceError(_nvml_code(error), "device", f"GPU {card.index}: MIG mode not changed: {error} (MIG instances "
                                 "no slice owns are destroyed after slicer.orphan_grace_seconds)") from None
            log.info("GPU %d: MIG mode set to %s", card.index, wanted)
        self._publish(refresh=True)
        return self._table.devices[card.index]

    # ---- the table -------------------------------------------------------------------------
    def _publish(self, refresh: bool = False) -> None:
        """Publish the slice table (the cards re-read first when ``refresh``) if it changed: the
        reconciler passes every few seconds, and a new version of an unchanged table would only wake
        every reader and make the rendered exposition stale."""
        books = self._books
        if books is None:
            return
        if refresh:
            try:
                self._read()
            except SliceError as error:
                log.warning("slice table published with the last known cards: %s", error)
        records = list(books.records.values())
        slices = {r.id: self._slice(r) for r in records}
        devices = {i: device_info(c, records, self._config.memory_reserve_mib) for i, c in sorted(self._cards.items())}
        table = SliceTable(MappingProxyType(slices), MappingProxyType(devices))
        if self._published and table == self._table:
            return
        self._published = True
        self._table = table
        self._state.publish_slices(table)

    def _slice(self, record: Record) -> Slice:
        card = next((c for c in self._cards.values() if c.gpu.uuid == record.gpu_uuid), None)
        gpu = card.gpu if card is not None else GpuRef(record.gpu_uuid, record.gpu_index)
        mig = None
        if record.gi_id is not None and record.ci_id is not None and record.mig_uuid:
            mig = MigRef(gpu, record.gi_id, record.ci_id, record.mig_uuid)
        placement = (record.start, record.size) if record.start is not None and record.size is not None else None
        return Slice(record.id, record.spec, gpu, record.phase, record.created_at, record.compute, record.memory_mib,
                     mig, record.profile, record.profile_id, placement, record.cdi_device, record.reason)


def _record(books: Books, slice_id: str) -> Record:
    """The journal's record of ``slice_id``; SliceError not_found (field ``slice_id``, as the API
    names it) when this node has no such slice."""
    record = books.records.get(slice_id)
    if record is None:
        raise SliceError("not_found", "slice_id", f"no slice {slice_id!r} on this node")
    return record
