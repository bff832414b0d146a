"""The gang placer: one placement for every pod of a gang, on the nodes nearest each other in the
network, all at once or not at all; reservations so that two gangs never get the same devices.

Definitions (levels as ``network.py`` numbers them: 0 the node, 1 the leaf .. T the widest tier,
T + 1 the cluster):

- **tiers spanned** by a placement: the level of the lowest common domain of the nodes it uses
  (0: one node, 1: one leaf, T + 1: several domains of the widest tier).
- **lower bound** of a gang: the lowest level at which some domain of the cluster would hold the
  gang were every node free, each node at its **peak** (per NVLink group and PCIe root, the most
  free devices its offers have shown: the node when empty, ``capacity.py``); nodes without an
  offer count nothing. It follows from the node sizes and the tier fan-outs alone: 64 pods of 8
  GPUs on nodes of 8 GPUs in leaves of 16 and spines of 128 have the lower bound 2 (a spine). For a
  gang of one device shape (plus pods without devices) it is exact: an empty cluster reaches it.
  For a gang mixing device shapes it is the highest of each shape's bound and of the bounds of
  its total GPUs and NICs: a necessary condition an empty cluster may not reach.

The objective, in order:

1. **fewest tiers spanned**: the lowest level some domain of which holds the gang with the free
   capacity now (offers less other gangs' reservations);
2. **fewest domains per tier** inside that domain, widest tier first (``search.choose_domain``,
   an exact tree knapsack), the tightest domains taken among equals so that whole domains stay
   free for the next large gang;
3. **best fit inside nodes**: in each leaf the fewest nodes, then the tightest (``search.fill_leaf``),
   and on a node each pod in the tightest NVLink group that holds it (``capacity.take``).

Gangs that mix shapes (a JobSet's 0-GPU launcher beside its 8-GPU workers; 8-GPU trainers beside
1-GPU samplers): the pods are grouped by shape ``(gpus, nics)``. The **dominant** shape (the most
GPUs in all, then the larger pods, then the most NICs) chooses the domain as above, among the
level's domains that could hold every shape; each other shape, in turn, then goes to the lowest
domain that holds it among those holding pods already placed (so it adds no tier it need not),
with the same search inside it, on the capacity the earlier shapes left. When a shape does not
fit, the next domain of the level is tried; then the same with the shapes in reverse order (the
small shape that needs scarce NICs first); then the next level. Pods asking no device go to the
gang's nodes in turn (topology order): they need nothing the placer counts, and add no tier. For
one device shape the result is the optimum of 1-3; for several it is a heuristic (the joint
problem is a multi-dimensional packing): on random small clusters with two shapes it found a
placement in all but 1 of 871 cases where one exists, and never spanned more tiers than the best
(tests/gang/test_placer_mixed.py checks this against a joint brute force).

A gang's pods on one node are packed largest first (``held``), the same order whenever it is
checked, by ``place`` and by ``reserve``.

In a placement, the pods of each shape, in the gang's order, fill the nodes in topology order
(leaf by leaf), so neighbouring ranks share a node or a leaf. Nothing here reads a clock or does
I/O; all calls are synchronous (the controller serialises them). ``place`` changes nothing;
``reserve`` then holds exactly what ``place`` found (``capacity.py``: same order, same result).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from .capacity import Capacity, Shape, pods_in
from .network import Network, Tiers
from .offer import Offer
from .search import choose_domain, fill_leaf

__all__ = ["GangDemand", "Placement", "Placer", "PodDemand", "Refusal", "ReservationError"]


@dataclass(frozen=True, slots=True)
class PodDemand:
    """One pod of a gang: ``gpus`` GPUs (one NVLink group when > 1) and ``nics`` RDMA NICs."""

    name: str
    gpus: int
    nics: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"pod name: must be a non-empty string, got {self.name!r}")
        for what, value in (("gpus", self.gpus), ("nics", self.nics)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"pod {self.name}: {what} must be an integer >= 0, got {value!r}")


@dataclass(frozen=True, slots=True)
class GangDemand:
    """A gang: its key ("namespace/name") and its pods (names unique, at least one)."""

    key: str
    pods: tuple[PodDemand, ...]

    def __post_init__(self) -> None:
        if not isinstance(self.key, str) or not self.key:
            raise ValueError(f"gang key: must be a non-empty string, got {self.key!r}")
        object.__setattr__(self, "pods", tuple(self.pods))
        if not self.pods:
            raise ValueError(f"gang {self.key}: pods must list at least one pod")
        seen: set[str] = set()
        for pod in self.pods:
            if pod.name in seen:
                raise ValueError(f"gang {self.key}: pod name {pod.name!r} appears twice")
            seen.add(pod.name)


@dataclass(frozen=True, slots=True)
class Placement:
    """Where every pod of a gang goes (module docstring: tiers spanned, lower bound). ``domain`` is
    the lowest common domain in words; ``demand`` the gang it was made for (``reserve`` needs it)."""

    key: str
    nodes: Mapping[str, str]
    tiers_spanned: int
    lower_bound: int
    domain: str
    demand: GangDemand | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a gang is not placed now: ``reason`` one line, for an Event and a status condition, that
    stays the same while the cause does (no counts that move with every offer); ``detail`` the live
    counts behind it, for the log ("" when none)."""

    key: str
    reason: str
    detail: str = ""


