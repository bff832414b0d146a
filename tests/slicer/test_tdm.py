"""TDM admission and card choice (runtimekit.slicer.tdm): the sums, the policies and their
tie-breaks, the refusals and what they name; a property that admission never oversubscribes."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from runtimekit.slicer.tdm import TdmCard, admits, choose_tdm_card
from runtimekit.state.slices import SliceError, SliceSpec


def spec(compute: int, memory_mib: int) -> SliceSpec:
    return SliceSpec(mode="tdm", compute=compute, memory_mib=memory_mib)


def card(index: int, compute_used: int = 0, memory_used_mib: int = 0, usable: int = 80896) -> TdmCard:
    return TdmCard(index=index, memory_mib=81920, usable_memory_mib=usable, compute_used=compute_used, memory_used_mib=memory_used_mib)


def test_compute_and_memory_are_independent() -> None:
    """50 % with 2 GiB next to 30 % with 8 GiB on one card (the issue's example), and a third
    slice that still fits in both sums."""
    first = card(0, compute_used=50, memory_used_mib=2048)
    assert admits(first, spec(30, 8192)) is None
    assert admits(card(0, compute_used=80, memory_used_mib=10240), spec(20, 70656)) is None  # both sums exactly full


def test_compute_sum_at_most_100() -> None:
    assert admits(card(0, compute_used=70), spec(31, 128)) == "compute: 31 % asked, 30 % free on GPU 0"
    assert admits(card(0, compute_used=70), spec(30, 128)) is None


def test_unlimited_compute_counts_nothing_toward_the_sum() -> None:
    assert admits(card(0, compute_used=100), spec(0, 1024)) is None


def test_memory_sum_at_most_the_usable_memory() -> None:
    """The reserve (card memory less usable) is never given out."""
    full = card(0, memory_used_mib=80000, usable=80896)
    assert admits(full, spec(10, 896)) is None
    assert admits(full, spec(10, 1024)) == "memory: 1024 MiB asked, 896 MiB free on GPU 0 (of 80896 MiB usable)"


def test_binpack_takes_the_card_left_with_least_free_memory() -> None:
    cards = [card(0, memory_used_mib=1024), card(1, memory_used_mib=40960), card(2, memory_used_mib=79872)]
    assert choose_tdm_card(cards, spec(10, 2048), "binpack").index == 1  # card 2 lacks room
    assert choose_tdm_card(cards, spec(10, 2048), "spread").index == 0


def test_ties_go_to_free_compute_then_lowest_index() -> None:
    cards = [card(0, compute_used=10), card(1, compute_used=60), card(2, compute_used=60), card(3, compute_used=10)]
    assert choose_tdm_card(cards, spec(10, 1024), "binpack").index == 1
    assert choose_tdm_card(cards, spec(10, 1024), "spread").index == 0


def test_no_candidate_is_the_callers_error() -> None:
    """The slicer refuses a request no card may take (selector, card-mode rule) before choosing."""
    with pytest.raises(ValueError, match="cards: at least one candidate"):
        choose_tdm_card([], spec(10, 1024), "binpack")


def test_exhausted_names_memory_when_memory_is_tightest() -> None:
    cards = [card(0, memory_used_mib=80896 - 1536), card(1, memory_used_mib=80896 - 1024)]
    with pytest.raises(SliceError) as caught:
        choose_tdm_card(cards, spec(10, 2048), "binpack")
    assert caught.value.code == "resource_exhausted"
    assert str(caught.value) == "memory: 2048 MiB asked, at most 1536 MiB free on any TDM card"


def test_exhausted_names_compute_when_compute_is_tightest() -> None:
    cards = [card(0, compute_used=90, memory_used_mib=80000)]  # both short: 60/10 over compute, 1024/896 memory
    with pytest.raises(SliceError) as caught:
        choose_tdm_card(cards, spec(60, 1024), "spread")
    assert str(caught.value) == "compute: 60 % asked, at most 10 % free on GPU 0"


def test_exhausted_when_no_card_has_both() -> None:
    cards = [card(0, compute_used=90), card(1, memory_used_mib=80000)]
    with pytest.raises(SliceError) as caught:
        choose_tdm_card(cards, spec(50, 2048), "binpack")
    assert (caught.value.code, caught.value.field) == ("resource_exhausted", "")
    assert "no TDM card has both 50 % compute and 2048 MiB memory free" in str(caught.value)


def test_unknown_policy_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match="policy"):
        choose_tdm_card([card(0)], spec(10, 1024), "first-fit")


@given(st.lists(st.tuples(st.integers(0, 100), st.integers(1, 160).map(lambda n: n * 512)), max_size=40),
       st.sampled_from(["binpack", "spread"]))
def test_admission_never_oversubscribes(requests: list[tuple[int, int]], policy: str) -> None:
    """Slices placed one after another never push a card's sums over 100 % or its usable memory;
    a refusal happens only when no card admits the slice."""
    cards = [card(i, usable=40000 + 8000 * i) for i in range(3)]
    for compute, memory in requests:
        wanted = spec(compute, memory)
        try:
            chosen = choose_tdm_card(cards, wanted, policy)
        except SliceError:
            assert all(admits(c, wanted) is not None for c in cards)
            continue
        grown = TdmCard(chosen.index, chosen.memory_mib, chosen.usable_memory_mib,
                        chosen.compute_used + compute, chosen.memory_used_mib + memory)
        assert grown.compute_used <= 100 and grown.memory_used_mib <= grown.usable_memory_mib
        cards[chosen.index] = grown
