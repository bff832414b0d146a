"""The cards as the slicer sees them: identity and memory from the sampled view, MIG mode, profiles
and instances from NVML (``runtimekit.gpu.mig.MigControl``), and what each card reports as its
``DeviceModeInfo``.

The card-mode rule, applied from these facts: a card whose MIG mode is current is a MIG card, any
other a TDM card; a card whose pending MIG mode differs from its current one (a change waiting for
a GPU reset) takes no new slice of either kind and reports ``pending``. Reading blocks (NVML): call
``read_cards`` from the slicer's executor thread.

A card's MIG slices in all are derived from its profiles (the driver's data, no table): compute
slices are the most any profile spans (the whole-GPU profile's ``sliceCount``: 7 on A100, H100 and
H200); memory slices are the end of the furthest placement of any profile, max(start + memory
slices) (the whole-GPU profile's one placement {0, 8}: 8). NVML lists profiles only in MIG mode
(``MigControl.profiles``), so a card in tdm mode reports those seen while it was in MIG mode.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from runtimekit.attribution.types import AttributionSnapshot
from runtimekit.gpu.mig import GpuInstanceInfo, MigControl, MigOpError, MigProfile
from runtimekit.gpu.refs import gpu_ref
from runtimekit.gpu.types import NodeSnapshot, is_available
from runtimekit.state.health import NodeHealth
from runtimekit.state.refs import GpuRef
from runtimekit.state.slices import DeviceModeInfo, DeviceModeName, DeviceSelector, SliceError, SliceSpec

from .journal import Record
from .mig_planner import MigCard
from .spec import MAX_COMPUTE
from .tdm import TdmCard

log = logging.getLogger("runtimekit.slicer")

MIB = 1 << 20


@dataclass(frozen=True, slots=True)
class Card:
    """One GPU: ``memory_mib`` in all (NVML memory.total), MIG ``current``/``pending`` mode, its
    ``profiles`` (discovered in MIG mode, kept after: ``ProfileCache``) and on a MIG card its
    ``instances`` (GPU instances now)."""

    gpu: GpuRef
    memory_mib: int
    mig_capable: bool
    mig_current: bool = False
    mig_pending: bool = False
    profiles: tuple[MigProfile, ...] = ()
    instances: tuple[GpuInstanceInfo, ...] = ()

    @property
    def index(self) -> int:
        return self.gpu.index

    @property
    def mode(self) -> DeviceModeName:
        return "mig" if self.mig_current else "tdm"

    @property
    def pending(self) -> DeviceModeName | None:
        """The mode a GPU reset will bring, when it differs from the current one."""
        if self.mig_pending == self.mig_current:
            return None
        return "mig" if self.mig_pending else "tdm"

    @property
    def compute_slices_total(self) -> int:
        """The most compute slices a profile spans (the module docstring); 0 without profiles."""
        return max((p.compute_slices for p in self.profiles), default=0)

    @property
    def memory_slices_total(self) -> int:
        """The end of the furthest placement, max(start + memory slices); 0 without profiles."""
        return max((start + p.memory_slices for p in self.profiles for start in p.placements), default=0)


class ProfileCache:
    """MIG profiles per card (by GPU UUID), discovered once while the card is in MIG mode (NVML
    lists them only then) and kept for the agent's life: they are the card's and its driver's, the
    same in either mode, so a card back in tdm mode still reports them."""

    def __init__(self) -> None:
        self._profiles: dict[str, tuple[MigProfile, ...]] = {}

    def get(self, mig: MigControl, gpu: GpuRef) -> tuple[MigProfile, ...]:
        """The card's profiles, read from NVML unless known (blocking; the card is in MIG mode)."""
        profiles = self._profiles.get(gpu.uuid)
        if not profiles:
            profiles = self._profiles[gpu.uuid] = mig.profiles(gpu.index)
        return profiles

    def known(self, gpu: GpuRef) -> tuple[MigProfile, ...]:
        """The card's profiles as last read; () when never read (it has not been in MIG mode)."""
        return self._profiles.get(gpu.uuid, ())


