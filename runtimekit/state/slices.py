"""Slices in the base's vocabulary: what a slice asks for, what it became, the node's slice table,
and the service every container-layer caller (the gRPC API, later the device plugin and the DRA
driver) reaches the slicer through.

A slice is a share of one card: ``compute`` percent of its compute (1–100; 0 = unlimited) and
``memory_mib`` MiB of its memory, as two independent dimensions. ``mode`` says how it is made:

- ``tdm`` (time-division multiplexing): the card is time-shared; the limits are handed to the layer
  that intercepts CUDA (HAMi-core's ``CUDA_DEVICE_MEMORY_LIMIT`` / ``CUDA_DEVICE_SM_LIMIT``, MPS's
  ``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`` / ``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT``) in a CDI spec;
- ``mig``: a MIG GPU instance with one compute instance, the smallest profile that holds both, or
  the ``profile`` asked for by name (at ``placement_start`` when given).

The card-mode rule: TDM and MIG never on one card at once; cards of one node may differ; a card's
mode changes only when it has no slices. Units: memory in MiB (1 MiB = 2**20 bytes), compute in
percent of one whole card, times in unix seconds.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Literal, Protocol

from runtimekit.schema import shown
from runtimekit.state.refs import GpuRef, MigRef

if TYPE_CHECKING:  # annotations only: the base's state does not load NVML's bindings
    from runtimekit.gpu.mig import MigProfile

SliceMode = Literal["tdm", "mig"]
SLICE_MODES: tuple[SliceMode, ...] = ("tdm", "mig")
MEMORY_STEP_MIB = 128  # a slice's memory is a whole number of 128 MiB steps

# A slice's phases. A slice is ``creating`` from the journal's first record until its device (MIG
# instance or CDI spec) exists, ``ready`` while it may be used, ``deleting`` until its device is gone.
SliceState = Literal["creating", "ready", "deleting"]

# Why a call was refused, as the gRPC API maps it: INVALID_ARGUMENT, FAILED_PRECONDITION,
# RESOURCE_EXHAUSTED, NOT_FOUND, UNAVAILABLE (the slicer cannot act now: NVML down, not started).
ErrorCode = Literal["invalid_argument", "failed_precondition", "resource_exhausted", "not_found", "unavailable"]


class SliceError(Exception):
    """A refused request: ``code`` (above), the ``field`` it is about ("" when none) and the rule,
    in words (``str(error)``). Nothing was changed."""

    def __init__(self, code: ErrorCode, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}" if field else message)
        self.code = code
        self.field = field
        self.message = message


#: A slice's id: "s-" and 12 lower-case hex digits (the slicer makes it; its CDI device name carries it).
SLICE_ID = re.compile(r"s-[0-9a-f]{12}")


def check_slice_id(value: str) -> str:
    """``value`` when it is a slice id; SliceError invalid_argument (field ``slice_id``) when it
    cannot be one, so that a malformed id is told from a slice that does not exist (not_found)."""
    if not SLICE_ID.fullmatch(value):
        raise SliceError("invalid_argument", "slice_id", f"a slice id, s- and 12 hex digits (s-0123456789ab), got {shown(value)}")
    return value


@dataclass(frozen=True, slots=True)
class Owner:
    """Who a slice belongs to: a pod's container (``pod_uid`` + ``container``), or a free ``owner_id``
    for users' own tools. Exactly one of the two forms. A pod owner's slice is reclaimed once the
    pod is gone from the node or finished (no ready sandbox listed by the CRI runtime, after a
    grace period); a free owner's when deleted."""

    pod_uid: str = ""
    container: str = ""
    owner_id: str = ""

    @property
    def is_pod(self) -> bool:
        return bool(self.pod_uid)

    def __str__(self) -> str:
        return f"pod {self.pod_uid}/{self.container}" if self.is_pod else self.owner_id


@dataclass(frozen=True, slots=True)
class DeviceSelector:
    """Which card: any (both None), an NVML ``index``, or a GPU ``uuid``."""

    index: int | None = None
    uuid: str | None = None

    @property
    def any(self) -> bool:
        return self.index is None and self.uuid is None

    def __str__(self) -> str:
        return "any" if self.any else (self.uuid or str(self.index))


@dataclass(frozen=True, slots=True)
class SliceSpec:
    """What a caller asks for, validated (``runtimekit.slicer.spec`` parses and checks it).

    ``profile`` (MIG only, with a named device) is a MIG profile's name as the driver reports it
    ("1g.10gb"); "" lets the planner take the smallest that holds compute and memory. With a
    profile, ``compute`` 0 and ``memory_mib`` 0 mean "what the profile gives". ``placement_start``
    (only with a profile) is the memory slice its GPU instance must start at; None lets the
    planner choose."""

    mode: SliceMode
    compute: int  # percent of one card, 1-100; 0 = unlimited (with a profile: what it gives)
    memory_mib: int  # a multiple of MEMORY_STEP_MIB, at most the card's memory; > 0, or 0 with a profile
    device: DeviceSelector = field(default_factory=DeviceSelector)
    owner: Owner = field(default_factory=Owner)
    priority: int = 0  # higher is more important; informational for the CUDA-intercepting layer
    profile: str = ""
    placement_start: int | None = None


