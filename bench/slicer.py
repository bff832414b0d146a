#!/usr/bin/env python3
"""MIG planner benchmark: random request/release traces per GPU model, in one process, no driver.

The profile tables are the simulator's (runtimekit/sim/mig_profiles.py: real NVIDIA profile ids,
placements and memory of A100 40 GB and 80 GB, H100 80 GB, H200 141 GB). A trace is a random
sequence of requests (compute percent and memory drawn so that the smallest profiles are common:
1g 35 %, 1g.2x 15 %, 2g 20 %, 3g 15 %, 4g 10 %, 7g 5 %) and releases (each a tenant asked before,
accepted or not, leaving). ``plan_mig`` (policy binpack, the default) places every request; one it
refuses is lost.

Releases come as often as requests (probability 0.5 each step once a tenant is present): a
steady state where the cards stay mostly full and placement decides what fits.

1. Acceptance against the offline optimum, on small traces (1 card x 20 events, 2 cards x 16,
   3 cards x 14):
   the optimum is the most requests of the trace that could be accepted had every placement been
   chosen with hindsight: an exhaustive search over the placements of each request (memoised on
   the live instances; identical cards are interchangeable), never moving a live instance, each
   request given the same profile as online and refused only when no placement is free.
   Reported: Σ accepted online / Σ accepted by the optimum, over all small traces.
2. Fragmentation left, after each long trace on an 8-card node: per card, the biggest instance
   (memory slices) that could be placed now against the biggest a repacking of the card's live
   instances would allow; fragmentation = 1 - Σ now / Σ repacked (0: position never costs room).
3. Decision latency: wall time of every ``plan_mig`` call (accepted or refused) in those long
   traces on 8-card nodes, p50 and p99 in ms.

The last line is ``RESULT key=value ...``.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from runtimekit.gpu.mig import MigProfile
from runtimekit.sim.mig_profiles import COMPUTE_SLICES, GEOMETRIES
from runtimekit.slicer.mig_planner import MigCard, is_standard, plan_mig, smallest_profile
from runtimekit.state.slices import SliceError, SliceSpec

sys.path.insert(0, str(Path(__file__).resolve().parent / "support"))  # the benchmarks' shared modules, not benchmarks
from ranks import nearest_rank  # noqa: E402

MODELS = ("a100-40gb", "a100-80gb", "h100-80gb", "h200-141gb")
TARGETS = ((1, 1, 0.35), (1, 2, 0.15), (2, 2, 0.20), (3, 4, 0.15), (4, 4, 0.10), (7, 8, 0.05))  # (compute, memory slices, weight)
MEMORY_STEP_MIB = 128
RELEASE = 0.5  # probability that a step releases a present tenant
SMALL = ((1, 20), (2, 16), (3, 14))  # (cards, events) of the traces solved exhaustively


@dataclass(frozen=True)
class Request:
    tenant: int
    spec: SliceSpec
    profile: MigProfile


Event = tuple[str, int, Request | None]  # ("request", tenant, request) or ("release", tenant, None)


def profiles_of(model: str) -> tuple[MigProfile, ...]:
    """The model's GPU instance profiles as the driver would report them."""
    return tuple(MigProfile(p.id, p.name, p.compute_slices, p.memory_slices, p.memory_mib, p.starts)
                 for p in GEOMETRIES[model].profiles)


