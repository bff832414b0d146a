"""The MIG planner (runtimekit.slicer.mig_planner) keeps each profile's instance limit
(``MigProfile.instance_count``, NVML's instanceCount; 1g.10gb+me: one per GPU, slicing.md §3):
a card holding that many instances of the profile offers none of its placements, and the refusal
is resource_exhausted naming the limit and the instances holding it, before anything is made."""

from __future__ import annotations

import pytest

from runtimekit.gpu.mig import MigProfile
from runtimekit.sim.mig_profiles import COMPUTE_SLICES, GEOMETRIES
from runtimekit.slicer.mig_planner import MigCard, plan_mig
from runtimekit.state.slices import SliceError, SliceSpec

A100_80 = tuple(MigProfile(p.id, p.name, p.compute_slices, p.memory_slices, p.memory_mib, p.starts, p.instance_count)
                for p in GEOMETRIES["a100-80gb"].profiles)
MEDIA, ONE_G = 20, 19  # profile ids of 1g.10gb+me and 1g.10gb
HOLDER = "GPU instance 7 at memory slices 0-0 (slice s-0123456789ab)"
LIMIT = ("1g.10gb+me allows at most 1 GPU instance(s) on one GPU (the driver's instanceCount), and GPU 1 has 1: "
         + HOLDER)


def media_card(index: int = 1, profiles: tuple[MigProfile, ...] = A100_80) -> MigCard:
    """A card with the one 1g.10gb+me instance it allows, at memory slice 0."""
    return MigCard(index, COMPUTE_SLICES, profiles, ((0, 1),), (HOLDER,), (MEDIA,))


def named(profile: str, placement_start: int | None = None) -> SliceSpec:
    return SliceSpec(mode="mig", compute=0, memory_mib=0, profile=profile, placement_start=placement_start)


def refusal(cards: list[MigCard], spec: SliceSpec) -> SliceError:
    with pytest.raises(SliceError) as caught:
        plan_mig(cards, spec, "binpack")
    return caught.value


@pytest.mark.parametrize("start", [1, 6, None])
def test_a_second_media_instance_is_refused_naming_the_limit_and_its_holder(start: int | None) -> None:
    error = refusal([media_card()], named("1g.10gb+me", start))
    assert (error.code, error.field) == ("resource_exhausted", "profile")
    assert str(error) == f"profile: {LIMIT}"


def test_a_placement_the_profile_does_not_allow_is_still_invalid_first() -> None:
    error = refusal([media_card()], named("1g.10gb+me", 7))
    assert (error.code, error.field) == ("invalid_argument", "placement_start")


def test_an_overlap_at_the_start_asked_lists_no_free_placement_but_the_limit() -> None:
    error = refusal([media_card()], named("1g.10gb+me", 0))
    assert (error.code, error.field) == ("failed_precondition", "placement_start")
    assert str(error) == (f"placement_start: 1g.10gb+me at 0 takes memory slices 0-0 of GPU 1, held by {HOLDER}; "
                          f"free placements of 1g.10gb+me: none ({LIMIT})")


def test_no_free_placement_keeps_its_refusal_at_the_limit_too() -> None:
    """4g.40gb allows one instance and has one placement: the card is full, said as before."""
    card = MigCard(1, COMPUTE_SLICES, A100_80, ((0, 4),), (), (5,))
    error = refusal([card], named("4g.40gb"))
    assert (error.code, error.field) == ("resource_exhausted", "")
    assert str(error).startswith("GPU 1: no free placement for 4g.40gb")


def test_an_instance_made_outside_the_agent_is_named_by_its_placement() -> None:
    card = MigCard(1, COMPUTE_SLICES, A100_80, ((1, 2), (4, 1)), (), (15, MEDIA))
    error = refusal([card], named("1g.10gb+me", 6))
    assert str(error).endswith("GPU 1 has 1: a GPU instance at memory slices 4-4")


def test_other_profiles_are_not_limited_by_it() -> None:
    choice = plan_mig([media_card()], named("1g.10gb", 1), "binpack")
    assert (choice.profile.id, choice.start) == (ONE_G, 1)
    six = MigCard(1, COMPUTE_SLICES, A100_80, tuple((s, 1) for s in range(6)), (), (ONE_G,) * 6)
    assert plan_mig([six], named("1g.10gb"), "binpack").start == 6  # 6 of 7 allowed: one more


def test_below_its_limit_the_media_profile_is_placed() -> None:
    card = MigCard(1, COMPUTE_SLICES, A100_80, ((0, 1),), (), (ONE_G,))  # a plain 1g at 0, no +me yet
    assert plan_mig([card], named("1g.10gb+me"), "binpack").start == 1


def test_a_profile_at_its_limit_offers_no_start_to_an_unnamed_slice() -> None:
    """A +me made the only fit (more memory than 1g.10gb): the card holding one is no candidate,
    another card takes the slice, and with none left the refusal names the limit, no placements."""
    media = [p if p.id != MEDIA else MigProfile(p.id, p.name, 1, 1, 12288, p.placements, 1) for p in A100_80]
    profiles = tuple(p for p in media if p.memory_slices == 1)  # 1g.10gb and the bigger 1g.10gb+me
    wanted = SliceSpec(mode="mig", compute=10, memory_mib=12288)
    empty = MigCard(2, COMPUTE_SLICES, profiles, ())
    choice = plan_mig([media_card(profiles=profiles), empty], wanted, "binpack")
    assert (choice.index, choice.profile.id) == (2, MEDIA)
    error = refusal([media_card(profiles=profiles)], wanted)
    assert (error.code, error.field) == ("resource_exhausted", "")
    assert str(error) == LIMIT and "free" not in str(error)


def test_without_profile_ids_or_a_count_no_limit_is_applied() -> None:
    plain = MigCard(1, COMPUTE_SLICES, A100_80, ((0, 1),), (HOLDER,))  # taken_profiles not given
    assert plan_mig([plain], named("1g.10gb+me", 1), "binpack").start == 1
    unlimited = tuple(MigProfile(p.id, p.name, p.compute_slices, p.memory_slices, p.memory_mib, p.placements)
                      for p in A100_80)
    assert plan_mig([media_card(profiles=unlimited)], named("1g.10gb+me", 1), "binpack").start == 1