@dataclass(frozen=True, slots=True)
class SliceRequest:
    """A request as a caller sends it, not yet validated: the gRPC API's CreateSlice fields, the
    command line's flags. ``memory`` is "NGiB" or "NMiB" ("" with a profile); ``device`` is "" or
    "any", an index or a GPU UUID; ``profile`` a MIG profile's name or ""; ``placement_start`` a
    memory slice or None. The slicer validates it (``runtimekit.slicer.spec``) into a ``SliceSpec``."""

    mode: str
    memory: str
    compute: int = 0
    device: str = ""
    pod_uid: str = ""
    container: str = ""
    owner_id: str = ""
    priority: int = 0
    profile: str = ""
    placement_start: int | None = None


@dataclass(frozen=True, slots=True)
class Slice:
    """A slice as the slicer holds it. ``gpu`` is the card; ``mig`` the MIG device once it exists
    (MIG slices only); ``profile`` the MIG profile's name ("" for TDM); ``cdi_device`` the CDI name
    a runtime injects it by (``vendor/class=name``); ``memory_mib`` and ``compute`` what it got
    (a MIG profile may give more than asked)."""

    id: str
    spec: SliceSpec
    gpu: GpuRef
    state: SliceState
    created_at: float
    compute: int = 0
    memory_mib: int = 0
    mig: MigRef | None = None
    profile: str = ""
    profile_id: int | None = None  # the NVML GPU-instance profile id (MIG)
    placement: tuple[int, int] | None = None  # (start, size) in memory slices (MIG)
    cdi_device: str = ""
    reason: str = ""  # why it is in its state, in words ("" when nothing to say)


DeviceModeName = SliceMode  # a card is in the mode of the slices it takes


@dataclass(frozen=True, slots=True)
class DeviceModeInfo:
    """A card as the slicer sees it: its mode, whether a MIG mode change waits for a GPU reset
    (``pending``, the mode it becomes), its slices and what is left for new ones.

    On a MIG-capable card, ``profiles`` are the MIG GPU-instance profiles its driver offers (in
    the driver's enum order, each with every allowed placement) and ``memory_slices`` /
    ``compute_slices`` its slices in all (``runtimekit.slicer.cards`` derives them from the
    profiles); NVML lists profiles only in MIG mode, so a card in ``tdm`` mode has them once the
    slicer has seen it in MIG mode, else ``()`` and 0."""

    gpu: GpuRef
    mode: DeviceModeName
    pending: DeviceModeName | None = None
    mig_capable: bool = False
    memory_mib: int = 0  # the card's memory
    usable_memory_mib: int = 0  # what slices may take (memory less the configured reserve)
    compute_free: int = 100  # percent of the card no TDM slice holds
    memory_free_mib: int = 0
    slices: tuple[str, ...] = ()  # slice ids on this card
    profiles: tuple[MigProfile, ...] = ()
    memory_slices: int = 0  # MIG memory slices in all (8 on A100/H100/H200)
    compute_slices: int = 0  # MIG compute slices in all (7 on A100/H100/H200)


@dataclass(frozen=True, slots=True)
class SliceTable:
    """The slices topic: every slice, by id, and every card's mode and capacity, by GPU index."""

    slices: Mapping[str, Slice] = field(default_factory=lambda: MappingProxyType({}))
    devices: Mapping[int, DeviceModeInfo] = field(default_factory=lambda: MappingProxyType({}))

    def on_gpu(self, index: int) -> tuple[Slice, ...]:
        return tuple(s for s in self.slices.values() if s.gpu.index == index)


class SliceService(Protocol):
    """The slicer as the container layer reaches it (through the gRPC API only). Every method
    raises ``SliceError`` for a refused request, having changed nothing."""

    async def create(self, request: SliceRequest) -> Slice:
        """Validate, place and make a slice; returns it ``ready``."""
        ...

    async def delete(self, slice_id: str) -> Slice:
        """Remove a slice and its device (MIG instance, CDI spec); returns it as it was."""
        ...

    def table(self) -> SliceTable:
        """The slices and cards now (the slices topic's latest value)."""
        ...

    async def set_device_mode(self, device: str, mode: str) -> DeviceModeInfo:
        """Set a card's mode ("tdm" or "mig"); refused while it has slices. Enabling or disabling MIG
        may wait for a GPU reset: the answer's ``pending`` says so."""
        ...