def random_spec(rng: random.Random, profiles: tuple[MigProfile, ...]) -> SliceSpec:
    """A request whose smallest profile is drawn from TARGETS (compute percent needing exactly that
    many compute slices, memory up to that profile's)."""
    compute, memory_slices, _ = rng.choices(TARGETS, weights=[t[2] for t in TARGETS])[0]
    target = next(p for p in profiles if is_standard(p) and p.compute_slices == compute and p.memory_slices == memory_slices)
    low = (compute - 1) * 100 // COMPUTE_SLICES + 1
    percent = rng.randint(low, compute * 100 // COMPUTE_SLICES) if compute < COMPUTE_SLICES else rng.randint(low, 100)
    memory = rng.randint(1, target.memory_mib // MEMORY_STEP_MIB) * MEMORY_STEP_MIB
    return SliceSpec(mode="mig", compute=percent, memory_mib=memory)


def random_trace(rng: random.Random, profiles: tuple[MigProfile, ...], events: int, release: float) -> list[Event]:
    trace: list[Event] = []
    present: list[int] = []
    for tenant in range(events):
        if present and rng.random() < release:
            trace.append(("release", present.pop(rng.randrange(len(present))), None))
            continue
        spec = random_spec(rng, profiles)
        profile = smallest_profile(profiles, spec.compute, spec.memory_mib, COMPUTE_SLICES)
        assert profile is not None
        trace.append(("request", tenant, Request(tenant, spec, profile)))
        present.append(tenant)
    return trace


def run_online(trace: Sequence[Event], profiles: tuple[MigProfile, ...], cards: int, policy: str,
               latencies: list[float] | None = None) -> tuple[int, dict[int, tuple[int, int, MigProfile]]]:
    """Requests accepted by ``plan_mig``, and the live instances at the end (tenant -> card, start, profile)."""
    live: dict[int, tuple[int, int, MigProfile]] = {}
    accepted = 0
    for kind, tenant, request in trace:
        if kind == "release":
            live.pop(tenant, None)
            continue
        assert request is not None
        node = [MigCard(i, COMPUTE_SLICES, profiles, tuple((s, p.memory_slices) for c, s, p in live.values() if c == i))
                for i in range(cards)]
        started = time.perf_counter()
        try:
            choice = plan_mig(node, request.spec, policy)
        except SliceError:
            choice = None
        if latencies is not None:
            latencies.append(time.perf_counter() - started)
        if choice is not None:
            live[tenant] = (choice.index, choice.start, choice.profile)
            accepted += 1
    return accepted, live


def optimum(trace: Sequence[Event], cards: int) -> int:
    """The most requests acceptable with hindsight over placements (module docstring, 1)."""
    Card = frozenset[tuple[int, int, int]]  # (tenant, start, size); tenant -1: never released
    released = {tenant for kind, tenant, _ in trace if kind == "release"}
    requests_from = [sum(1 for kind, _, _ in trace[i:] if kind == "request") for i in range(len(trace) + 1)]

    def fits(card: Card, start: int, size: int) -> bool:
        return all(start + size <= s or s + z <= start for _, s, z in card)

    @cache
    def best(i: int, node: tuple[Card, ...]) -> int:
        if i == len(trace):
            return 0
        kind, tenant, request = trace[i]
        if kind == "release":
            after = tuple(sorted((frozenset(x for x in c if x[0] != tenant) for c in node), key=sorted))
            return best(i + 1, after)
        assert request is not None
        size, most, placed = request.profile.memory_slices, 0, False
        who = tenant if tenant in released else -1
        for k, card in enumerate(node):
            if k and card == node[k - 1]:
                continue  # identical cards: one is enough
            for start in request.profile.placements:
                if fits(card, start, size):
                    grown = node[:k] + (card | {(who, start, size)},) + node[k + 1:]
                    most, placed = max(most, 1 + best(i + 1, tuple(sorted(grown, key=sorted)))), True
                    if most == requests_from[i]:
                        return most  # every request left accepted: nothing does better
        return most if placed else best(i + 1, node)

    return best(0, tuple(frozenset() for _ in range(cards)))


def _fits_all(shapes: tuple[tuple[int, tuple[int, ...]], ...], used: int = 0) -> bool:
    """Whether instances of these (size, starts) shapes can all be placed on an empty card."""
    if not shapes:
        return True
    (size, starts), rest = shapes[0], shapes[1:]
    block = (1 << size) - 1
    return any(not used & block << s and _fits_all(rest, used | block << s) for s in starts)


def fragmentation(live: dict[int, tuple[int, int, MigProfile]], profiles: tuple[MigProfile, ...], cards: int) -> tuple[int, int]:
    """(Σ biggest placeable now, Σ biggest placeable after a repack), in memory slices, over the cards."""
    standard = sorted((p for p in profiles if is_standard(p)), key=lambda p: -p.memory_slices)
    now_total = repacked_total = 0
    for i in range(cards):
        mine = [(s, p) for c, s, p in live.values() if c == i]
        used = sum(((1 << p.memory_slices) - 1) << s for s, p in mine)
        now = next((p.memory_slices for p in standard
                    if any(not used & ((1 << p.memory_slices) - 1) << s for s in p.placements)), 0)
        shapes = sorted(((p.memory_slices, p.placements) for _, p in mine), key=lambda x: -x[0])
        repacked = next((p.memory_slices for p in standard
                         if _fits_all(tuple(sorted([*shapes, (p.memory_slices, p.placements)], key=lambda x: -x[0])))), 0)
        now_total, repacked_total = now_total + now, repacked_total + repacked
    return now_total, repacked_total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", type=int, default=60, help="small traces per model and card count (against the optimum)")
    parser.add_argument("--long", type=int, default=25, help="long traces per model on an 8-card node (fragmentation, latency)")
    parser.add_argument("--events", type=int, default=600, help="events per long trace")
    parser.add_argument("--policy", choices=("binpack", "spread"), default="binpack")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--quick", action="store_true", help="fewer traces: under 30 s")
    args = parser.parse_args()
    if args.quick:
        args.small, args.long, args.events = 6, 3, 300
    rng = random.Random(args.seed)
    online_total = optimum_total = traces = now_total = repacked_total = 0
    latencies: list[float] = []
    by_cards = {cards: [0, 0] for cards, _ in SMALL}
    for model in MODELS:
        profiles = profiles_of(model)
        got = best = 0
        for cards, events in SMALL:
            for _ in range(args.small):
                trace = random_trace(rng, profiles, events, RELEASE)
                accepted, most = run_online(trace, profiles, cards, args.policy)[0], optimum(trace, cards)
                got, best, traces = got + accepted, best + most, traces + 1
                by_cards[cards][0] += accepted
                by_cards[cards][1] += most
        now = repacked = 0
        for _ in range(args.long):
            trace = random_trace(rng, profiles, args.events, RELEASE)
            _, live = run_online(trace, profiles, 8, args.policy, latencies)
            n, r = fragmentation(live, profiles, 8)
            now, repacked = now + n, repacked + r
            traces += 1
        print(f"{model}: accepted {got} of the optimum's {best} ({got / best:.2%}); "
              f"fragmentation {1 - now / max(repacked, 1):.3f}")
        online_total, optimum_total = online_total + got, optimum_total + best
        now_total, repacked_total = now_total + now, repacked_total + repacked
    print("by card count: " + ", ".join(f"{cards} card(s) {got / best:.2%}" for cards, (got, best) in by_cards.items()))
    latencies.sort()
    p50, p99 = statistics.median(latencies) * 1000, nearest_rank(latencies, 0.99) * 1000
    print(f"decisions on 8-card nodes: {len(latencies)}, p50 {p50:.3f} ms, p99 {p99:.3f} ms, max {latencies[-1] * 1000:.3f} ms")
    print(f"RESULT acceptance_vs_optimum={online_total / optimum_total:.4f} fragmentation={1 - now_total / max(repacked_total, 1):.4f} "
          f"decision_p50_ms={p50:.3f} decision_p99_ms={p99:.3f} traces={traces}")


if __name__ == "__main__":
    main()
