"""MIG geometry per GPU model, as data: GPU and compute instance profiles and their placements.

Each MIG-capable part has 8 memory slices and 7 compute slices. A GPU instance (GI) profile takes
``compute_slices`` SM slices and ``memory_slices`` memory slices; its placement ``{start, size}``
counts memory slices 0..7 and ``size`` is ``memory_slices``; instances never overlap. The
placement table is the same on A100-40/80, H100-80 and H200-141.

Sources:

- placements and real profile ids (19, 20, 15, 14, 9, 5, 0): NVIDIA MIG User Guide v580,
  getting-started-with-mig.html (``nvidia-smi mig -lgipp`` / ``-lgip`` outputs); H100 starts
  observed in https://github.com/NVIDIA/DCGM/issues/138; H200 from the identical memory fractions
  of UG supported-mig-profiles.html Table 8;
- NVML enum values (``NVML_GPU_INSTANCE_PROFILE_1_SLICE`` = 0x0, ``_REV1`` = 0x7, ``_REV2`` = 0x9,
  compute instance ``NVML_COMPUTE_INSTANCE_PROFILE_*``): go-nvml pkg/nvml/nvml.h L12517-12550,
  L12666-12675; pynvml 13.615.71;
- names, instance counts and engines: UG supported-mig-profiles.html Tables 6-8; mig-parted
  deployments/container/nvidia-mig-manager-example-hopper-blackwell.yaml (H100, H200);
- memory (MiB, NVML ``memorySizeMB``) and SMs: A100 from go-nvml pkg/nvml/mock/gpus/a100.go
  L82-260; H100-80 from ``nvidia-smi mig -lgip`` (https://jbarrow.ai/field_notes/nvidia-mig/);
  H200 from https://github.com/NVIDIA/mig-parted/issues/120 (GiB x 1024).

Derived, not documented (said where used): compute instance placements inside a GI start at
multiples of the CI size rounded up to a power of two (as GI placements do: 2c at 0,2,4; 3c at
0,4), a CI's SMs are its share of the GI's SMs, and its engines are the GI's (shared).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

__all__ = [
    "GiProfile", "CiProfile", "MigGeometry", "GEOMETRIES", "geometry_for", "ci_profiles",
    "gi_conflict", "ci_conflict", "pick_gi_start", "pick_ci_start", "MEMORY_SLICES", "COMPUTE_SLICES",
]

MEMORY_SLICES = 8
COMPUTE_SLICES = 7


@dataclass(frozen=True)
class GiProfile:
    """One GPU instance profile of one model (NVML nvmlGpuInstanceProfileInfo_v2_t)."""

    enum: int  # NVML_GPU_INSTANCE_PROFILE_* (the argument of nvmlDeviceGetGpuInstanceProfileInfo)
    id: int  # the profile id every other GI call takes (info.id: 19, 20, 15, 14, 9, 5, 0)
    name: str  # "1g.10gb"
    compute_slices: int  # info.sliceCount
    memory_slices: int  # placement size
    starts: tuple[int, ...]  # allowed placement starts, in memory slices
    instance_count: int  # most instances of this profile at once
    memory_mib: int  # info.memorySizeMB (MiB, despite the name)
    sms: int  # info.multiprocessorCount
    copy_engines: int
    decoders: int
    jpegs: int
    ofas: int


@dataclass(frozen=True)
class CiProfile:
    """One compute instance profile inside one GI profile (nvmlComputeInstanceProfileInfo_v2_t)."""

    id: int  # NVML_COMPUTE_INSTANCE_PROFILE_* (its enum value is also its id)
    name: str  # "1c.3g.40gb", or the GI's name for the full-size CI
    compute_slices: int  # info.sliceCount
    starts: tuple[int, ...]  # allowed starts, in the GI's compute slices
    sms: int


@dataclass(frozen=True)
class MigGeometry:
    """The MIG profiles of one GPU model, in NVML enum order."""

    key: str
    profiles: tuple[GiProfile, ...]

    def by_enum(self, enum: int) -> GiProfile | None:
        return next((p for p in self.profiles if p.enum == enum), None)

    def by_id(self, profile_id: int) -> GiProfile | None:
        return next((p for p in self.profiles if p.id == profile_id), None)

    def by_name(self, name: str) -> GiProfile | None:
        return next((p for p in self.profiles if p.name == name), None)


# (enum, id, compute slices, memory slices, starts, max instances) of each row of the placement table.
_ROWS = (
    (0x0, 19, 1, 1, (0, 1, 2, 3, 4, 5, 6), 7),  # 1_SLICE: 1g.Ngb (1g x7 strands memory slice 7)
    (0x7, 20, 1, 1, (0, 1, 2, 3, 4, 5, 6), 1),  # 1_SLICE_REV1: 1g.Ngb+me, the one with the media engines
    (0x9, 15, 1, 2, (0, 2, 4, 6), 4),  # 1_SLICE_REV2: one SM slice with two memory slices
    (0x1, 14, 2, 2, (0, 2, 4), 3),  # 2_SLICE
    (0x2, 9, 3, 4, (0, 4), 2),  # 3_SLICE: a 3g takes 4 memory slices, so only two fit
    (0x3, 5, 4, 4, (0,), 1),  # 4_SLICE: only at 0, so 4g + 3g is the two-tenant full fit
    (0x4, 0, 7, 8, (0,), 1),  # 7_SLICE: the whole GPU
)


def _geometry(key: str, names: tuple[str, ...], memory_mib: tuple[int, ...], sms: tuple[int, ...],
              engines: tuple[tuple[int, int, int, int], ...]) -> MigGeometry:
    """A model's table: per row of ``_ROWS`` its name, memory, SMs and (CE, NVDEC, JPEG, OFA)."""
    profiles = tuple(
        GiProfile(enum, pid, name, c, m, starts, count, mem, sm, *eng)
        for (enum, pid, c, m, starts, count), name, mem, sm, eng in zip(_ROWS, names, memory_mib, sms, engines, strict=True)
    )
    return MigGeometry(key, profiles)


