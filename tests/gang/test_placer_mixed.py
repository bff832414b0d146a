"""Gangs that mix pod shapes, against a joint brute force on small clusters (seeded): every
placement is valid (each node's pods fit its offer exactly), all or nothing, never spans fewer
tiers than the best (a sign the reference and the placer disagree on what fits) and, where it is
found, never more; where a placement exists, the placer finds one in nearly every case (the mixed
case is a heuristic: placer.py says how it works)."""

from __future__ import annotations

import random
from itertools import product

from runtimekit.kube.gang.offer import Offer
from runtimekit.kube.gang.placer import GangDemand, Placement, PodDemand
from tests.gang.test_placer import KEYS, check_fits, node_holds, objective, packs, placer_of, random_cluster

SHAPES = ((1, 0), (2, 0), (4, 0), (8, 0), (2, 1), (4, 2), (1, 1))


def node_takes(offer: Offer | None, pods: list[tuple[int, int]]) -> bool:
    if not pods:
        return True
    if offer is None or sum(n for _, n in pods) > offer.nics_free:
        return False
    big = tuple(sorted((g for g, _ in pods if g > 1), reverse=True))
    groups = tuple(sorted(g.free for g in offer.groups))
    return packs(groups, big) and sum(groups) - sum(big) >= sum(1 for g, _ in pods if g == 1)


def joint_best(cluster: dict[str, tuple[dict[str, str], Offer | None]], keys: tuple[str, ...],
               demand: list[tuple[tuple[int, int], int]]) -> int | None:
    """The fewest tiers spanned by any placement of both shapes; None when none exists."""
    names = list(cluster)
    (a, count_a), (b, count_b) = demand
    best: int | None = None
    spreads_b = [s for s in product(*(range(min(count_b, node_holds(cluster[n][1], *b)) + 1) for n in names)) if sum(s) == count_b]
    for spread_a in product(*(range(min(count_a, node_holds(cluster[n][1], *a)) + 1) for n in names)):
        if sum(spread_a) != count_a:
            continue
        for spread_b in spreads_b:
            if all(node_takes(cluster[n][1], [a] * x + [b] * y) for n, x, y in zip(names, spread_a, spread_b, strict=True)):
                used = [n for n, x, y in zip(names, spread_a, spread_b, strict=True) if x or y]
                spanned = objective(used, cluster, keys)[0]
                best = spanned if best is None or spanned < best else best
    return best


def test_mixed_shapes_are_valid_all_or_nothing_and_nearly_always_found() -> None:
    rng = random.Random(11)
    feasible = missed = 0
    for case in range(600):
        depth = rng.choice((2, 3))
        keys = KEYS[-depth:]
        cluster = random_cluster(rng, depth, rng.randint(3, 7))
        shapes = rng.sample(SHAPES, 2)
        counts = [rng.randint(1, 3), rng.randint(1, 3)]
        pods = [PodDemand(f"a{i}", *shapes[0]) for i in range(counts[0])] + [PodDemand(f"b{i}", *shapes[1]) for i in range(counts[1])]
        demand = GangDemand(f"ns/m{case}", tuple(pods))
        placer = placer_of(cluster, keys)
        result = placer.place(demand)
        best = joint_best(cluster, keys, list(zip(shapes, counts, strict=True)))
        feasible += best is not None
        if isinstance(result, Placement):
            assert best is not None, (cluster, demand, result)
            check_fits(result, cluster, demand)
            assert result.tiers_spanned == best, (cluster, demand, result)
            assert result.lower_bound <= result.tiers_spanned
            placer.reserve(result)  # what place found, reserve holds
            assert set(placer.reservations) == {demand.key}
        else:
            missed += best is not None
            assert not placer.reservations
    assert feasible > 300
    assert missed <= feasible // 100, (missed, feasible)
