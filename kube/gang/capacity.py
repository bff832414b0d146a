"""What every node and domain holds now, less what reservations hold, kept current incrementally.

A **pod shape** is ``(gpus, nics)``: a pod asking that many GPUs (one NVLink group when > 1,
``offer.py``) and RDMA NICs. Per node this keeps:

- the node's **offer** (None: the node takes nothing) and its **peak**: per NVLink group (the
  groups sorted largest first) and per PCIe root, the most free devices any of its offers showed.
  The peak dominates every offer seen, so a node holds at least as many pods of any shape at its
  peak as now: it stands for the node "when empty" (the lower bound of ``placer.py``);
- the pods that reservations **hold** on it (per gang key, packed in the order they were reserved), and the
  **residual**: the offer less those pods, packed in that order each into the tightest NVLink
  group that holds it (``take``) and taking its NICs from the node's free count. Where the pods no
  longer fit (the offer shrank under a reservation), the node is overcommitted and its residual is
  empty: it offers nothing until a reservation is released or the offer grows back.

Per level and domain (``Network`` levels: 0 the nodes .. T + 1 the cluster) it keeps the sum of
free GPUs (residual), and per pod shape in use the sum of pods of that shape the residuals hold
(``caps``) and the peaks hold (``full``; nodes without an offer count 0). A change to one node
(offer, hold, release) updates its T + 1 ancestors in every table: O(levels x shapes), never a
pass over the cluster. A shape's table is built on first use (one pass) and the least recently
used is dropped past ``MAX_SHAPES``.

Holding then placing the same pods in the same order on the same residual gives the same result,
which is why ``placer.py`` checks a gang's pods on a node in the order ``reserve`` holds them: a
placement that ``place`` found always fits at ``reserve`` if no offer changed in between.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Sequence

from .network import Network
from .offer import Offer

__all__ = ["MAX_SHAPES", "Capacity", "Residual", "Shape", "pods_in", "take"]

Shape = tuple[int, int]  # (GPUs, NICs) of one pod
Residual = tuple[tuple[int, ...], int]  # (free GPUs per NVLink group, free NICs)
MAX_SHAPES = 32
_NOTHING: Residual = ((), 0)


def take(groups: list[int], gpus: int) -> bool:
    """Take ``gpus`` GPUs from the tightest group holding them (in place); False when none does."""
    if gpus == 0:
        return True
    best = -1
    for i, free in enumerate(groups):
        if free >= gpus and (best < 0 or free < groups[best]):
            best = i
    if best < 0:
        return False
    groups[best] -= gpus
    return True


def pack(residual: Residual, pods: Iterable[Shape]) -> Residual | None:
    """``residual`` less ``pods`` placed in order (``take``; NICs from the count); None when one does not fit."""
    groups, nics = list(residual[0]), residual[1]
    for gpus, pod_nics in pods:
        nics -= pod_nics
        if nics < 0 or not take(groups, gpus):
            return None
    return tuple(groups), nics


def pods_in(residual: Residual, shape: Shape) -> int:
    """Pods of ``shape`` that ``residual`` holds (``offer.pods_fit``; a NIC-only pod counts NICs).
    A shape of no device is not counted here: such pods need nothing of a node."""
    gpus, nics = shape
    groups, nics_free = residual
    if gpus == 0:
        return nics_free // nics
    by_gpus = sum(groups) if gpus == 1 else sum(free // gpus for free in groups)
    return by_gpus if nics == 0 else min(by_gpus, nics_free // nics)


def residual_of(offer: Offer | None) -> Residual:
    return _NOTHING if offer is None else (tuple(g.free for g in offer.groups), offer.nics_free)


def raised_peak(peak: Offer | None, offer: Offer | None) -> Offer | None:
    """The peak after seeing ``offer``: per group rank (largest first) and per PCIe root the larger count."""
    if offer is None or peak is None:
        return peak or offer
    old, new = [g.free for g in peak.groups], [g.free for g in offer.groups]
    size = max(len(old), len(new))
    old, new = old + [0] * (size - len(old)), new + [0] * (size - len(new))
    roots = dict(peak.nics)
    for root, count in offer.nics:
        roots[root] = max(roots.get(root, 0), count)
    return Offer.of([max(a, b) for a, b in zip(old, new, strict=True)], roots)


class _ShapeTable:
    """Pods of one shape per level and domain: ``caps`` in the residuals, ``full`` at the peaks."""

    __slots__ = ("caps", "full", "full_max")

    def __init__(self, caps: list[list[int]], full: list[list[int]]) -> None:
        self.caps, self.full = caps, full
        self.full_max: list[int] | None = None  # per level, the largest domain's ``full``; None: stale


class Capacity:
    """Offers, peaks, holds and residuals of the network's nodes, and the per-domain sums."""

    def __init__(self, network: Network) -> None:
        self.network = network
        self.offers: list[Offer | None] = []
        self.peaks: list[Offer | None] = []
        self.holds: list[dict[str, tuple[int, tuple[Shape, ...]]]] = []  # per node: key -> (order, pods)
        self.residuals: list[Residual] = []
        self.up: list[tuple[int, ...]] = []  # per node, its domain at levels 1 .. T + 1
        self.free: list[list[int]] = [[] for _ in range(network.top + 1)]
        self._tables: OrderedDict[Shape, _ShapeTable] = OrderedDict()

    def added(self, node: int) -> None:
        """Make room for a node just added to the network (it offers nothing yet)."""
        up, below = [], node
        for level in range(self.network.top):
            below = self.network.parent[level][below]
            up.append(below)
        self.up.append(tuple(up))
        self.offers.append(None)
        self.peaks.append(None)
        self.holds.append({})
        self.residuals.append(_NOTHING)
        for level in range(self.network.top + 1):
            self._grow(self.free[level], level)
        for table in self._tables.values():
            for level in range(self.network.top + 1):
                self._grow(table.caps[level], level)
                self._grow(table.full[level], level)

    def _grow(self, row: list[int], level: int) -> None:
        row.extend([0] * (self.network.count(level) - len(row)))

    def set_offer(self, node: int, offer: Offer | None) -> None:
        before = self._peak_of(node)
        self.offers[node] = offer
        self.peaks[node] = raised_peak(self.peaks[node], offer)
        self._refresh(node, before)

    def hold(self, node: int, key: str, order: int, pods: tuple[Shape, ...]) -> None:
        """Hold ``pods`` on the node for gang ``key``; holds pack in ``order`` (lowest first)."""
        self.holds[node][key] = (order, pods)
        self._refresh(node, self._peak_of(node))

    def unhold(self, node: int, key: str) -> None:
        if self.holds[node].pop(key, None) is not None:
            self._refresh(node, self._peak_of(node))

    def _peak_of(self, node: int) -> Residual:
        return residual_of(self.peaks[node]) if self.offers[node] is not None else _NOTHING

    def _refresh(self, node: int, peak_before: Residual) -> None:
        """Recompute the node's residual and carry the changes up its ancestors in every table."""
        old = self.residuals[node]
        new = residual_of(self.offers[node])
        if self.holds[node]:
            new = pack(new, (pod for _, pods in sorted(self.holds[node].values()) for pod in pods)) or _NOTHING
        self.residuals[node] = new
        peak = self._peak_of(node)
        self._add(self.free, node, sum(new[0]) - sum(old[0]))
        for shape, table in self._tables.items():
            self._add(table.caps, node, pods_in(new, shape) - pods_in(old, shape))
            if peak != peak_before:
                self._add(table.full, node, pods_in(peak, shape) - pods_in(peak_before, shape))
                table.full_max = None

    def _add(self, rows: list[list[int]], node: int, delta: int) -> None:
        if delta:
            rows[0][node] += delta
            for level, domain in enumerate(self.up[node], 1):
                rows[level][domain] += delta

    def table(self, shape: Shape) -> _ShapeTable:
        """The shape's table, built now in one pass if it is not kept."""
        table = self._tables.get(shape)
        if table is not None:
            self._tables.move_to_end(shape)
            return table
        caps = self._sums([pods_in(residual, shape) for residual in self.residuals])
        full = self._sums([pods_in(self._peak_of(node), shape) for node in range(len(self.residuals))])
        table = self._tables[shape] = _ShapeTable(caps, full)
        if len(self._tables) > MAX_SHAPES:
            self._tables.popitem(last=False)
        return table

    def _sums(self, nodes: list[int]) -> list[list[int]]:
        rows = [nodes] + [[0] * self.network.count(level) for level in range(1, self.network.top + 1)]
        for level in range(self.network.top):
            above, parent = rows[level + 1], self.network.parent[level]
            for domain, value in enumerate(rows[level]):
                if value:
                    above[parent[domain]] += value
        return rows

    def caps(self, shape: Shape) -> list[list[int]]:
        """Pods of ``shape`` per level and domain, in the residuals (the caller must not change them)."""
        return self.table(shape).caps

    def lowest_level(self, shape: Shape, count: int, at_peak: bool = False) -> int | None:
        """The lowest level one of whose domains holds ``count`` pods of ``shape`` now (or, with
        ``at_peak``, at the peaks); None when not even the cluster does."""
        table = self.table(shape)
        if at_peak:
            if table.full_max is None:
                table.full_max = [max(row, default=0) for row in table.full]
            return next((level for level, most in enumerate(table.full_max) if most >= count), None)
        return next((level for level, row in enumerate(table.caps) if max(row, default=0) >= count), None)

    def residual_after(self, node: int, pods: Sequence[Shape]) -> Residual | None:
        """The node's residual were ``pods`` placed on it too; None when they do not fit."""
        return pack(self.residuals[node], pods)
