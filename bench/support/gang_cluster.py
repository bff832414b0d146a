"""The simulated cluster of bench/gang.py, the replay that judges every policy's output, and the two
policies the placer is compared with (bench/gang.py's docstring says what each one does).

Nodes are numbered leaf by leaf; a node's domain at a level is arithmetic on its number. Every node
is an HGX server: 8 GPUs on one NVSwitch (one NVLink group, so a node's free GPU count is all a pod
of up to 8 GPUs needs, offer.py's rule) and 8 RDMA NICs.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

Mapping_ = dict[str, int]  # pod -> node
LEVELS = 5  # 0 node, 1 leaf, 2 spine, 3 block, 4 cluster


@dataclass(frozen=True)
class ClusterShape:
    nodes: int
    block: int
    spine: int
    leaf: int
    gpus: int = 8
    nics: int = 8
    roots: int = 4

    def domain(self, node: int, level: int) -> int:
        return node // (1, self.leaf, self.spine, self.block, self.nodes)[level]

    def pods_empty(self, gpus: int) -> int:
        """Pods of ``gpus`` GPUs and as many NICs an empty node holds."""
        return min(self.gpus // gpus, self.nics // gpus)

    def lower_bound(self, count: int, gpus: int) -> int:
        """The lowest level one domain of which holds ``count`` pods on the empty cluster."""
        sizes = (1, self.leaf, self.spine, self.block, self.nodes)
        return next((level for level in range(LEVELS) if sizes[level] * self.pods_empty(gpus) >= count), LEVELS - 1)

    def fewest_leaves(self, count: int, gpus: int) -> int:
        return -(-count // (self.leaf * self.pods_empty(gpus)))

    def spanned(self, nodes: Iterable[int]) -> int:
        nodes = set(nodes)
        return next(level for level in range(LEVELS) if len({self.domain(n, level) for n in nodes}) == 1)


@dataclass(frozen=True)
class Gang:
    key: str
    pods: int
    gpus: int  # per worker; as many NICs
    launcher: bool  # one more pod, asking no device

    def names(self) -> list[str]:
        return [f"w{i}" for i in range(self.pods)] + ["launcher"] * self.launcher

    def need(self, pod: str) -> int:
        return 0 if pod == "launcher" else self.gpus


class Replay:
    """The nodes' free GPUs and NICs, changed only by replaying what a policy placed; what it finds
    wrong: ``split`` (a gang split or partly placed), ``double_booked`` (a pod given GPUs or NICs
    already taken)."""

    def __init__(self, cluster: ClusterShape) -> None:
        self.cluster = cluster
        self.gpus, self.nics = [cluster.gpus] * cluster.nodes, [cluster.nics] * cluster.nodes
        self.held: dict[str, list[tuple[int, int]]] = {}  # key -> (node, GPUs = NICs) per pod
        self.split = self.double_booked = 0

    def apply(self, gang: Gang, mapping: Mapping_) -> None:
        self.split += set(mapping) != set(gang.names())
        held = self.held[gang.key] = []
        for pod, node in mapping.items():
            need = gang.need(pod)
            self.double_booked += self.gpus[node] < need or self.nics[node] < need
            self.gpus[node] -= need
            self.nics[node] -= need
            held.append((node, need))

    def leave(self, key: str) -> None:
        for node, need in self.held.pop(key, []):
            self.gpus[node] += need
            self.nics[node] += need

    def fragmentation(self) -> tuple[float, float]:
        """(free GPUs on partly used nodes, free GPUs outside wholly free leaves), each over all free GPUs."""
        full, leaf, free = self.cluster.gpus, self.cluster.leaf, self.gpus
        total = sum(free) or 1
        partly = sum(f for f in free if 0 < f < full)
        whole = sum(sum(free[i:i + leaf]) for i in range(0, self.cluster.nodes, leaf) if min(free[i:i + leaf]) == full)
        return partly / total, 1 - whole / total


class FirstFit:
    """Each pod on the first node in list order whose free GPUs hold it (a max-tree finds it in
    O(log n)); no gang: a gang is left as far as it got."""

    name = "first-fit"

    def __init__(self, cluster: ClusterShape) -> None:
        self.size = 1 << (cluster.nodes - 1).bit_length()
        self.tree = [0] * (2 * self.size)
        for node in range(cluster.nodes):
            self._set(node, cluster.gpus)
        self.held: dict[str, list[tuple[int, int]]] = {}

    def _set(self, node: int, free: int) -> None:
        i = node + self.size
        self.tree[i] = free
        while i > 1:
            i //= 2
            self.tree[i] = max(self.tree[2 * i], self.tree[2 * i + 1])

    def _first(self, gpus: int) -> int | None:
        if self.tree[1] < gpus:
            return None
        i = 1
        while i < self.size:
            i = 2 * i if self.tree[2 * i] >= gpus else 2 * i + 1
        return i - self.size

    def place(self, gang: Gang) -> Mapping_ | None:
        mapping: Mapping_ = {}
        held = self.held[gang.key] = []
        for i in range(gang.pods):  # NICs equal GPUs on every node and pod: the GPU count decides
            node = self._first(gang.gpus)
            if node is None:
                break
            self._set(node, self.tree[node + self.size] - gang.gpus)
            mapping[f"w{i}"] = node
            held.append((node, gang.gpus))
        if gang.launcher and mapping:
            mapping["launcher"] = mapping["w0"]
        return mapping or None

    def leave(self, key: str) -> None:
        for node, gpus in self.held.pop(key, []):
            self._set(node, self.tree[node + self.size] + gpus)


class KueueBestFit:
    """Kueue TAS BestFit (bench/gang.py's docstring) on per-node free GPU and NIC counts."""

    name = "kueue-bestfit"

    def __init__(self, cluster: ClusterShape) -> None:
        self.cluster = cluster
        self.gpus, self.nics = [cluster.gpus] * cluster.nodes, [cluster.nics] * cluster.nodes
        self.held: dict[str, tuple[int, list[int]]] = {}  # key -> (GPUs a pod, its nodes)
        sizes = (1, cluster.leaf, cluster.spine, cluster.block)
        self.children: list[list[list[int]]] = [[[] for _ in range(cluster.nodes // size)] for size in sizes]
        for level in range(1, 4):
            for child in range(len(self.children[level - 1])):
                self.children[level][cluster.domain(child * sizes[level - 1], level)].append(child)

    def place(self, gang: Gang) -> Mapping_ | None:
        need, count = gang.gpus, gang.pods
        states = [[min(g // need, n // need) for g, n in zip(self.gpus, self.nics, strict=True)]]
        for level in range(1, 4):
            states.append([sum(states[level - 1][c] for c in kids) for kids in self.children[level]])
        chosen: list[tuple[int, int]] | None = None  # (domain, pods) at ``level``
        for level in range(4):  # findLevelWithFitDomains, from the hostname level up
            ordered = most_first(range(len(states[level])), states[level])
            if states[level][ordered[0]] >= count:
                chosen = [(ordered[best_fit(ordered, states[level], count)], count)]
                break
        else:
            level, chosen = 3, to_minimum(ordered, states[3], count)
        if chosen is None:
            return None
        while level > 0:
            kids = [c for domain, _ in chosen for c in self.children[level][domain]]
            level -= 1
            chosen = to_minimum(most_first(kids, states[level]), states[level], count)
            if chosen is None:
                return None
        workers = [node for node, pods in sorted(chosen) for _ in range(pods)]
        mapping = {f"w{i}": node for i, node in enumerate(workers)}
        if gang.launcher:
            mapping["launcher"] = workers[0]
        self.held[gang.key] = (need, workers)
        for node in workers:
            self.gpus[node] -= need
            self.nics[node] -= need
        return mapping

    def leave(self, key: str) -> None:
        need, workers = self.held.pop(key, (0, []))
        for node in workers:
            self.gpus[node] += need
            self.nics[node] += need


def most_first(domains: Iterable[int], state: Sequence[int]) -> list[int]:
    """Domains by capacity, the most first, ties by position (Kueue's sortedDomains for BestFit)."""
    return sorted(domains, key=lambda d: -state[d])


def best_fit(ordered: Sequence[int], state: Sequence[int], count: int) -> int:
    """findBestFitDomainIdx: the position of the first domain of the least capacity that holds ``count``."""
    best = 0
    for i, domain in enumerate(ordered):
        if state[domain] >= count and state[domain] != state[ordered[best]]:
            best = i
    return best


def to_minimum(ordered: Sequence[int], state: Sequence[int], count: int) -> list[tuple[int, int]] | None:
    """updateCountsToMinimum: (domain, pods) taking the most free first, the last one the tightest
    that holds the rest; None when they hold fewer than ``count``."""
    taken, left = [], count
    for i, domain in enumerate(ordered):
        if state[domain] >= left:
            taken.append((ordered[i + best_fit(ordered[i:], state, left)], left))
            return taken
        if state[domain] == 0:
            return None
        taken.append((domain, state[domain]))
        left -= state[domain]
    return None