# UG Table 6 (A100): copy engines = compute slices; 1g.5gb has no NVDEC, +me has 1 NVDEC/JPEG/OFA.
_AMPERE_ENGINES = ((1, 0, 0, 0), (1, 1, 1, 1), (1, 1, 0, 0), (2, 1, 0, 0), (3, 2, 0, 0), (4, 2, 0, 0), (7, 5, 1, 1))
# UG Tables 7-8 (H100, H200): one NVDEC and JPEG per compute slice; 7g has 8 CEs and the OFA.
_HOPPER_ENGINES = ((1, 1, 1, 0), (1, 1, 1, 1), (1, 1, 1, 0), (2, 2, 2, 0), (3, 3, 3, 0), (4, 4, 4, 0), (8, 7, 7, 1))
_AMPERE_SMS = (14, 14, 14, 28, 42, 56, 98)
_HOPPER_SMS = (16, 16, 26, 32, 60, 64, 132)

GEOMETRIES: dict[str, MigGeometry] = {
    g.key: g
    for g in (
        _geometry("a100-40gb", ("1g.5gb", "1g.5gb+me", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"),
                  (4864, 4864, 9856, 9856, 19968, 19968, 40192), _AMPERE_SMS, _AMPERE_ENGINES),
        _geometry("a100-80gb", ("1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"),
                  (9856, 9856, 19968, 19968, 40192, 40192, 80384), _AMPERE_SMS, _AMPERE_ENGINES),
        _geometry("h100-80gb", ("1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"),
                  (9984, 9984, 20096, 20096, 40448, 40448, 81152), _HOPPER_SMS, _HOPPER_ENGINES),
        _geometry("h200-141gb", ("1g.18gb", "1g.18gb+me", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb"),
                  (16384, 16384, 33024, 33024, 71168, 71168, 143104), _HOPPER_SMS, _HOPPER_ENGINES),
    )
}


def geometry_for(model_name: str, memory_total_mib: int) -> MigGeometry | None:
    """The geometry of a GPU model from its NVML name and memory size; None for a part not tabled
    (its MIG calls then answer NOT_SUPPORTED)."""
    name = model_name.upper()
    if "A100" in name:
        return GEOMETRIES["a100-40gb" if memory_total_mib < 60 * 1024 else "a100-80gb"]
    if "H100" in name and 70 * 1024 < memory_total_mib < 90 * 1024:
        return GEOMETRIES["h100-80gb"]
    if "H200" in name and memory_total_mib > 130 * 1024:
        return GEOMETRIES["h200-141gb"]
    return None


_CI_SIZES = ((0x0, 1), (0x1, 2), (0x2, 3), (0x3, 4), (0x4, 7))  # NVML_COMPUTE_INSTANCE_PROFILE_{1,2,3,4,7}_SLICE


def ci_profiles(gi: GiProfile) -> tuple[CiProfile, ...]:
    """The compute instance profiles a GI of profile ``gi`` offers (sizes up to its compute slices)."""
    out = []
    for pid, size in _CI_SIZES:
        if size > gi.compute_slices:
            continue
        align = 1 << (size - 1).bit_length()  # derived: starts aligned as GI placements are
        starts = tuple(range(0, gi.compute_slices - size + 1, align))
        name = gi.name if size == gi.compute_slices else f"{size}c.{gi.name}"
        out.append(CiProfile(pid, name, size, starts, gi.sms * size // gi.compute_slices))
    return tuple(out)


def _overlaps(a: int, size_a: int, b: int, size_b: int) -> bool:
    return a < b + size_b and b < a + size_a


def gi_conflict(existing: Iterable[tuple[GiProfile, int]], profile: GiProfile, start: int) -> tuple[str, str] | None:
    """Why a GI of ``profile`` at ``start`` cannot be created next to ``existing`` (profile, start)
    pairs, as (kind, reason), or None when it fits. ``kind`` is ``invalid`` for a start the profile
    does not allow, ``insufficient`` for anything else (overlap, no compute slices left, the
    profile's instance count reached)."""
    existing = list(existing)
    if start not in profile.starts:
        return "invalid", f"placement start {start} is not one of {profile.name}'s starts {list(profile.starts)}"
    for other, at in existing:
        if _overlaps(start, profile.memory_slices, at, other.memory_slices):
            return "insufficient", f"memory slices {start}..{start + profile.memory_slices - 1} overlap {other.name} at {at}"
    if sum(p.compute_slices for p, _ in existing) + profile.compute_slices > COMPUTE_SLICES:
        return "insufficient", f"not enough compute slices left for {profile.name}"
    if sum(1 for p, _ in existing if p.id == profile.id) >= profile.instance_count:
        return "insufficient", f"at most {profile.instance_count} {profile.name} instance(s)"
    return None


def pick_gi_start(existing: Iterable[tuple[GiProfile, int]], profile: GiProfile) -> int | None:
    """The start the driver picks for ``nvmlDeviceCreateGpuInstance`` (no placement given): the
    highest free one. This reproduces the ordering quirk the UG documents ("-cgi 19,19,14,9 fails
    with Insufficient Resources while -cgi 9,19,14,19 works"); None when nothing fits."""
    existing = list(existing)
    return next((s for s in reversed(profile.starts) if gi_conflict(existing, profile, s) is None), None)


def ci_profile(gi: GiProfile, profile_id: int) -> CiProfile | None:
    """The compute instance profile ``profile_id`` a GI of profile ``gi`` offers, or None."""
    return next((p for p in ci_profiles(gi) if p.id == profile_id), None)


def ci_conflict(existing: Iterable[tuple[CiProfile, int]], profile: CiProfile, start: int) -> tuple[str, str] | None:
    """As ``gi_conflict`` for a compute instance inside a GI (compute slices)."""
    existing = list(existing)
    if start not in profile.starts:
        return "invalid", f"placement start {start} is not one of {profile.name}'s starts {list(profile.starts)}"
    for other, at in existing:
        if _overlaps(start, profile.compute_slices, at, other.compute_slices):
            return "insufficient", f"compute slices {start}..{start + profile.compute_slices - 1} overlap {other.name} at {at}"
    return None


def pick_ci_start(existing: Iterable[tuple[CiProfile, int]], profile: CiProfile) -> int | None:
    """The lowest free start for a compute instance (None when nothing fits)."""
    existing = list(existing)
    return next((s for s in profile.starts if ci_conflict(existing, profile, s) is None), None)
