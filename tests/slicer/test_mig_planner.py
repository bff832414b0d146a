"""MIG planning (runtimekit.slicer.mig_planner) on the real profile tables of A100-40/80, H100-80
and H200-141 (the simulator's, runtimekit/sim/mig_profiles.py): the profile a request maps to,
fragmentation-aware placement, the refusals, and properties over random request/release
sequences: never overlapping, never over capacity, never touching an instance in use, refusing
only when nothing fits, deterministic."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runtimekit.gpu.mig import MigProfile
from runtimekit.sim.mig_profiles import COMPUTE_SLICES, GEOMETRIES, MEMORY_SLICES
from runtimekit.slicer.mig_planner import MigCard, capacity, plan_mig, smallest_profile
from runtimekit.state.slices import SliceError, SliceSpec

GIB = 1024


def profiles_of(model: str) -> tuple[MigProfile, ...]:
    return tuple(MigProfile(p.id, p.name, p.compute_slices, p.memory_slices, p.memory_mib, p.starts)
                 for p in GEOMETRIES[model].profiles)


PROFILES = {model: profiles_of(model) for model in GEOMETRIES}
A100_80 = PROFILES["a100-80gb"]


def spec(compute: int, memory_mib: int) -> SliceSpec:
    return SliceSpec(mode="mig", compute=compute, memory_mib=memory_mib)


def card(index: int, taken: tuple[tuple[int, int], ...] = (), profiles: tuple[MigProfile, ...] = A100_80) -> MigCard:
    return MigCard(index, COMPUTE_SLICES, profiles, taken)


@pytest.mark.parametrize(("model", "compute", "memory_mib", "name"), [
    ("a100-80gb", 30, 20 * GIB, "3g.40gb"),  # the Done-when request on dgx-a100
    ("a100-40gb", 30, 20 * GIB, "7g.40gb"),  # 3g.20gb and 4g.20gb hold 19968 MiB < 20 GiB
    ("a100-80gb", 10, 5 * GIB, "1g.10gb"),
    ("a100-80gb", 10, 15 * GIB, "1g.20gb"),  # one compute slice with two memory slices, not 2g.20gb
    ("a100-80gb", 0, 128, "1g.10gb"),  # unlimited compute: any compute slices
    ("a100-80gb", 14, 128, "1g.10gb"),  # ceil(14 % x 7) = 1 slice
    ("a100-80gb", 15, 128, "2g.20gb"),  # ceil(15 % x 7) = 2 slices
    ("a100-80gb", 100, 1 * GIB, "7g.80gb"),
    ("h100-80gb", 50, 30 * GIB, "4g.40gb"),  # 4 compute slices
    ("h200-141gb", 10, 16 * GIB, "1g.18gb"),
])
def test_smallest_profile_holds_both(model: str, compute: int, memory_mib: int, name: str) -> None:
    chosen = smallest_profile(PROFILES[model], compute, memory_mib, COMPUTE_SLICES)
    assert chosen is not None and chosen.name == name


def test_no_profile_holds_more_than_the_whole_gpu_profile() -> None:
    assert smallest_profile(A100_80, 10, 80 * GIB, COMPUTE_SLICES) is None  # 7g.80gb holds 80384 MiB


def test_media_extension_profiles_only_when_nothing_else_holds() -> None:
    plain = MigProfile(19, "1g.5gb", 1, 1, 4864, tuple(range(7)))
    media = MigProfile(20, "1g.5gb+me", 1, 1, 6144, tuple(range(7)))  # made bigger to be the only fit
    assert smallest_profile((media, plain), 10, 4864, COMPUTE_SLICES) == plain
    assert smallest_profile((media, plain), 10, 5120, COMPUTE_SLICES) == media
    chosen = {smallest_profile(A100_80, c, m, COMPUTE_SLICES) for c in range(0, 101, 7) for m in (128, 9856)}
    assert {p.name for p in chosen if p is not None} == {"1g.10gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"}


def test_a_3g_on_an_empty_card_goes_to_4_keeping_4g_possible() -> None:
    """3g at 0 leaves room for a 3g (3 compute slices); at 4 it leaves room for a 4g (4)."""
    choice = plan_mig([card(0)], spec(40, 30 * GIB), "binpack")
    assert (choice.profile.name, choice.start) == ("3g.40gb", 4)
    assert capacity(A100_80, ((4, 4),)) == 4 and capacity(A100_80, ((0, 4),)) == 3


def test_small_instances_pack_from_slice_0() -> None:
    taken: tuple[tuple[int, int], ...] = ()
    for expected in (0, 1, 2):
        choice = plan_mig([card(0, taken)], spec(10, 5 * GIB), "binpack")
        assert choice.start == expected
        taken += ((choice.start, 1),)


def test_binpack_prefers_a_used_card_and_spread_the_emptiest() -> None:
    cards = [card(0), card(1, ((0, 4),)), card(2)]
    assert plan_mig(cards, spec(20, 10 * GIB), "binpack").index == 1
    assert plan_mig(cards, spec(20, 10 * GIB), "spread").index == 0


def test_no_candidate_is_the_callers_error() -> None:
    """The slicer refuses a request no card may take (selector, card-mode rule) before planning."""
    with pytest.raises(ValueError, match="cards: at least one candidate"):
        plan_mig([], spec(10, GIB), "binpack")


def test_memory_no_profile_holds_is_a_failed_precondition() -> None:
    with pytest.raises(SliceError) as caught:
        plan_mig([card(0)], spec(10, 80 * GIB), "binpack")
    assert (caught.value.code, caught.value.field) == ("failed_precondition", "memory")
    assert "the largest is 7g.80gb with 80384 MiB" in str(caught.value)


def test_no_free_placement_is_resource_exhausted_and_says_what_is_free() -> None:
    cards = [card(0, ((0, 4), (6, 1))), card(1, ((0, 8),))]
    with pytest.raises(SliceError) as caught:
        plan_mig(cards, spec(40, 30 * GIB), "binpack")  # a 3g: starts 0 and 4 both blocked
    assert caught.value.code == "resource_exhausted"
    assert str(caught.value) == (
        "GPU 0: no free placement for 3g.40gb (4 memory slices at 0, 4); free memory slices: 4, 5, 7; "
        "GPU 1: no free placement for 3g.40gb (4 memory slices at 0, 4); free memory slices: none")


def test_unknown_policy_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match="policy"):
        plan_mig([card(0)], spec(10, GIB), "first-fit")


def _most_compute(profiles: tuple[MigProfile, ...], used: int, seen: dict[int, int]) -> int:
    """The most compute slices any set of non-overlapping placements (any profile) holds beside
    ``used`` (memory slices as bits), by exhaustive search memoised on ``used``."""
    if used not in seen:
        seen[used] = max((p.compute_slices + _most_compute(profiles, used | ((1 << p.memory_slices) - 1) << start, seen)
                          for p in profiles for start in p.placements
                          if not used & ((1 << p.memory_slices) - 1) << start and start + p.memory_slices <= MEMORY_SLICES),
                         default=0)
    return seen[used]


@pytest.mark.parametrize("model", sorted(PROFILES))
def test_placements_alone_keep_compute_within_the_card(model: str) -> None:
    """The planner checks memory placements only; on the tabled parts that suffices: no set of
    non-overlapping placements holds more than the card's 7 compute slices."""
    assert _most_compute(PROFILES[model], 0, {}) == COMPUTE_SLICES


