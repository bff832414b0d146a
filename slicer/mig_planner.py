"""MIG planning: which profile a slice needs and where its GPU instance goes. Pure and
deterministic: plain data in, a choice out, no I/O, no clock.

**Profile.** A slice asking ``compute`` percent and ``memory_mib`` MiB needs
ceil(compute / 100 × compute slices of the card) compute slices (0, "unlimited", needs none) and a
profile whose ``memory_mib`` holds the memory. The smallest profile holding both is the one with
the fewest compute slices, then the least memory, then the fewest memory slices, then the lowest
id. Standard profiles (named ``<g>g.<gb>gb``) come first; the others (``+me``, ``-me``, ``+gfx``
media and graphics extensions, CI splits) only when no standard one holds the slice: they tie up
engines a later slice may need (NVIDIA MIG User Guide, supported-mig-profiles.html).

**Placement.** A GPU instance takes memory slices ``start .. start + memory_slices - 1`` at one of
its profile's allowed starts; the planner only chooses among starts that overlap nothing in
``taken`` (instances in use are never moved or touched). Compute slices need no check of their own:
on every part with a MIG placement table (A100, H100, H200: 7 compute and 8 memory slices) no set
of non-overlapping placements holds more than 7 compute slices (tests/slicer/test_mig_planner.py
proves it over the simulator's tables).

**Capacity kept, the fragmentation score.** What a card can still hold is its *capacity*: the most
compute slices that instances of its standard profiles could take at once in the memory slices
left free (an exhaustive search over placements, memoised per free-slice set: at most 2**8 sets).
Each candidate (card, start) costs the card some capacity (before minus after); the planner keeps
the most. Equal costs go to the lowest start, which packs small instances from slice 0 up and so
keeps slices 4-7 whole for a 3g instance at 4 (a 1g instance cannot start at 7: one at 6 strands
slice 7). On bench/slicer.py's traces this score accepted 1.3-1.7 % more than keeping the most
instances of the biggest profiles placeable (a vector, biggest first) under heavy load, and
0.4-0.5 % less under light load.

**Card.** ``binpack`` takes the candidate that costs the least capacity, then the card with the
fewest free memory slices (so a slice goes to a used card before an empty one); ``spread`` takes
the card with the most free memory slices, then the least capacity cost. Remaining ties: lowest
card index, then lowest start.

**A profile asked for by name** (``SliceSpec.profile``, on the one card the spec names) is taken
exactly: a name the card does not offer is invalid_argument (field ``profile``, the card's names
listed), and so are ``compute`` or ``memory`` beyond what it gives (0 means what it gives). Its
placement is ``SliceSpec.placement_start`` exactly when given: a start that is not one of the
profile's placements is invalid_argument (field ``placement_start``, its placements listed); one
overlapping an instance on the card is failed_precondition naming the instance (``MigCard.holders``)
and the free placements. Without a start, the profile's free start that costs the least capacity
is taken (lowest start on ties); none free is resource_exhausted, as for any profile.

**Instance limit.** A profile allows at most ``MigProfile.instance_count`` GPU instances on one card
(NVML's ``instanceCount``: 1 for ``1g.10gb+me`` however many of its placements are free; on the
tabled parts a standard profile's limit is its number of disjoint placements, so the capacity
search needs no count of its own). A card holding that many instances of the chosen profile
(counted by ``MigCard.taken_profiles``) offers none of its starts: where a start would otherwise be
free the refusal is resource_exhausted naming the limit and the instances holding it (field
``profile`` for a profile asked by name), as NVML would refuse with INSUFFICIENT_RESOURCES. The
other refusals keep their order and words (a start not allowed, a start overlapping an instance,
no free placement), and a profile at its limit lists no free placement, the limit said instead.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache

from runtimekit.gpu.mig import MigProfile
from runtimekit.state.slices import SliceError, SliceSpec

from .spec import POLICIES, format_memory

__all__ = ["MigCard", "MigChoice", "compute_slices_needed", "is_standard", "capacity", "named_profile", "plan_mig",
           "smallest_profile"]

_STANDARD = re.compile(r"[0-9]+g\.[0-9]+gb")

Shape = tuple[int, tuple[int, ...], int]  # (memory slices, allowed starts, compute slices)


@dataclass(frozen=True)
class MigCard:
    """A card in MIG mode: its NVML ``index``, its compute slices in all (7 on A100/H100/H200),
    the GPU instance profiles its driver offers, and the (start, size) memory-slice placements of
    the GPU instances that exist on it now (in use or not: none is ever moved). ``holders``: what
    holds each of ``taken``, in words, in the same order ("GPU instance 3 (slice s-…)"), for the
    refusal of a placement asked for; missing ones are named by their placement. ``taken_profiles``:
    the profile id of each of ``taken``, in the same order, counted against each profile's
    ``instance_count``; a missing one counts toward no profile."""

    index: int
    compute_slices_total: int
    profiles: tuple[MigProfile, ...]
    taken: tuple[tuple[int, int], ...]
    holders: tuple[str, ...] = ()
    taken_profiles: tuple[int, ...] = ()


@dataclass(frozen=True)
class MigChoice:
    """Where a slice's GPU instance goes: card ``index``, ``profile``, placement ``start`` (memory
    slices; its size is ``profile.memory_slices``)."""

    index: int
    profile: MigProfile
    start: int


def is_standard(profile: MigProfile) -> bool:
    """A plain ``<g>g.<gb>gb`` profile (no media/graphics extension, no CI split)."""
    return _STANDARD.fullmatch(profile.name) is not None


def compute_slices_needed(compute_percent: int, compute_slices_total: int) -> int:
    """ceil(compute_percent / 100 × compute_slices_total), in integers; 0 for 0 (unlimited)."""
    return -(-compute_percent * compute_slices_total // 100)


def smallest_profile(profiles: Iterable[MigProfile], compute_percent: int, memory_mib: int,
                     compute_slices_total: int) -> MigProfile | None:
    """The smallest profile holding ``compute_percent`` of the card and ``memory_mib`` MiB (module
    docstring), standard profiles first; None when no profile holds both."""
    slices = compute_slices_needed(compute_percent, compute_slices_total)
    holding = [p for p in profiles if p.compute_slices >= slices and p.memory_mib >= memory_mib]
    standard = [p for p in holding if is_standard(p)]
    return min(standard or holding, key=lambda p: (p.compute_slices, p.memory_mib, p.memory_slices, p.id), default=None)


def named_profile(card: MigCard, spec: SliceSpec) -> MigProfile:
    """The profile ``spec`` names, on ``card``, holding its compute and memory (0: what it gives);
    SliceError invalid_argument otherwise (module docstring)."""
    profile = next((p for p in card.profiles if p.name == spec.profile), None)
    if profile is None:
        offered = ", ".join(sorted({p.name for p in card.profiles})) or "none"
        raise SliceError("invalid_argument", "profile", f"one of the MIG profiles GPU {card.index} offers ({offered}), "
                         f"got {spec.profile!r}")
    if spec.memory_mib > profile.memory_mib:
        raise SliceError("invalid_argument", "memory", f"at most the memory of profile {profile.name} "
                         f"({profile.memory_mib} MiB), got {format_memory(spec.memory_mib)!r}")
    needed = compute_slices_needed(spec.compute, card.compute_slices_total)
    if needed > profile.compute_slices:
        raise SliceError("invalid_argument", "compute", f"at most the compute of profile {profile.name} ({profile.compute_slices} "
                         f"of {card.compute_slices_total} compute slices: "
                         f"{100 * profile.compute_slices // max(card.compute_slices_total, 1)} %), got {spec.compute} %")
    return profile


def _holder(card: MigCard, n: int) -> str:
    """What holds ``card.taken[n]``, in words (``MigCard.holders``, else its placement)."""
    at, size = card.taken[n]
    return card.holders[n] if n < len(card.holders) else f"a GPU instance at memory slices {at}-{at + size - 1}"


def _at_limit(card: MigCard, profile: MigProfile) -> tuple[str, ...]:
    """The holders of ``profile``'s GPU instances on ``card`` when they are as many as the profile
    allows (``instance_count``), else empty: the card takes no more of it now."""
    held = tuple(_holder(card, n) for n, pid in enumerate(card.taken_profiles[:len(card.taken)]) if pid == profile.id)
    return held if profile.instance_count is not None and len(held) >= profile.instance_count else ()


def _limit_text(card: MigCard, profile: MigProfile, held: Sequence[str]) -> str:
    """The instance-limit refusal's words: the profile, its limit and what holds it."""
    return (f"{profile.name} allows at most {profile.instance_count} GPU instance(s) on one GPU (the driver's "
            f"instanceCount), and GPU {card.index} has {len(held)}: {'; '.join(held)}")


