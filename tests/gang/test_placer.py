"""The placer against brute force on small clusters (2-3 tiers, at most 10 nodes, random offers,
seeded): every way to spread the gang's pods over the nodes is enumerated and ranked by the
placer's objective (tiers spanned, then domains per tier widest first); the placer must reach the
same minimum, refuse exactly when nothing fits, and never split, partly place or double-book.
The reference model here is written from the definitions (offer.py, network.py), not from the
placer's code: a node's domain at a level is its label path cut to that tier, and a node holds
pods by exact bin packing of its NVLink groups."""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from functools import cache
from itertools import product

import pytest

from runtimekit.kube.gang.network import Tiers
from runtimekit.kube.gang.offer import Offer
from runtimekit.kube.gang.placer import GangDemand, Placement, Placer, PodDemand, Refusal, ReservationError

KEYS = ("example.com/block", "example.com/spine", "example.com/leaf")
GROUPS = ((8,), (4, 4), (2, 2, 2, 2), (4, 2), (1, 1), (3, 1), (6,), (2,), ())


def gang(key: str, count: int, gpus: int, nics: int = 0, bare: int = 0) -> GangDemand:
    pods = [PodDemand(f"w{i}", gpus, nics) for i in range(count)] + [PodDemand(f"launcher{i}", 0) for i in range(bare)]
    return GangDemand(key, tuple(pods))


def random_cluster(rng: random.Random, depth: int, nodes: int) -> dict[str, tuple[dict[str, str], Offer | None]]:
    """Nodes with labels (a tree of fan-out 1-3 per tier; now and then a label missing) and offers."""
    keys = KEYS[-depth:]
    cluster: dict[str, tuple[dict[str, str], Offer | None]] = {}
    for i in range(nodes):
        labels = {key: f"{key[12]}{rng.randrange(2 if t < depth - 1 else 3)}" for t, key in enumerate(keys)}
        if rng.random() < 0.08:
            labels.pop(rng.choice(keys))
        groups = rng.choice(GROUPS)
        offer = None if rng.random() < 0.08 else Offer.of(list(groups), {f"pci{r}": rng.randrange(3) for r in range(2)})
        cluster[f"node-{i}"] = (labels, offer)
    return cluster


def path(name: str, labels: Mapping[str, str], keys: Sequence[str]) -> tuple[str, ...]:
    return tuple(labels.get(key) or f"({name})" for key in keys)


def domain_at(name: str, labels: Mapping[str, str], keys: Sequence[str], level: int) -> tuple[str, ...]:
    """The node's domain at ``level`` (0: the node itself, depth + 1: the cluster)."""
    return ("node", name) if level == 0 else path(name, labels, keys)[: len(keys) + 1 - level]


@cache
def packs(groups: tuple[int, ...], pods: tuple[int, ...]) -> bool:
    """Whether pods of these GPU counts fit the groups, each pod of more than 1 GPU in one group (exact)."""
    if not pods:
        return True
    first, rest = pods[0], pods[1:]
    return any(free >= first and packs(tuple(sorted(groups[:i] + (free - first,) + groups[i + 1:])), rest)
               for i, free in enumerate(groups))