# --- properties over random sequences -----------------------------------------------------------

_REQUEST = st.tuples(st.just("request"), st.integers(0, 100), st.one_of(st.integers(1, 20), st.integers(1, 90)).map(lambda g: g * GIB))
_RELEASE = st.tuples(st.just("release"), st.integers(0, 1000), st.just(0))


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(sorted(PROFILES)), st.integers(1, 4), st.sampled_from(["binpack", "spread"]),
       st.lists(st.one_of(_REQUEST, _RELEASE), max_size=40))
def test_plans_never_overlap_exceed_or_touch_instances(model: str, cards: int, policy: str,
                                                      events: list[tuple[str, int, int]]) -> None:
    profiles = PROFILES[model]
    live: list[tuple[int, int, MigProfile]] = []  # (card, start, profile)
    for kind, a, b in events:
        if kind == "release":
            if live:
                live.pop(a % len(live))
            continue
        node = [card(i, tuple((s, p.memory_slices) for c, s, p in live if c == i), profiles) for i in range(cards)]
        wanted = spec(a, b)
        try:
            choice = plan_mig(node, wanted, policy)
        except SliceError as error:
            profile = smallest_profile(profiles, a, b, COMPUTE_SLICES)
            if profile is None:
                assert error.code == "failed_precondition"
            else:  # refused only when no free placement of that profile exists on any card
                assert error.code == "resource_exhausted"
                assert not any(all(s + profile.memory_slices <= ts or ts + tz <= s for ts, tz in c.taken)
                               for c in node for s in profile.placements)
            continue
        assert plan_mig(node, wanted, policy) == choice  # deterministic
        assert choice.profile == smallest_profile(profiles, a, b, COMPUTE_SLICES)
        assert choice.start in choice.profile.placements
        assert choice.start + choice.profile.memory_slices <= MEMORY_SLICES
        for start, size in node[choice.index].taken:  # never overlaps an instance in use
            assert choice.start + choice.profile.memory_slices <= start or start + size <= choice.start
        live.append((choice.index, choice.start, choice.profile))
        assert sum(p.compute_slices for c, _, p in live if c == choice.index) <= COMPUTE_SLICES