class ReservationError(ValueError):
    """A placement that cannot be reserved: no demand, pods or nodes that do not match, or devices
    no longer free (an offer changed since ``place``). Nothing was reserved."""


class Placer:
    """The cluster as the placer sees it: nodes, their offers, the reservations (module docstring)."""

    def __init__(self, tiers: Tiers) -> None:
        self.tiers = tiers
        self.network = Network(tiers)
        self.capacity = Capacity(self.network)
        self._nodes: dict[str, int] = {}
        self._reservations: dict[str, Placement] = {}
        self._held: dict[str, dict[int, tuple[int, tuple[Shape, ...]]]] = {}  # key -> node -> (order, pods)
        self._order = itertools.count()

    @property
    def reservations(self) -> Mapping[str, Placement]:
        return MappingProxyType(self._reservations)

    def set_node(self, name: str, labels: Mapping[str, str], offer: Offer | None) -> None:
        """Add or update a node; offer None = the node takes nothing (NotReady, cordoned, gone). A
        node whose tier labels change moves: its old place offers nothing, its holds move with it."""
        node = self._nodes.get(name)
        if node is not None and self.network.path_of(name, labels) != self._path(node):
            old, moved = node, dict(self.capacity.holds[node])
            for key in moved:
                self.capacity.unhold(old, key)
            self.capacity.set_offer(old, None)
            node = self._add(name, labels)
            for key, (order, pods) in moved.items():
                self.capacity.hold(node, key, order, pods)
                self._held[key][node] = self._held[key].pop(old)
        elif node is None:
            node = self._add(name, labels)
        self.capacity.set_offer(node, offer)

    def _add(self, name: str, labels: Mapping[str, str]) -> int:
        node = self._nodes[name] = self.network.add_node(name, labels)
        self.capacity.added(node)
        return node

    def _path(self, node: int) -> tuple[str, ...]:
        return self.network.paths[1][self.network.parent[0][node]]

    # -- placing ------------------------------------------------------------------------------

    def place(self, gang: GangDemand) -> Placement | Refusal:
        """All or nothing; sees the offers less the capacity reserved for other gangs; changes nothing."""
        own = self._held.get(gang.key, {})
        for node in own:
            self.capacity.unhold(node, gang.key)
        try:
            return self._place(gang)
        finally:
            for node, (order, pods) in own.items():
                self.capacity.hold(node, gang.key, order, pods)

    def _place(self, gang: GangDemand) -> Placement | Refusal:
        shapes, bare = shapes_of(gang)
        if not shapes:
            ready = [n for n in range(len(self.capacity.offers)) if self.capacity.offers[n] is not None]
            if not ready:
                return Refusal(gang.key, "no node takes pods now (none known, or all NotReady, cordoned or gone)")
            node = min(ready, key=lambda n: (self.capacity.free[0][n], n))
            return self._placement(gang, {}, bare, [node], 0)
        lower = self._lower_bound(shapes)
        if lower is None:
            return Refusal(gang.key, f"{describe(shapes, bare)}: more than the cluster holds even with every node free")
        levels = [self.capacity.lowest_level(shape, len(names)) for shape, names in shapes]
        if None in levels:
            shape, names = shapes[levels.index(None)]
            room = self.capacity.caps(shape)[self.network.top][0]
            return Refusal(gang.key, f"{describe(shapes, bare)}: not enough free capacity now (lower bound: "
                           f"{self.tiers.level_name(lower)})",
                           f"the cluster holds {room} of the {len(names)} pods of {shape_words(shape)} now")
        for level in range(max(level for level in levels if level is not None), self.network.top + 1):
            pods = self._at_level(level, shapes)
            if pods is not None:
                return self._placement(gang, pods, bare, sorted(pods, key=self._topology_order), lower)
        return Refusal(gang.key, f"{describe(shapes, bare)}: no domain holds all its pod shapes together now "
                       f"(lower bound: {self.tiers.level_name(lower)})")

    def _lower_bound(self, shapes: list[tuple[Shape, list[str]]]) -> int | None:
        levels = [self.capacity.lowest_level(shape, len(names), at_peak=True) for shape, names in shapes]
        if len(shapes) > 1:
            gpus, nics = (sum(shape[i] * len(names) for shape, names in shapes) for i in (0, 1))
            levels += [self.capacity.lowest_level(unit, total, at_peak=True) for unit, total in (((1, 0), gpus), ((0, 1), nics)) if total]
        return None if None in levels else max(level for level in levels if level is not None)

    def _at_level(self, level: int, shapes: list[tuple[Shape, list[str]]]) -> dict[int, list[Shape]] | None:
        """Pods per node (in holding order) in the best domain of ``level`` that holds every shape; None if none."""
        dominant, count = shapes[0][0], len(shapes[0][1])
        caps, free = self.capacity.caps(dominant), self.capacity.free
        if level == 0:
            fitting = (n for n, cap in enumerate(caps[0]) if cap >= count)
            everything = held(shape for shape, pod_names in shapes for _ in pod_names)

            def tightest(n: int) -> tuple[int, int, int]:
                return caps[0][n], free[0][n], n

            node = (min(fitting, key=tightest, default=None) if len(shapes) == 1 else
                    next((n for n in sorted(fitting, key=tightest) if self.capacity.residual_after(n, everything) is not None), None))
            return None if node is None else {node: list(everything)}
        if len(shapes) == 1:
            found = choose_domain(self.network, caps, free, level, count)
            return None if found is None else self._fill(found[1], dominant, caps[0], free[0], {})
        gpus = sum(shape[0] * len(pod_names) for shape, pod_names in shapes)
        tables = [(self.capacity.caps(shape)[level], len(pod_names)) for shape, pod_names in shapes]
        candidates = {d for d in range(self.network.count(level)) if free[level][d] >= gpus and all(row[d] >= n for row, n in tables)}
        for order in (shapes, shapes[::-1]):
            (first, first_names), left = order[0], set(candidates)
            caps = self.capacity.caps(first)
            while left:
                masked = [caps[level][d] if d in left else 0 for d in range(self.network.count(level))]
                found = choose_domain(self.network, [*caps[:level], masked, *caps[level + 1:]], free, level, len(first_names))
                if found is None:
                    break
                pods = self._fill(found[1], first, caps[0], free[0], {})
                if (all(self._add_shape(level, found[0], shape, len(pod_names), pods) for shape, pod_names in order[1:])
                        and all(self.capacity.residual_after(node, held(on)) is not None for node, on in pods.items())):
                    return pods
                left.discard(found[0])
        return None

    def _fill(self, leaves: Mapping[int, int], shape: Shape, node_caps: list[int], node_free: list[int],
              pods: dict[int, list[Shape]]) -> dict[int, list[Shape]]:
        for leaf, count in leaves.items():
            for node, n in fill_leaf(self.network, node_caps, node_free, leaf, count).items():
                pods.setdefault(node, []).extend([shape] * n)
        return pods

    def _add_shape(self, level: int, domain: int, shape: Shape, count: int, pods: dict[int, list[Shape]]) -> bool:
        """Place ``count`` pods of ``shape`` inside the domain, in the lowest domain holding one of
        the gang's nodes that fits them (with what ``pods`` already takes); False when none does."""
        caps = [[0] * self.network.count(lv) for lv in range(self.network.top + 1)]
        free = [[0] * self.network.count(lv) for lv in range(self.network.top + 1)]
        for node in self._nodes_under(level, domain):
            residual = self.capacity.residual_after(node, held(pods.get(node, ())))
            if residual is None:
                continue
            n, gpus = pods_in(residual, shape), sum(residual[0])
            for lv, d in enumerate((node, *self.capacity.up[node][:level])):
                caps[lv][d] += n
                free[lv][d] += gpus
        for lv in range(level + 1):
            own = {node if lv == 0 else self.capacity.up[node][lv - 1] for node in pods}
            fits = {d for d in own if caps[lv][d] >= count}
            if not fits:
                continue
            if lv == 0:
                node = min(fits, key=lambda n: (caps[0][n], free[0][n], n))
                pods[node].extend([shape] * count)
                return True
            caps[lv] = [cap if d in fits else 0 for d, cap in enumerate(caps[lv])]
            found = choose_domain(self.network, caps, free, lv, count)
            if found is not None:
                self._fill(found[1], shape, caps[0], free[0], pods)
                return True
        return False

    def _nodes_under(self, level: int, domain: int) -> list[int]:
        domains = [domain]
        for lv in range(level, 0, -1):
            domains = [child for d in domains for child in self.network.children[lv][d]]
        return domains

    def _topology_order(self, node: int) -> tuple[tuple[str, ...], str]:
        return self._path(node), self.network.node_names[node]

    def _placement(self, gang: GangDemand, pods: Mapping[int, list[Shape]], bare: list[str], order: list[int],
                   lower: int) -> Placement:
        names: dict[str, str] = {}
        for shape, pod_names in shapes_of(gang)[0]:
            slots = (node for node in order for pod in pods[node] if pod == shape)
            names.update((name, self.network.node_names[node]) for name, node in zip(pod_names, slots, strict=False))
        names.update((name, self.network.node_names[node]) for name, node in zip(bare, itertools.cycle(order), strict=False))
        level, domain = self._common_domain(order)
        return Placement(gang.key, {pod.name: names[pod.name] for pod in gang.pods}, level, lower,
                         self.network.describe(level, domain), gang)

    def _common_domain(self, nodes: Iterable[int]) -> tuple[int, int]:
        """The level and index of the lowest domain holding every one of ``nodes``."""
        nodes = set(nodes)
        if len(nodes) == 1:
            return 0, next(iter(nodes))
        for level in range(1, self.network.top + 1):
            above = {self.capacity.up[node][level - 1] for node in nodes}
            if len(above) == 1:
                return level, above.pop()
        raise AssertionError("the cluster holds every node")

    # -- reserving ----------------------------------------------------------------------------

    def reserve(self, placement: Placement) -> None:
        """Hold the placement's devices until release (two gangs never get the same GPUs); a
        placement of a gang already reserved replaces its reservation. ReservationError, with
        nothing changed, when the placement does not fit what is free now."""
        gang = placement.demand
        if gang is None or gang.key != placement.key:
            raise ReservationError(f"gang {placement.key}: the placement carries no demand of that gang (make it with place)")
        if set(placement.nodes) != {pod.name for pod in gang.pods}:
            raise ReservationError(f"gang {placement.key}: the placement's pods are not the demand's pods")
        unknown = sorted(name for name in set(placement.nodes.values()) if name not in self._nodes)
        if unknown:
            raise ReservationError(f"gang {placement.key}: unknown node {unknown[0]}")
        on_nodes: dict[int, list[Shape]] = {}
        for pod in gang.pods:
            if pod.gpus or pod.nics:
                on_nodes.setdefault(self._nodes[placement.nodes[pod.name]], []).append((pod.gpus, pod.nics))
        pods = {node: held(shapes) for node, shapes in on_nodes.items()}
        previous = self._held.pop(placement.key, {})
        for node in previous:
            self.capacity.unhold(node, placement.key)
        short = next((node for node, shapes in pods.items() if self.capacity.residual_after(node, shapes) is None), None)
        if short is not None:
            for node, (order, shapes) in previous.items():
                self.capacity.hold(node, placement.key, order, shapes)
            self._held[placement.key] = previous
            raise ReservationError(f"gang {placement.key}: node {self.network.node_names[short]} no longer has the "
                                   "devices free (its offer changed or another gang holds them); place it again")
        order = next(self._order)
        holds = self._held[placement.key] = {node: (order, shapes) for node, shapes in pods.items()}
        for node, (_, shapes) in holds.items():
            self.capacity.hold(node, placement.key, order, shapes)
        self._reservations[placement.key] = placement

    def release(self, key: str) -> None:
        """Give back what the gang's reservation holds (nothing when it has none)."""
        for node in self._held.pop(key, {}):
            self.capacity.unhold(node, key)
        self._reservations.pop(key, None)