def _limit_reached(card: MigCard, profile: MigProfile, held: Sequence[str]) -> SliceError:
    """resource_exhausted (field ``profile``): a profile asked by name is at its instance limit."""
    return SliceError("resource_exhausted", "profile", _limit_text(card, profile, held))


def _free_starts(card: MigCard, profile: MigProfile) -> list[int]:
    """``profile``'s placements on ``card`` that overlap no instance, lowest first."""
    used = _mask(card.taken)
    return [s for s in sorted(profile.placements) if not used & _mask([(s, profile.memory_slices)])]


def _asked_start(card: MigCard, profile: MigProfile, start: int) -> int:
    """``start`` when it is one of ``profile``'s placements, overlaps nothing on ``card`` and the
    profile is below its instance limit; SliceError invalid_argument / failed_precondition /
    resource_exhausted otherwise (module docstring)."""
    if start not in profile.placements:
        raise SliceError("invalid_argument", "placement_start", f"one of the placements of profile {profile.name} "
                         f"({', '.join(map(str, sorted(profile.placements)))}), got {start}")
    held = _at_limit(card, profile)
    wanted = _mask([(start, profile.memory_slices)])
    for n, (at, size) in enumerate(card.taken):
        if wanted & _mask([(at, size)]):
            free = f"none ({_limit_text(card, profile, held)})" if held else ", ".join(map(str, _free_starts(card, profile)))
            raise SliceError("failed_precondition", "placement_start",
                             f"{profile.name} at {start} takes memory slices {start}-{start + profile.memory_slices - 1} "
                             f"of GPU {card.index}, held by {_holder(card, n)}; free placements of {profile.name}: "
                             f"{free or 'none'}")
    if held:
        raise _limit_reached(card, profile, held)
    return start


