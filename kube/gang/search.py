"""The search for a gang's domain: given how many pods of one shape every domain holds, which domain
of a level hosts ``demand`` pods with the fewest domains used per tier, and how many pods each of
its leaves takes. Pure: numbers in, numbers out; no clock, no I/O.

The objective inside a candidate domain D of level L (the level is chosen before: the lowest that
fits) is lexicographic: fewest level-(L - 1) domains, then fewest level-(L - 2) domains, ..., then
fewest leaves. It is encoded as one integer: a domain of level l costs ``W_l`` with ``W_1 = 1`` and
``W_(l+1) = W_l * (domains of level l + 1)``, so no count below can outweigh one domain above.

It is solved exactly by dynamic programming over the tree ("tree knapsack"): a domain's table lists
the Pareto points (cost, pods covered) of its subtree, covering capped at ``demand`` (covering more
is never worse: a domain that holds r pods holds fewer), a leaf's table is one point, a domain's
is the min-plus merge of its children's. The merge keeps only points below the best cost found so
far, and at the candidate's own level only points with fewer children than the fewest that can
cover the demand (``k*``, the greedy count: no solution uses more than the optimum's ``k*``, and
every partial point with ``k*`` children that does not cover is dead). Candidates are tried in
order of a lower bound (``k*`` children, each holding at least one domain of every level below),
and skipped once the bound cannot beat the best.

Among the optimal choices, the tightest are taken: the assignment walks a domain's children from
the one with the least free capacity (pods of this shape, then free GPUs, then index) and gives
each as many pods as an optimal completion allows, so partly used domains fill up and empty ones
stay whole for the next big gang. Inside a leaf, ``fill_leaf`` uses the fewest nodes, then the
tightest nodes.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Sequence

from .network import Network

__all__ = ["choose_domain", "fill_leaf"]

Table = tuple[list[int], list[int]]  # (costs, pods covered), both ascending: the Pareto points, (0, 0) first
_EMPTY: Table = ([0], [0])
_INFINITE = float("inf")


def choose_domain(network: Network, caps: Sequence[Sequence[int]], free: Sequence[Sequence[int]], level: int,
                  demand: int) -> tuple[int, dict[int, int]] | None:
    """The best domain of ``level`` (>= 1) for ``demand`` pods and the pods per leaf; None when no
    domain of that level holds them. ``caps[l][d]``: pods of the shape domain ``d`` of level ``l``
    holds (level 0: nodes); ``free[l][d]``: its free GPUs (the tightness tie-break)."""
    return _Search(network, caps, free, demand).best(level)


def fill_leaf(network: Network, caps: Sequence[int], free: Sequence[int], leaf: int, pods: int) -> dict[int, int]:
    """Pods per node for ``pods`` pods in ``leaf``: the fewest nodes, then the least free GPUs on them
    (tightest nodes: large free groups stay whole), then the lowest indices. ``caps``/``free``: per node."""
    nodes = sorted((n for n in network.children[1][leaf] if caps[n] > 0), key=lambda n: (caps[n], free[n], n))
    # best[q] = (nodes, free GPUs, chosen) covering at least q pods with the nodes seen so far
    best: list[tuple[int, int, tuple[int, ...]] | None] = [(0, 0, ())] + [None] * pods
    for node in nodes:
        for q in range(pods, 0, -1):
            before = best[max(0, q - caps[node])]
            if before is None:
                continue
            option = (before[0] + 1, before[1] + free[node], before[2] + (node,))
            current = best[q]
            if current is None or option[:2] < current[:2]:
                best[q] = option
    chosen = best[pods]
    if chosen is None:
        raise ValueError(f"{network.describe(1, leaf)} holds fewer than {pods} pods")
    placed, left = {}, pods
    for node in sorted(chosen[2], key=lambda n: (caps[n], free[n], n)):
        placed[node] = min(caps[node], left)
        left -= placed[node]
    return {node: count for node, count in placed.items() if count}


class _Search:
    def __init__(self, network: Network, caps: Sequence[Sequence[int]], free: Sequence[Sequence[int]], demand: int) -> None:
        self.network, self.caps, self.free, self.demand = network, caps, free, demand
        self.weight = [0, 1]
        for level in range(1, network.top):
            self.weight.append(self.weight[level] * (network.count(level) + 1))
        self.tables: dict[tuple[int, int], Table] = {}

    def best(self, level: int) -> tuple[int, dict[int, int]] | None:
        demand, caps = self.demand, self.caps[level]
        candidates = [d for d in range(self.network.count(level)) if caps[d] >= demand]
        if level == 1:
            if not candidates:
                return None
            leaf = min(candidates, key=self._tightness(1))
            return leaf, {leaf: demand}
        ranked = sorted(((self._fewest_children(level, d), d) for d in candidates),
                        key=lambda kd: (kd[0], caps[kd[1]], self.free[level][kd[1]], kd[1]))
        below = sum(self.weight[1:level])
        incumbent: tuple[int, int] | None = None  # (cost, domain)
        for fewest, domain in ranked:
            bound = _INFINITE if incumbent is None else incumbent[0] - 1
            if self.weight[level] + fewest * below > bound:
                continue
            cost = self._cost(level, domain, fewest, bound)
            if cost is not None:
                incumbent = (cost, domain)
        if incumbent is None:
            return None
        leaves: dict[int, int] = {}
        self._assign(level, incumbent[1], demand, incumbent[0], leaves)
        return incumbent[1], leaves

    def _tightness(self, level: int) -> Callable[[int], tuple[int, int, int]]:
        caps, free = self.caps[level], self.free[level]
        return lambda d: (caps[d], free[d], d)

    def _fewest_children(self, level: int, domain: int) -> int:
        """k*: the fewest children of ``domain`` that hold the demand (the largest first)."""
        caps, held = self.caps[level - 1], 0
        for count, cap in enumerate(sorted((caps[c] for c in self.network.children[level][domain]), reverse=True), 1):
            held += cap
            if held >= self.demand:
                return count
        raise ValueError("a candidate domain holds the demand")

    def _cost(self, level: int, domain: int, fewest: int, bound: float) -> int | None:
        """The least cost of ``demand`` pods in the candidate ``domain``, or None above ``bound``."""
        inner = bound - self.weight[level]
        merged = _EMPTY
        for child in self._children(level, domain):
            merged = _merge(merged, self._table(level - 1, child, inner), self.demand, inner, fewest, self.weight[level - 1])
        found = _lookup(merged, self.demand)
        return None if found is None else found + self.weight[level]

    def _children(self, level: int, domain: int) -> list[int]:
        caps = self.caps[level - 1]
        return sorted((c for c in self.network.children[level][domain] if caps[c] > 0), key=self._tightness(level - 1))

    def _table(self, level: int, domain: int, bound: float) -> Table:
        """The domain's Pareto table, its own weight included, points above ``bound`` left out
        (bounds only fall during one search, so a table made earlier stays valid)."""
        key = (level, domain)
        if key in self.tables:
            return self.tables[key]
        own = self.weight[level]
        if level == 1:
            table: Table = ([0, own], [0, min(self.caps[1][domain], self.demand)])
        else:
            merged = _EMPTY
            for child in self._children(level, domain):
                merged = _merge(merged, self._table(level - 1, child, bound - own), self.demand, bound - own, None, 0)
            table = ([0] + [cost + own for cost in merged[0][1:]], merged[1])
        self.tables[key] = table
        return table

    def _assign(self, level: int, domain: int, pods: int, target: int, leaves: dict[int, int]) -> None:
        """Spread ``pods`` over the domain at cost ``target`` (optimal), tightest children first."""
        if level == 1:
            leaves[domain] = pods
            return
        left_cost = target - self.weight[level]
        children = self._children(level, domain)
        tables = [self._table(level - 1, child, left_cost) for child in children]
        suffix = [_EMPTY]
        for table in reversed(tables):
            suffix.append(_merge(table, suffix[-1], pods, left_cost, None, 0))
        suffix.reverse()
        left = pods
        for i, child in enumerate(children):
            if left == 0:
                break
            for take in range(min(self.caps[level - 1][child], left), 0, -1):
                cost = _lookup(tables[i], take)
                if cost is not None and cost <= left_cost and _lookup(suffix[i + 1], left - take) == left_cost - cost:
                    self._assign(level - 1, child, take, cost, leaves)
                    left, left_cost = left - take, left_cost - cost
                    break
        if left or left_cost:
            raise AssertionError(f"no optimal completion in {self.network.describe(level, domain)}")


def _merge(a: Table, b: Table, cap: int, bound: float, fewest: int | None, unit: int) -> Table:
    """The min-plus merge of two tables (any split of the pods), covering capped at ``cap``, costs
    above ``bound`` left out; with ``fewest`` (k*, the candidate's level): points that use ``fewest``
    or more children (cost // ``unit``) without covering ``cap`` are left out too."""
    best: dict[int, int] = {}
    b_costs, b_pods = b
    for cost_a, pods_a in zip(*a, strict=True):
        for cost_b, pods_b in zip(b_costs, b_pods, strict=True):
            cost = cost_a + cost_b
            if cost > bound:
                break
            pods = pods_a + pods_b
            if pods >= cap:
                pods = cap
            elif fewest is not None and cost // unit >= fewest:
                continue
            if cost < best.get(pods, _INFINITE):
                best[pods] = cost
    costs, covered = [0], [0]
    for pods, cost in sorted(best.items(), key=lambda pc: (pc[1], -pc[0])):
        if pods > covered[-1]:
            costs.append(cost)
            covered.append(pods)
    return costs, covered


def _lookup(table: Table, pods: int) -> int | None:
    """The least cost covering at least ``pods``; None when the table covers fewer."""
    costs, covered = table
    at = bisect_left(covered, pods)
    return costs[at] if at < len(covered) else None
