"""search.py on its own numbers: choose_domain against brute force over every split of the demand
(random trees, random pods per node, seeded), the tightest domain among equals, fill_leaf's
fewest-then-tightest nodes."""

from __future__ import annotations

import random
from itertools import product

import pytest

from runtimekit.kube.gang.network import Network, Tiers
from runtimekit.kube.gang.search import choose_domain, fill_leaf

KEYS = ("example.com/spine", "example.com/leaf")


def network_of(leaves_of_nodes: list[tuple[str, str]]) -> Network:
    network = Network(Tiers.of_keys(KEYS))
    for i, (spine, leaf) in enumerate(leaves_of_nodes):
        network.add_node(f"n{i}", {KEYS[0]: spine, KEYS[1]: leaf})
    return network


def sums(network: Network, per_node: list[int]) -> list[list[int]]:
    rows = [list(per_node)] + [[0] * network.count(level) for level in range(1, network.top + 1)]
    for level in range(network.top):
        for domain, value in enumerate(rows[level]):
            rows[level + 1][network.parent[level][domain]] += value
    return rows


def brute_force(network: Network, caps: list[int], level: int, demand: int) -> tuple[int, ...] | None:
    """The least (domains at level - 1, ..., domains at level 1) over splits inside one domain of ``level``."""
    best: tuple[int, ...] | None = None
    for split in product(*(range(min(cap, demand) + 1) for cap in caps)):
        if sum(split) != demand:
            continue
        used = [n for n, k in enumerate(split) if k]
        if len({network.ancestor(n, level) for n in used}) != 1:
            continue
        vector = tuple(len({network.ancestor(n, lv) for n in used}) for lv in range(level - 1, 0, -1))
        best = vector if best is None or vector < best else best
    return best


def test_choose_domain_matches_brute_force() -> None:
    rng = random.Random(3)
    checked = 0
    for _ in range(250):
        nodes = [(f"s{rng.randrange(2)}", f"l{rng.randrange(3)}") for _ in range(rng.randint(2, 8))]
        network = network_of(nodes)
        per_node = [rng.choice((0, 1, 1, 2, 3)) for _ in nodes]
        caps = sums(network, per_node)
        free = sums(network, [8 * c for c in per_node])
        demand = rng.randint(1, 6)
        for level in range(1, network.top + 1):
            found = choose_domain(network, caps, free, level, demand)
            best = brute_force(network, per_node, level, demand)
            if best is None:
                assert found is None
                continue
            assert found is not None
            domain, leaves = found
            assert sum(leaves.values()) == demand
            assert all(0 < pods <= caps[1][leaf] for leaf, pods in leaves.items())
            placed = [n for leaf, pods in leaves.items() for n in fill_leaf(network, per_node, [8 * c for c in per_node], leaf, pods)]
            assert {network.ancestor(n, level) for n in placed} == {domain}
            vector = tuple(len({network.ancestor(n, lv) for n in placed}) for lv in range(level - 1, 0, -1))
            assert vector == best, (nodes, per_node, demand, level, found)
            checked += 1
    assert checked > 200


def test_the_tightest_of_equal_domains_is_taken() -> None:
    network = network_of([("s0", "a"), ("s0", "a"), ("s0", "b"), ("s0", "b")])
    per_node = [2, 2, 2, 1]
    caps, free = sums(network, per_node), sums(network, [8, 8, 8, 4])
    found = choose_domain(network, caps, free, 1, 3)
    assert found is not None and network.describe(1, found[0]) == "leaf s0/b"  # leaf b holds 3, leaf a holds 4


def test_fill_leaf_uses_the_fewest_then_tightest_nodes() -> None:
    network = network_of([("s0", "a")] * 4)
    caps, free = [1, 2, 2, 3], [8, 8, 4, 8]
    assert fill_leaf(network, caps, free, 0, 3) == {3: 3}  # one node
    chosen = fill_leaf(network, caps, free, 0, 4)
    assert len(chosen) == 2 and sum(chosen.values()) == 4 and sum(free[n] for n in chosen) == 12  # not n0 + n3 (16)
    with pytest.raises(ValueError, match="holds fewer than 9 pods"):
        fill_leaf(network, caps, free, 0, 9)