def _mask(placements: Iterable[tuple[int, int]]) -> int:
    """The memory slices of (start, size) placements, as bits."""
    bits = 0
    for start, size in placements:
        bits |= ((1 << size) - 1) << start
    return bits


def _shapes(profiles: tuple[MigProfile, ...]) -> tuple[Shape, ...]:
    """The distinct shapes (memory slices, allowed starts, compute slices) of the standard profiles
    (all profiles when none is standard); a shape two profiles share counts the larger compute."""
    chosen = [p for p in profiles if is_standard(p)] or list(profiles)
    compute: dict[tuple[int, tuple[int, ...]], int] = {}
    for p in chosen:
        key = (p.memory_slices, tuple(sorted(p.placements)))
        compute[key] = max(compute.get(key, 0), p.compute_slices)
    return tuple(sorted((size, starts, slices) for (size, starts), slices in compute.items()))


@lru_cache(maxsize=65536)
def _capacity(shapes: tuple[Shape, ...], used: int) -> int:
    """The most compute slices instances of ``shapes`` take at once in the slices not in ``used``."""
    best = 0
    for size, starts, slices in shapes:
        block = (1 << size) - 1
        for start in starts:
            if not used & block << start:
                best = max(best, slices + _capacity(shapes, used | block << start))
    return best


def capacity(profiles: tuple[MigProfile, ...], taken: Iterable[tuple[int, int]]) -> int:
    """A card's capacity (module docstring): compute slices still placeable beside ``taken``."""
    return _capacity(_shapes(profiles), _mask(taken))


