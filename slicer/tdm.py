"""TDM admission and card choice: pure functions over the TDM cards' use, no I/O.

A TDM slice is a share of a time-shared card in two independent dimensions: ``compute`` percent of
the card and ``memory_mib`` MiB of its memory. A card admits a slice while

- Σ compute ≤ 100 (a slice with compute 0, "unlimited", counts 0 toward the sum: it has no share
  to guarantee, and the CUDA-intercepting layer leaves it uncapped), and
- Σ memory ≤ the card's usable memory (its memory less the configured reserve,
  ``slicer.memory_reserve_mib``; the caller computes it).

Among the cards that admit it (``choose_tdm_card``), ``binpack`` takes the one left with the least
free memory, ``spread`` the one left with the most; ties go to the least (binpack) or most
(spread) free compute, then to the lowest index. The cards given are the candidates: the caller
has applied the device selector and the card-mode rule. Units: MiB, percent.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from runtimekit.state.slices import SliceError, SliceSpec

from .spec import MAX_COMPUTE, POLICIES

__all__ = ["TdmCard", "admits", "choose_tdm_card"]


@dataclass(frozen=True)
class TdmCard:
    """One card in TDM mode as admission sees it: its NVML ``index``, ``memory_mib`` in all, what
    slices may take (``usable_memory_mib``), and what its slices hold now."""

    index: int
    memory_mib: int
    usable_memory_mib: int
    compute_used: int  # percent, Σ of its slices' compute
    memory_used_mib: int  # Σ of its slices' memory

    @property
    def compute_free(self) -> int:
        return max(0, MAX_COMPUTE - self.compute_used)

    @property
    def memory_free_mib(self) -> int:
        return max(0, self.usable_memory_mib - self.memory_used_mib)


def admits(card: TdmCard, spec: SliceSpec) -> str | None:
    """None when ``card`` can take ``spec`` now, else the rule it breaks, in words."""
    if spec.compute > card.compute_free:
        return f"compute: {spec.compute} % asked, {card.compute_free} % free on GPU {card.index}"
    if spec.memory_mib > card.memory_free_mib:
        return f"memory: {spec.memory_mib} MiB asked, {card.memory_free_mib} MiB free on GPU {card.index} " \
               f"(of {card.usable_memory_mib} MiB usable)"
    return None


def choose_tdm_card(cards: Sequence[TdmCard], spec: SliceSpec, policy: str) -> TdmCard:
    """The card among the candidates ``cards`` (at least one; the device selector is not read here)
    a TDM slice goes to under ``policy`` (binpack or spread). Raises ``SliceError``
    resource_exhausted naming the tightest dimension when none has room; ValueError for an unknown
    policy or no candidate (the caller's errors)."""
    if policy not in POLICIES:
        raise ValueError(f"policy: one of {', '.join(POLICIES)}, got {policy!r}")
    if not cards:
        raise ValueError("cards: at least one candidate (the caller refuses a request no card may take)")
    fitting = [card for card in cards if admits(card, spec) is None]
    if not fitting:
        raise _exhausted(cards, spec)
    sign = 1 if policy == "binpack" else -1
    return min(fitting, key=lambda c: (sign * c.memory_free_mib, sign * c.compute_free, c.index))


def _exhausted(cards: Sequence[TdmCard], spec: SliceSpec) -> SliceError:
    """resource_exhausted naming the tightest dimension: the one asking most over what the
    roomiest card offers; when each fits somewhere but never both on one card, both."""
    where = f"on GPU {cards[0].index}" if len(cards) == 1 else "on any TDM card"
    compute_free = max(card.compute_free for card in cards)
    memory_free = max(card.memory_free_mib for card in cards)
    compute_over = spec.compute / max(compute_free, 1) if spec.compute > compute_free else 0.0
    memory_over = spec.memory_mib / max(memory_free, 1) if spec.memory_mib > memory_free else 0.0
    if memory_over and memory_over >= compute_over:
        return SliceError("resource_exhausted", "memory", f"{spec.memory_mib} MiB asked, at most {memory_free} MiB free {where}")
    if compute_over:
        return SliceError("resource_exhausted", "compute", f"{spec.compute} % asked, at most {compute_free} % free {where}")
    return SliceError("resource_exhausted", "",
                      f"no TDM card has both {spec.compute} % compute and {spec.memory_mib} MiB memory free "
                      f"(most free: {compute_free} % compute, {memory_free} MiB memory, on different cards)")