# --- a profile asked for by name --------------------------------------------------------------

def named(profile: str, start: int | None = None, compute: int = 0, memory_mib: int = 0) -> SliceSpec:
    return SliceSpec(mode="mig", compute=compute, memory_mib=memory_mib, profile=profile, placement_start=start)


def test_a_named_profile_is_taken_even_where_a_smaller_one_holds_the_slice() -> None:
    choice = plan_mig([card(0)], named("2g.20gb", compute=10, memory_mib=GIB), "binpack")
    assert (choice.profile.name, choice.start) == ("2g.20gb", 0)
    assert plan_mig([card(0)], named("1g.10gb+me"), "binpack").profile.name == "1g.10gb+me"  # never chosen unnamed


def test_a_named_placement_is_taken_exactly_even_where_it_costs_capacity() -> None:
    choice = plan_mig([card(0)], named("3g.40gb", start=0), "binpack")  # unnamed, a 3g goes to 4
    assert (choice.profile.name, choice.start) == ("3g.40gb", 0)


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(sorted(PROFILES)), st.data())
def test_a_named_placement_is_taken_when_free_and_refused_when_not(model: str, data: st.DataObject) -> None:
    profiles = PROFILES[model]
    profile = data.draw(st.sampled_from(profiles))
    start = data.draw(st.integers(0, MEMORY_SLICES))
    other = data.draw(st.sampled_from(profiles))
    taken = tuple((s, other.memory_slices) for s in data.draw(st.lists(st.sampled_from(other.placements), max_size=1)))
    try:
        choice = plan_mig([card(0, taken, profiles)], named(profile.name, start), "spread")
    except SliceError as error:
        assert error.field == "placement_start"
        overlaps = any(start < s + size and s < start + profile.memory_slices for s, size in taken)
        assert error.code == ("invalid_argument" if start not in profile.placements else "failed_precondition")
        assert error.code == "invalid_argument" or overlaps
        return
    assert (choice.profile, choice.start) == (profile, start)
    assert all(start + profile.memory_slices <= s or s + size <= start for s, size in taken)


def test_refusals_of_a_named_profile_name_field_and_rule() -> None:
    with pytest.raises(SliceError) as unknown:
        plan_mig([card(3)], named("9g.90gb"), "binpack")
    assert (unknown.value.code, unknown.value.field) == ("invalid_argument", "profile")
    assert "one of the MIG profiles GPU 3 offers (1g.10gb, 1g.10gb+me, 1g.20gb" in str(unknown.value)
    with pytest.raises(SliceError) as held:
        plan_mig([card(0, ((2, 2),))], named("1g.20gb", start=2), "binpack")
    assert (held.value.code, held.value.field) == ("failed_precondition", "placement_start")
    assert str(held.value) == ("placement_start: 1g.20gb at 2 takes memory slices 2-3 of GPU 0, held by a GPU instance at "
                               "memory slices 2-3; free placements of 1g.20gb: 0, 4, 6")
    with pytest.raises(SliceError) as too_much:
        plan_mig([card(0)], named("1g.10gb", compute=0, memory_mib=10 * GIB), "binpack")
    assert (too_much.value.code, too_much.value.field) == ("invalid_argument", "memory")


def test_a_named_profile_on_several_candidates_is_the_callers_error() -> None:
    with pytest.raises(ValueError, match="one card"):
        plan_mig([card(0), card(1)], named("1g.10gb"), "binpack")