def _free_mask(card: MigCard) -> int:
    """The card's memory slices (any profile's placements cover them) that no instance takes."""
    return _mask((start, p.memory_slices) for p in card.profiles for start in p.placements) & ~_mask(card.taken)


def plan_mig(cards: Sequence[MigCard], spec: SliceSpec, policy: str) -> MigChoice:
    """Where a MIG slice goes under ``policy`` (binpack or spread) among the candidates ``cards``
    (at least one; the caller has applied the device selector and the card-mode rule, the selector
    is not read here). Raises ``SliceError``: failed_precondition when no profile of any candidate
    holds the slice; resource_exhausted when a profile holds it but no free placement is left or
    the card holds as many instances of it as it allows; for a profile asked by name, the refusals
    of the module docstring. ValueError for an unknown
    policy, no candidate, or a named profile with more than one candidate (the caller's errors)."""
    if policy not in POLICIES:
        raise ValueError(f"policy: one of {', '.join(POLICIES)}, got {policy!r}")
    if not cards:
        raise ValueError("cards: at least one candidate (the caller refuses a request no card may take)")
    if spec.profile and len(cards) != 1:
        raise ValueError("cards: a profile asked by name is planned on the one card the request names")
    best: tuple[tuple[object, ...], MigChoice] | None = None
    unplaced: list[tuple[MigCard, MigProfile]] = []
    for card in cards:
        profile = (named_profile(card, spec) if spec.profile
                   else smallest_profile(card.profiles, spec.compute, spec.memory_mib, card.compute_slices_total))
        if profile is None:
            continue
        shapes, used = _shapes(card.profiles), _mask(card.taken)
        before, free = _capacity(shapes, used), _free_mask(card).bit_count()
        block = (1 << profile.memory_slices) - 1
        if spec.placement_start is not None:
            starts = [_asked_start(card, profile, spec.placement_start)]
        else:
            starts, held = _free_starts(card, profile), _at_limit(card, profile)
            if starts and held and spec.profile:
                raise _limit_reached(card, profile, held)
            starts = [] if held else starts
        if not starts:
            unplaced.append((card, profile))
        for start in starts:
            loss = before - _capacity(shapes, used | block << start)
            key = (loss, free, card.index, start) if policy == "binpack" else (-free, loss, card.index, start)
            if best is None or key < best[0]:
                best = (key, MigChoice(card.index, profile, start))
    if best is not None:
        return best[1]
    if not unplaced:
        raise _no_profile(cards, spec)
    raise _no_room(unplaced)


def _no_profile(cards: Sequence[MigCard], spec: SliceSpec) -> SliceError:
    """failed_precondition: no profile of any candidate card holds the slice (memory is the field:
    the whole-GPU profile holds 100 % compute, but less than the card's memory)."""
    largest = max((p for c in cards for p in c.profiles), key=lambda p: p.memory_mib, default=None)
    most = f"the largest is {largest.name} with {largest.memory_mib} MiB" if largest else "the card offers no profile"
    return SliceError("failed_precondition", "memory",
                      f"no MIG profile holds {spec.compute} % compute and {spec.memory_mib} MiB ({most})")


def _no_room(unplaced: Sequence[tuple[MigCard, MigProfile]]) -> SliceError:
    """resource_exhausted: the profile each card would use, and its free memory slices (or the
    instances holding its limit)."""
    parts = []
    for card, profile in unplaced:
        held = _at_limit(card, profile)
        if held and _free_starts(card, profile):
            parts.append(_limit_text(card, profile, held))
            continue
        free_mask = _free_mask(card)
        free = [str(s) for s in range(free_mask.bit_length()) if free_mask >> s & 1]
        parts.append(f"GPU {card.index}: no free placement for {profile.name} "
                     f"({profile.memory_slices} memory slices at {', '.join(map(str, profile.placements))}); "
                     f"free memory slices: {', '.join(free) or 'none'}")
    return SliceError("resource_exhausted", "", "; ".join(parts))