def node_holds(offer: Offer | None, gpus: int, nics: int) -> int:
    """Pods of the shape the offer holds, by the definition in offer.py."""
    if offer is None:
        return 0
    by_gpus = offer.gpus_free if gpus == 1 else sum(g.free // gpus for g in offer.groups)
    return by_gpus if nics == 0 else min(by_gpus, offer.nics_free // nics)


def objective(used: Sequence[str], cluster: Mapping[str, tuple[dict[str, str], Offer | None]], keys: Sequence[str]) -> tuple[int, ...]:
    """(tiers spanned, domains at level spanned - 1, ..., domains at level 1)."""
    top = len(keys) + 1
    spanned = next(level for level in range(top + 1) if len({domain_at(n, cluster[n][0], keys, level) for n in used}) == 1)
    return (spanned, *(len({domain_at(n, cluster[n][0], keys, level) for n in used}) for level in range(spanned - 1, 0, -1)))


def brute_force(cluster: Mapping[str, tuple[dict[str, str], Offer | None]], keys: Sequence[str], count: int, gpus: int,
                nics: int) -> tuple[int, ...] | None:
    """The least objective over every spread of ``count`` pods over the nodes; None when none holds them."""
    names = list(cluster)
    caps = [min(count, node_holds(cluster[n][1], gpus, nics)) for n in names]
    best: tuple[int, ...] | None = None
    for spread in product(*(range(cap + 1) for cap in caps)):
        if sum(spread) == count:
            score = objective([n for n, k in zip(names, spread, strict=True) if k], cluster, keys)
            best = score if best is None or score < best else best
    return best


def placer_of(cluster: Mapping[str, tuple[dict[str, str], Offer | None]], keys: Sequence[str]) -> Placer:
    placer = Placer(Tiers.of_keys(keys))
    for name, (labels, offer) in cluster.items():
        placer.set_node(name, labels, offer)
    return placer


def check_fits(placement: Placement, cluster: Mapping[str, tuple[dict[str, str], Offer | None]], demand: GangDemand) -> None:
    """Every pod placed once; each node's device pods fit its offer exactly (groups and NICs)."""
    assert set(placement.nodes) == {pod.name for pod in demand.pods}
    for node in set(placement.nodes.values()):
        pods = [pod for pod in demand.pods if placement.nodes[pod.name] == node and (pod.gpus or pod.nics)]
        offer = cluster[node][1]
        if not pods:
            continue
        assert offer is not None
        assert sum(pod.nics for pod in pods) <= offer.nics_free
        big = tuple(sorted((pod.gpus for pod in pods if pod.gpus > 1), reverse=True))
        ones = sum(1 for pod in pods if pod.gpus == 1)
        groups = tuple(sorted(g.free for g in offer.groups))
        assert packs(groups, big) and sum(groups) - sum(big) >= ones


@pytest.mark.parametrize("seed", range(6))
def test_single_shape_matches_brute_force(seed: int) -> None:
    rng = random.Random(seed)
    compared = placed = 0
    for case in range(60):
        depth = rng.choice((2, 3))
        keys = KEYS[-depth:]
        cluster = random_cluster(rng, depth, rng.randint(3, 9))
        gpus, nics = rng.choice(((1, 0), (2, 0), (4, 0), (8, 0), (2, 1), (4, 2), (8, 1), (1, 1)))
        count = rng.randint(1, 6)
        demand = gang(f"ns/g{case}", count, gpus, nics, bare=rng.choice((0, 0, 1, 2)))
        placer = placer_of(cluster, keys)
        result = placer.place(demand)
        best = brute_force(cluster, keys, count, gpus, nics)
        compared += 1
        if best is None:
            assert isinstance(result, Refusal), (cluster, demand, result)
            assert result.key == demand.key and "\n" not in result.reason
            continue
        assert isinstance(result, Placement), (cluster, demand, result)
        placed += 1
        check_fits(result, cluster, demand)
        workers = [result.nodes[pod.name] for pod in demand.pods if pod.gpus]
        assert objective(workers, cluster, keys) == best, (cluster, demand, result)
        assert result.tiers_spanned == best[0]
        assert set(result.nodes.values()) == set(workers)  # pods without devices go where the workers are
        assert 0 <= result.lower_bound <= result.tiers_spanned
        assert not placer.reservations  # place changes nothing
    assert placed > compared // 3


def test_on_an_empty_cluster_the_lower_bound_is_reached() -> None:
    """Nodes of 8 GPUs, leaves of 4 nodes, spines of 2 leaves, 2 spines: 8-GPU gangs of 1, 2-4,
    5-8 and 9-16 pods reach levels 0, 1, 2 and 3."""
    keys = KEYS[1:]
    placer = Placer(Tiers.of_keys(keys))
    for i in range(16):
        placer.set_node(f"n{i:02}", {keys[0]: f"s{i // 8}", keys[1]: f"l{i // 4}"}, Offer.of([8]))
    for count, level in ((1, 0), (2, 1), (4, 1), (5, 2), (8, 2), (9, 3), (16, 3)):
        result = placer.place(gang("ns/g", count, 8))
        assert isinstance(result, Placement)
        assert (result.tiers_spanned, result.lower_bound) == (level, level)
    too_big = placer.place(gang("ns/g", 17, 8))
    assert isinstance(too_big, Refusal) and "even with every node free" in too_big.reason


def test_reservations_never_double_book_and_release_gives_back() -> None:
    """Random place/reserve/release/offer changes; after each step the pods every reservation holds
    fit each node's offer exactly, and a refused place leaves every reservation as it was."""
    rng = random.Random(7)
    keys = KEYS
    cluster = random_cluster(rng, 3, 10)
    placer = placer_of(cluster, keys)
    live: dict[str, GangDemand] = {}
    for step in range(400):
        roll = rng.random()
        if roll < 0.35 and live:
            key = rng.choice(sorted(live))
            placer.release(key)
            del live[key]
        elif roll < 0.45:
            name = rng.choice(sorted(cluster))
            if not any(name in placer.reservations[k].nodes.values() for k in live):  # offers of nodes held change only upward
                cluster[name] = (cluster[name][0], None if rng.random() < 0.3 else Offer.of(list(rng.choice(GROUPS)), {"pci0": 2}))
                placer.set_node(name, cluster[name][0], cluster[name][1])
        else:
            demand = gang(f"ns/g{step}", rng.randint(1, 5), rng.choice((1, 2, 4, 8)), rng.choice((0, 0, 1)), rng.choice((0, 1)))
            before = dict(placer.reservations)
            result = placer.place(demand)
            assert dict(placer.reservations) == before
            if isinstance(result, Placement):
                placer.reserve(result)
                live[demand.key] = demand
        assert set(placer.reservations) == set(live)
        for node, (_, offer) in cluster.items():
            pods = [pod for key, demand in live.items() for pod in demand.pods if placer.reservations[key].nodes[pod.name] == node
                    and (pod.gpus or pod.nics)]
            if pods:
                assert offer is not None
                big = tuple(sorted((p.gpus for p in pods if p.gpus > 1), reverse=True))
                assert packs(tuple(sorted(g.free for g in offer.groups)), big)
                assert offer.gpus_free - sum(big) >= sum(1 for p in pods if p.gpus == 1)
                assert sum(p.nics for p in pods) <= offer.nics_free
    for key in list(live):
        placer.release(key)
    assert not placer.reservations
    fresh = placer_of(cluster, keys)
    assert placer.capacity.free == fresh.capacity.free  # everything given back


def test_a_refusal_reserves_nothing_and_a_gang_never_lands_in_part() -> None:
    keys = KEYS[1:]
    cluster = {f"n{i}": ({keys[0]: "s0", keys[1]: f"l{i // 2}"}, Offer.of([8])) for i in range(4)}
    placer = placer_of(cluster, keys)
    first = placer.place(gang("ns/a", 3, 8))
    assert isinstance(first, Placement)
    placer.reserve(first)
    refused = placer.place(gang("ns/b", 2, 8))  # one node left: both or neither
    assert isinstance(refused, Refusal) and "holds 1 of the 2 pods of 8 GPUs" in refused.detail
    assert "not enough free capacity now" in refused.reason and "1 of" not in refused.reason, "no live counts in the reason"
    assert set(placer.reservations) == {"ns/a"}
    alone = placer.place(gang("ns/b", 1, 8))
    assert isinstance(alone, Placement) and alone.nodes["w0"] not in first.nodes.values()
    placer.release("ns/a")
    again = placer.place(gang("ns/b", 2, 8))
    assert isinstance(again, Placement) and again.tiers_spanned == 1


def test_an_unready_node_takes_nothing_and_returns() -> None:
    keys = KEYS[2:]
    placer = Placer(Tiers.of_keys(keys))
    placer.set_node("a", {keys[0]: "l0"}, Offer.of([8]))
    placer.set_node("b", {keys[0]: "l0"}, Offer.of([8]))
    placer.set_node("a", {keys[0]: "l0"}, None)
    alone = placer.place(gang("ns/g", 1, 8))
    assert isinstance(alone, Placement) and alone.nodes["w0"] == "b"
    assert isinstance(placer.place(gang("ns/g", 2, 8)), Refusal)
    placer.set_node("a", {keys[0]: "l0"}, Offer.of([8]))
    assert isinstance(placer.place(gang("ns/g", 2, 8)), Placement)


def test_a_node_that_moves_keeps_its_holds() -> None:
    keys = KEYS[2:]
    placer = Placer(Tiers.of_keys(keys))
    placer.set_node("a", {keys[0]: "l0"}, Offer.of([8]))
    held = placer.place(gang("ns/a", 1, 4))
    assert isinstance(held, Placement)
    placer.reserve(held)
    placer.set_node("a", {keys[0]: "l1"}, Offer.of([8]))  # recabled: now in leaf l1
    moved = placer.place(gang("ns/b", 2, 4))
    assert isinstance(moved, Refusal)  # the 4 GPUs held moved with the node
    placer.release("ns/a")
    back = placer.place(gang("ns/b", 2, 4))
    assert isinstance(back, Placement) and back.domain == "a"


def test_place_of_a_reserved_gang_sees_its_own_devices_and_reserve_replaces() -> None:
    keys = KEYS[2:]
    placer = Placer(Tiers.of_keys(keys))
    placer.set_node("a", {keys[0]: "l0"}, Offer.of([8]))
    first = placer.place(gang("ns/a", 2, 4))
    assert isinstance(first, Placement)
    placer.reserve(first)
    again = placer.place(gang("ns/a", 2, 4))  # its own reservation does not stand in its way
    assert isinstance(again, Placement)
    placer.reserve(again)
    assert list(placer.reservations) == ["ns/a"]
    assert isinstance(placer.place(gang("ns/b", 1, 1)), Refusal)


def test_reserve_refuses_what_no_longer_fits_and_changes_nothing() -> None:
    keys = KEYS[2:]
    placer = Placer(Tiers.of_keys(keys))
    placer.set_node("a", {keys[0]: "l0"}, Offer.of([8]))
    placer.set_node("b", {keys[0]: "l0"}, Offer.of([8]))
    plan = placer.place(gang("ns/a", 2, 8))
    assert isinstance(plan, Placement)
    placer.set_node("b", {keys[0]: "l0"}, Offer.of([4]))  # a GPU pair failed between place and reserve
    with pytest.raises(ReservationError, match="node b no longer has the devices free"):
        placer.reserve(plan)
    assert not placer.reservations and placer.capacity.free[0] == [8, 4]
    bare = Placement("ns/a", plan.nodes, plan.tiers_spanned, plan.lower_bound, plan.domain)
    with pytest.raises(ReservationError, match="carries no demand"):
        placer.reserve(bare)


def test_pods_without_devices_go_with_the_workers() -> None:
    keys = KEYS[1:]
    placer = Placer(Tiers.of_keys(keys))
    for i in range(6):
        placer.set_node(f"n{i}", {keys[0]: "s0", keys[1]: f"l{i // 3}"}, Offer.of([8]))
    result = placer.place(gang("ns/job", 3, 8, bare=2))
    assert isinstance(result, Placement) and result.tiers_spanned == 1
    assert {result.nodes["launcher0"], result.nodes["launcher1"]} <= {result.nodes[f"w{i}"] for i in range(3)}
    only_bare = placer.place(gang("ns/cpu", 0, 8, bare=3))
    assert isinstance(only_bare, Placement) and only_bare.tiers_spanned == 0


def test_demands_refuse_bad_input_by_name() -> None:
    with pytest.raises(ValueError, match="pod w: gpus must be an integer >= 0"):
        PodDemand("w", -1)
    with pytest.raises(ValueError, match="pod w: nics must be an integer >= 0"):
        PodDemand("w", 1, True)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="appears twice"):
        GangDemand("ns/g", (PodDemand("w", 1), PodDemand("w", 2)))
    with pytest.raises(ValueError, match="at least one pod"):
        GangDemand("ns/g", ())