def gpu_refs(snapshot: NodeSnapshot | None) -> list[tuple[GpuRef, int]]:
    """(GpuRef, memory MiB) of every GPU of the sample whose UUID and memory are known (this cycle's
    total, else the one read at discovery) and that is not lost (a card the sampler cannot read
    takes no slice)."""
    if snapshot is None:
        return []
    out = []
    for gpu in snapshot.gpus:
        total = gpu.memory_total_bytes
        if gpu.lost or not is_available(gpu.identity.uuid) or not isinstance(total, int):
            continue
        out.append((gpu_ref(gpu), total // MIB))
    return out


def read_cards(snapshot: NodeSnapshot | None, mig: MigControl, profiles: ProfileCache) -> dict[int, Card]:
    """Every usable card by NVML index, its MIG facts read now (blocking)."""
    cards: dict[int, Card] = {}
    for gpu, memory_mib in gpu_refs(snapshot):
        try:
            current, pending = mig.mode(gpu.index)
        except MigOpError as error:
            if error.kind != "not_supported":
                log.warning("GPU %d: MIG mode unreadable (%s); treated as a TDM card", gpu.index, error)
            cards[gpu.index] = Card(gpu, memory_mib, mig_capable=False)
            continue
        if not current:
            cards[gpu.index] = Card(gpu, memory_mib, True, current, pending, profiles.known(gpu))
            continue
        cards[gpu.index] = Card(gpu, memory_mib, True, current, pending, profiles.get(mig, gpu), mig.instances(gpu.index))
    return cards


def select_card(cards: Mapping[int, Card], selector: DeviceSelector) -> Card:
    """The card a device selector names; SliceError (not_found, ``device``) when the node has no
    usable one such (none, or one lost or unreadable)."""
    for card in cards.values():
        if card.index == selector.index or (selector.uuid is not None and card.gpu.uuid.lower() == selector.uuid.lower()):
            return card
    raise SliceError("not_found", "device", f"no usable GPU {selector} on this node "
                     f"(GPUs: {', '.join(str(i) for i in sorted(cards)) or 'none'})")


def mig_card(card: Card, records: Iterable[Record]) -> MigCard:
    """The card as the MIG planner sees it: its profiles and its GPU instances' placements, each
    named by the slice it is made for (by GPU UUID and GPU-instance id) or as made outside the agent."""
    slices = {r.gi_id: r.id for r in records if r.gpu_uuid == card.gpu.uuid and r.gi_id is not None}
    holders = tuple(f"GPU instance {gi.id} at memory slices {gi.start}-{gi.start + gi.size - 1} "
                    + (f"(slice {slices[gi.id]})" if gi.id in slices else "(no slice of this agent: made outside it)")
                    for gi in card.instances)
    return MigCard(card.index, card.compute_slices_total, card.profiles, tuple((gi.start, gi.size) for gi in card.instances),
                   holders, tuple(gi.profile_id for gi in card.instances))


def tdm_card(card: Card, records: Iterable[Record], reserve_mib: int) -> TdmCard:
    """The card as TDM admission sees it: usable memory is the card's less ``reserve_mib``
    (``slicer.memory_reserve_mib``), used the sums of the slices on it (by GPU UUID)."""
    mine = [r for r in records if r.gpu_uuid == card.gpu.uuid]
    return TdmCard(card.index, card.memory_mib, max(0, card.memory_mib - reserve_mib),
                   sum(r.compute for r in mine), sum(r.memory_mib for r in mine))


def device_info(card: Card, records: Sequence[Record], reserve_mib: int) -> DeviceModeInfo:
    """What a card reports: its mode, pending change, slices and free capacity, and its MIG
    profiles and slices in all (in either mode). TDM: what admission sees (``tdm_card``: compute
    free 100 − Σ compute, memory free the usable memory − Σ memory). MIG: compute free is the share
    of compute slices no GPU instance holds, memory free the whole-card profile's memory less the
    instances' profiles' memory (instances no slice owns count too)."""
    slices = tuple(r.id for r in records if r.gpu_uuid == card.gpu.uuid)
    if card.mig_current:
        total = card.compute_slices_total
        by_id = {p.id: p for p in card.profiles}
        used_slices = sum(by_id[gi.profile_id].compute_slices for gi in card.instances if gi.profile_id in by_id)
        used_memory = sum(by_id[gi.profile_id].memory_mib for gi in card.instances if gi.profile_id in by_id)
        usable = max((p.memory_mib for p in card.profiles), default=0)
        compute_free = MAX_COMPUTE * max(0, total - used_slices) // total if total else 0
        return DeviceModeInfo(card.gpu, "mig", card.pending, card.mig_capable, card.memory_mib, usable,
                              compute_free, max(0, usable - used_memory), slices, card.profiles,
                              card.memory_slices_total, card.compute_slices_total)
    tdm = tdm_card(card, records, reserve_mib)
    return DeviceModeInfo(card.gpu, "tdm", card.pending, card.mig_capable, card.memory_mib, tdm.usable_memory_mib,
                          tdm.compute_free, tdm.memory_free_mib, slices, card.profiles, card.memory_slices_total,
                          card.compute_slices_total)


def unschedulable(health: NodeHealth | None) -> dict[str, str]:
    """Why the health checker allows no new work on a GPU (``GpuHealth.schedulable``: its state,
    then its current faults), by GPU UUID; empty while there is no verdict (health checking off)."""
    if health is None:
        return {}
    return {gpu.uuid: f"{gpu.state}: {', '.join(f.fault for f in gpu.faults if f.current) or 'no current fault'}"
            for gpu in health.gpus if not gpu.schedulable}


def held_by_pods(attribution: AttributionSnapshot | None, pod_uid: str) -> dict[str, str]:
    """Why a time-shared slice for ``pod_uid`` ("" for a free owner) may not go on a GPU: the
    kubelet allocated it to another pod's container whole or as a time-slicing replica
    (``AttributionSnapshot.held_whole``), so a slice there would share a GPU promised to that pod.
    By GPU UUID; empty while the allocations are unknown (no attribution, or its kubelet source
    down), when nothing can be seen."""
    if attribution is None:
        return {}
    blocked: dict[str, str] = {}
    for uuid, owners in attribution.held_whole().items():
        others = [owner for owner in owners if not pod_uid or owner.pod_uid != pod_uid]
        if others:
            blocked[uuid] = "allocated to " + ", ".join(
                f"pod {owner.namespace}/{owner.pod} (container {owner.container or 'unknown'})" for owner in others)
    return blocked


def schedulable(cards: Sequence[Card], blocked: Mapping[str, tuple[str, str]], mode: str) -> list[Card]:
    """``cards`` less those that take no new work (``blocked``: by GPU UUID, who says so — the health
    checker (``unschedulable``), the kubelet (``held_by_pods``) — and why); SliceError
    (failed_precondition, ``device``) naming each card, why and by whom when none is left."""
    left = [card for card in cards if card.gpu.uuid not in blocked]
    if cards and not left:
        why = "; ".join(f"GPU {card.index} is {blocked[card.gpu.uuid][1]}" for card in cards)
        by = " and ".join(dict.fromkeys(blocked[card.gpu.uuid][0] for card in cards))
        which = f"GPU {cards[0].index}" if len(cards) == 1 else f"every card in {mode} mode"
        raise SliceError("failed_precondition", "device", f"{which} takes no new work now, by {by} ({why})")
    return left


def check_mode(card: Card, spec: SliceSpec, records: Iterable[Record]) -> None:
    """The card-mode rule for a slice on a named card, ``records`` the journal's slices: SliceError
    (failed_precondition, ``device``) with the way out that would be accepted (a card's mode
    changes only while it has no slice)."""
    slices = sum(r.gpu_uuid == card.gpu.uuid for r in records)
    if card.pending is not None:
        raise SliceError("failed_precondition", "device", f"GPU {card.index} has a MIG mode change to {card.pending} "
                         "pending until a GPU reset; it takes no new slices until then")
    first = f"delete its {slices} slice(s), then " if slices else ""
    if spec.mode == "tdm" and card.mode == "mig":
        raise SliceError("failed_precondition", "device", f"GPU {card.index} is in MIG mode; TDM slices need a card "
                         f"in tdm mode ({first}runtimekit device mode {card.index} tdm)")
    if spec.mode == "mig" and card.mode == "tdm":
        hint = (f"{first}runtimekit device mode {card.index} mig, then a GPU reset" if card.mig_capable
                else "this card does not support MIG")
        raise SliceError("failed_precondition", "device", f"GPU {card.index} is in tdm mode; MIG slices need a card "
                         f"in MIG mode ({hint})")


def no_card(mode: str, cards: Mapping[int, Card], records: Iterable[Record]) -> str:
    """Why no card takes a slice of ``mode``, and a way out that would be accepted: a card already
    switching to it (a reset away), one in it with a change away pending (cancel it), a card
    without slices to switch, else that slices hold every card that could be switched."""
    switching = sorted(c.index for c in cards.values() if c.pending == mode)
    if switching:
        return (f"no card is in {mode} mode yet; GPU {', '.join(map(str, switching))} will be after a GPU reset "
                "(its mode change is pending)")
    leaving = sorted(c.index for c in cards.values() if c.mode == mode)  # none is free of a pending change here
    if leaving:
        return (f"every card in {mode} mode has a mode change pending; runtimekit device mode {leaving[0]} {mode} "
                "cancels it")
    able = sorted(c.index for c in cards.values() if mode == "tdm" or c.mig_capable)
    if not able:
        return "no card of this node supports MIG"
    used = {r.gpu_uuid for r in records}
    free = [index for index in able if cards[index].gpu.uuid not in used]
    if not free:
        return (f"no card is in {mode} mode, and every card that could be has slices (GPU "
                f"{', '.join(map(str, able))}): a card's mode changes only when it has none")
    return (f"no card is in {mode} mode; switch a card with no slices: runtimekit device mode {free[0]} {mode} "
            "(it takes effect after a GPU reset)")