def held(pods: Iterable[Shape]) -> tuple[Shape, ...]:
    """A gang's pods on one node in the order they are packed there: the largest first (GPUs, then NICs)."""
    return tuple(sorted(pods, reverse=True))


def shapes_of(gang: GangDemand) -> tuple[list[tuple[Shape, list[str]]], list[str]]:
    """The gang's device shapes with their pod names, dominant first (most GPUs in all, then larger
    pods, then most NICs in all, then larger NIC counts), and the names of pods asking no device."""
    groups: dict[Shape, list[str]] = {}
    bare: list[str] = []
    for pod in gang.pods:
        (groups.setdefault((pod.gpus, pod.nics), []) if pod.gpus or pod.nics else bare).append(pod.name)
    ordered = sorted(groups.items(), key=lambda item: (-item[0][0] * len(item[1]), -item[0][0], -item[0][1] * len(item[1]),
                                                       -item[0][1], item[0]))
    return ordered, bare


def shape_words(shape: Shape) -> str:
    gpus, nics = shape
    return f"{gpus} GPU{'s' * (gpus != 1)}" + (f" + {nics} NIC{'s' * (nics != 1)}" if nics else "")


def describe(shapes: list[tuple[Shape, list[str]]], bare: list[str]) -> str:
    """"64 pods of 8 GPUs + 8 NICs and 1 pod without devices"."""
    parts = [f"{len(names)} pod{'s' * (len(names) != 1)} of {shape_words(shape)}" for shape, names in shapes]
    if bare:
        parts.append(f"{len(bare)} pod{'s' * (len(bare) != 1)} without devices")
    return " and ".join(parts)
