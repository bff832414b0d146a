"""The best-connected k GPUs of a free set, each with its nearest free RDMA NIC. Pure: no I/O, no
clock, no state; the same answer for the same question.

**Objective.** The chosen set ``S`` has the least total pairwise distance, Σ ``Link.cost`` over its
pairs (``runtimekit.state.topology``: any NVLink < the same PCIe switch < the same NUMA node < the
same socket < across sockets).

**Tie-break.** Among sets of equal cost, first the least *PCIe-side* cost: Σ over the chosen
pairs of ``distance.pcie_link``'s cost (the nearest level the two share with their NVLinks
ignored; for a pair without NVLink it is the pair's own cost). On an NVSwitch machine every pair
is NVLinked alike, so this is what keeps a set under one PCIe switch, NUMA node, socket. Then the
set that splits the fewest pairs between the GPUs taken and the free GPUs left, counted per
*split kind*, nearest kind first: the NVLink kinds (a pair's NVLink cost, more links first), then
the PCIe-side levels (every split pair counts at its PCIe-side level, NVLinked or not). So an
NVLink pair, a PCIe switch, a NUMA node, a socket is taken or left whole where the cost allows,
and when a group must be split, the smallest one is: one GPU is taken where it leaves larger
groups whole (not the first free one, as go-gpuallocator's besteffort does), also on NVSwitch
machines, and k GPUs are not taken from a switch whose other GPUs another request could use
whole. Remaining ties: the lexicographically smallest index tuple.

**Search.** Exact, by branch and bound over index-ordered subsets, on one integer objective:
with the split kinds ranked nearest first (``rank`` 0 .. m-1), ``B`` above any number of split
pairs, ``f(a, b)`` = Σ ``B^(m-1-rank(kind))`` over the (one or two) kinds of pair (a, b),
``W2 = B^m`` and ``W1 = W2·(1 + the largest possible PCIe-side cost of a set)``,
``obj(S) = W1·cost(S) + W2·pcie(S) + Σ_{s∈S, x∈F∖S} f(s, x)``, which orders sets exactly as
(cost, PCIe-side cost, split counts) and is pairwise plus per GPU:
``Σ_{pairs of S} (W1·cost + W2·pcie - 2·f) + Σ_{s∈S} Σ_{x∈F} f(s, x)``. The lower bound of a
partial set ``P`` with ``r`` GPUs still to pick from candidates ``C``: ``obj(P)`` plus the ``r``
smallest over ``C`` of ``g(x)`` = x's weight to ``P`` + its own term + half the ``r-1`` smallest
pair weights from x (each new pair is counted half from each end, never more than it weighs).
A greedy set seeds the incumbent. ``brute_force`` enumerates every subset and compares
(cost, PCIe-side cost, split pairs per kind, indices) literally instead: the reference. Both
read the kinds from ``_problem``, the one place that defines them.

**NICs.** With ``with_nics``, each chosen GPU gets one free NIC, each NIC at most once, as an
optimal assignment (Hungarian method) minimising Σ ``nic_links`` cost (same PCIe switch, then NUMA
node, then socket); as many GPUs as there are free NICs get one, the others ``""``. Among NICs of
equal cost, each GPU prefers the one at its own position: the group a GPU and a NIC share is the
nearest PCIe switch above both (else their NUMA node, socket, the node); a GPU at position ``i``
among the topology's GPUs in that group prefers the NIC at position ``i mod (NICs in the group)``
among its NICs (topology order). So on a DGX A100, GPU 1 alone gets mlx5_1, not the mlx5_0 that
GPU 0 would take, and two GPUs under one switch get the NICs in the same order. The preference
never costs distance: Σ cost stays the least.

A pair missing from ``gpu_links`` / ``nic_links`` (discovery could not place it) counts as across
sockets (``MISSING``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from itertools import combinations
from typing import TypeVar

from runtimekit.state.distance import pcie_link
from runtimekit.state.topology import Allocation, AllocationError, GpuPlace, Link, NicPlace, Topology

__all__ = ["Allocation", "AllocationError", "MISSING", "allocate", "brute_force"]

MISSING = Link("system")
_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class _Problem:
    """A validated request: free GPU indices ascending, the positions (into ``free``) of the
    required ones, and by position: the pair costs, the PCIe-side costs, and each pair's split
    kinds (ranks, nearest first, into ``kinds`` kinds; see the module docstring)."""

    free: tuple[int, ...]
    count: int
    required: tuple[int, ...]
    cost: tuple[tuple[int, ...], ...]
    pcie: tuple[tuple[int, ...], ...]
    split: tuple[tuple[tuple[int, ...], ...], ...]
    kinds: int


def allocate(topology: Topology, free: Iterable[int], count: int, *, required: Iterable[int] = (),
             with_nics: bool = False, free_nics: Iterable[str] | None = None) -> Allocation:
    """The best ``count`` GPUs of ``free`` (indices) that include ``required``, and with
    ``with_nics`` their NICs from ``free_nics`` (names; None: every NIC of the topology).
    Raises AllocationError naming ``count``, ``free``, ``required`` or ``free_nics``."""
    problem = _problem(topology, free, count, required)
    nic_names = _free_nics(topology, free_nics) if with_nics else ()
    chosen = tuple(problem.free[p] for p in _search(problem))
    return Allocation(chosen, _assign_nics(topology, chosen, nic_names), _set_cost(problem, chosen))


def brute_force(topology: Topology, free: Iterable[int], count: int, required: Iterable[int] = ()) -> Allocation:
    """The reference: every subset of ``count`` free GPUs holding ``required``, the least
    (cost of the set, pairs split per kind nearest first, indices). No NICs (``""`` each)."""
    problem = _problem(topology, free, count, required)
    must, everyone = set(problem.required), range(len(problem.free))
    best: tuple[int, int, list[int], tuple[int, ...]] | None = None
    for chosen in combinations(everyone, problem.count):
        if must <= set(chosen):
            split = [0] * problem.kinds
            for a in chosen:
                for b in set(everyone) - set(chosen):
                    for kind in problem.split[a][b]:
                        split[kind] += 1
            pairs = list(combinations(chosen, 2))
            key = (sum(problem.cost[a][b] for a, b in pairs), sum(problem.pcie[a][b] for a, b in pairs), split, chosen)
            best = key if best is None or key < best else best
    assert best is not None  # _problem guarantees a subset holding `required` exists
    return Allocation(tuple(problem.free[p] for p in best[3]), ("",) * problem.count, best[0])


def _problem(topology: Topology, free: Iterable[int], count: int, required: Iterable[int]) -> _Problem:
    known = {gpu.ref.index for gpu in topology.gpus}
    free_set, must = set(free), set(required)
    for field, given in (("free", free_set), ("required", must)):
        unknown = sorted(i for i in given if i not in known)
        if unknown:
            raise AllocationError(field, f"GPU {unknown[0]} is not in the topology (GPUs: {_span(known)})")
    taken = sorted(must - free_set)
    if taken:
        raise AllocationError("required", f"GPU {taken[0]} is not free")
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise AllocationError("count", f"must be a whole number of GPUs, at least 1 (got {count!r})")
    if count > len(free_set):
        raise AllocationError("count", f"{count} GPUs asked, {len(free_set)} free")
    if len(must) > count:
        raise AllocationError("required", f"{len(must)} GPUs required, more than count {count}")
    ordered = tuple(sorted(free_set))
    places = {gpu.ref.index: gpu for gpu in topology.gpus}
    link = {(a, b): topology.gpu_links.get((min(a, b), max(a, b)), MISSING) for a in ordered for b in ordered if a != b}
    side = {pair: pcie_link(places[pair[0]], places[pair[1]]) if one.level == "nvlink" else one for pair, one in link.items()}
    nvlink_kinds = sorted({one.cost for one in link.values() if one.level == "nvlink"})
    pcie_kinds = sorted({one.cost for one in side.values()})
    rank = {("nvlink", c): r for r, c in enumerate(nvlink_kinds)} | {("pcie", c): len(nvlink_kinds) + r for r, c in enumerate(pcie_kinds)}

    def kinds_of(pair: tuple[int, int]) -> tuple[int, ...]:
        nvlink = (rank[("nvlink", link[pair].cost)],) if link[pair].level == "nvlink" else ()
        return (*nvlink, rank[("pcie", side[pair].cost)])

    def matrix(value: Callable[[tuple[int, int]], _T], none: _T) -> tuple[tuple[_T, ...], ...]:
        return tuple(tuple(none if a == b else value((a, b)) for b in ordered) for a in ordered)

    return _Problem(ordered, count, tuple(p for p, g in enumerate(ordered) if g in must),
                    matrix(lambda pair: link[pair].cost, 0), matrix(lambda pair: side[pair].cost, 0),
                    matrix(kinds_of, ()), len(rank))


def _span(indices: Iterable[int]) -> str:
    """``0-7`` for a run of indices, ``0,2,5`` otherwise, ``none`` for no GPU."""
    ordered = sorted(indices)
    if not ordered:
        return "none"
    if ordered == list(range(ordered[0], ordered[-1] + 1)):
        return f"{ordered[0]}-{ordered[-1]}"
    return ",".join(map(str, ordered))


def _set_cost(problem: _Problem, gpus: Sequence[int]) -> int:
    pos = {g: p for p, g in enumerate(problem.free)}
    return sum(problem.cost[pos[a]][pos[b]] for a, b in combinations(gpus, 2))


def _search(problem: _Problem) -> tuple[int, ...]:
    """Positions (ascending) of the least (obj, positions) set; see the module docstring."""
    n, cost = len(problem.free), problem.cost
    if problem.count == n:
        return tuple(range(n))
    base_b = problem.count * (n - problem.count) + 1  # B: above the number of pairs a set can split
    w2 = base_b ** problem.kinds  # above any split term
    w1 = w2 * (1 + problem.count * (problem.count - 1) // 2 * max(max(row) for row in problem.pcie))  # above any W2·pcie + split
    f = [[sum(base_b ** (problem.kinds - 1 - kind) for kind in kinds) for kinds in row] for row in problem.split]
    w = [[0 if x == y else w1 * cost[x][y] + w2 * problem.pcie[x][y] - 2 * f[x][y] for y in range(n)] for x in range(n)]
    own = [sum(row) for row in f]
    required = problem.required
    candidates = [p for p in range(n) if p not in required]
    r0 = problem.count - len(required)
    # smallest[x][m]: Σ of the m smallest pair weights from x to another candidate (twice the bound's half)
    smallest = [[0, *_prefix(sorted(w[x][y] for y in candidates if y != x))] for x in range(n)]
    acc = [sum(w[x][p] for p in required) for x in range(n)]
    base = sum(w[a][b] for a, b in combinations(required, 2)) + sum(own[p] for p in required)
    best_obj, best = _greedy(w, own, required, candidates, r0, acc, base)

    def visit(chosen: list[int], acc: list[int], base: int, start: int, r: int) -> None:
        nonlocal best_obj, best
        if r == 0:
            key = tuple(sorted((*required, *chosen)))
            if (base, key) < (best_obj, best):
                best_obj, best = base, key
            return
        pool = candidates[start:]
        if len(pool) < r:
            return
        gains = sorted(2 * (acc[x] + own[x]) + smallest[x][r - 1] for x in pool)
        bound = 2 * base + sum(gains[:r])
        if bound > 2 * best_obj or (bound == 2 * best_obj and tuple(sorted((*required, *chosen, *pool[:r]))) >= best):
            return
        for i in range(len(pool) - r + 1):
            x = pool[i]
            row = w[x]
            visit(chosen + [x], [a + row[y] for y, a in enumerate(acc)], base + acc[x] + own[x], start + i + 1, r - 1)

    visit([], acc, base, 0, r0)
    return best


def _prefix(values: Iterable[int]) -> list[int]:
    total, out = 0, []
    for v in values:
        total += v
        out.append(total)
    return out


def _greedy(w: list[list[int]], own: list[int], required: tuple[int, ...], candidates: list[int], r: int,
            acc: list[int], base: int) -> tuple[int, tuple[int, ...]]:
    """An incumbent: from each candidate, add the GPU that raises obj least until r are chosen."""
    best: tuple[int, tuple[int, ...]] | None = None
    for first in (candidates if r else candidates[:1]):
        chosen: list[int] = []
        inc, total = list(acc), base
        for _ in range(r):
            x = first if not chosen else min((c for c in candidates if c not in chosen), key=lambda c: inc[c] + own[c])
            chosen.append(x)
            total += inc[x] + own[x]
            inc = [a + w[x][y] for y, a in enumerate(inc)]
        key = (total, tuple(sorted((*required, *chosen))))
        best = key if best is None or key < best else best
    assert best is not None  # candidates is non-empty: count < number free
    return best


def _free_nics(topology: Topology, free_nics: Iterable[str] | None) -> tuple[str, ...]:
    names = [nic.name for nic in topology.nics]
    if free_nics is None:
        return tuple(names)
    given = set(free_nics)
    unknown = sorted(given - set(names))
    if unknown:
        raise AllocationError("free_nics", f"NIC {unknown[0]!r} is not in the topology (NICs: {', '.join(names) or 'none'})")
    return tuple(name for name in names if name in given)


def _assign_nics(topology: Topology, gpus: tuple[int, ...], nics: tuple[str, ...]) -> tuple[str, ...]:
    """Each GPU's NIC (``""``: none) in an assignment of least Σ nic_links cost."""
    if not nics:
        return ("",) * len(gpus)
    scale = len(gpus) + 1  # above any sum of preferences: distance first
    cost = [[topology.nic_links.get((g, nic), MISSING).cost * scale + _off_position(topology, g, nic) for nic in nics]
            for g in gpus]
    if len(gpus) <= len(nics):
        return tuple(nics[j] for j in _hungarian(cost))
    by_nic = _hungarian([list(col) for col in zip(*cost, strict=True)])
    out = [""] * len(gpus)
    for j, row in enumerate(by_nic):
        out[row] = nics[j]
    return tuple(out)


def _off_position(topology: Topology, gpu: int, nic: str) -> int:
    """0 when ``nic`` is at ``gpu``'s position in the group they share (module docstring), else 1."""
    place = next(one for one in topology.gpus if one.ref.index == gpu)
    card = next(one for one in topology.nics if one.name == nic)
    switches = [switch for switch in card.pcie_switches if switch in place.pcie_switches]
    member: Callable[[GpuPlace | NicPlace], bool]
    if switches:
        member = lambda one: switches[-1] in one.pcie_switches  # noqa: E731
    elif place.numa_node is not None and place.numa_node == card.numa_node:
        member = lambda one: one.numa_node == place.numa_node  # noqa: E731
    elif place.socket is not None and place.socket == card.socket:
        member = lambda one: one.socket == place.socket  # noqa: E731
    else:
        member = lambda one: True  # noqa: E731
    gpus = [one.ref.index for one in topology.gpus if member(one)]
    names = [one.name for one in topology.nics if member(one)]
    return 0 if gpus.index(gpu) % len(names) == names.index(nic) else 1


def _hungarian(cost: list[list[int]]) -> list[int]:
    """The column of each row in a least-cost assignment, rows ≤ columns (Kuhn-Munkres with
    potentials, O(rows²·columns); the e-maxx formulation)."""
    n, m = len(cost), len(cost[0])
    inf = 1 << 62  # above any reduced cost
    u, v, match, way = [0] * (n + 1), [0] * (m + 1), [0] * (m + 1), [0] * (m + 1)
    for i in range(1, n + 1):
        match[0], j0 = i, 0
        minv, used = [inf] * (m + 1), [False] * (m + 1)
        while match[j0]:
            used[j0] = True
            i0, delta, j1 = match[j0], inf, 0
            for j in range(1, m + 1):
                if not used[j]:
                    cur = cost[i0 - 1][j - 1] - u[i0] - v[j]
                    if cur < minv[j]:
                        minv[j], way[j] = cur, j0
                    if minv[j] < delta:
                        delta, j1 = minv[j], j
            for j in range(m + 1):
                if used[j]:
                    u[match[j]] += delta
                    v[j] -= delta
                else:
                    minv[j] -= delta
            j0 = j1
        while j0:
            j1 = way[j0]
            match[j0] = match[j1]
            j0 = j1
    out = [0] * n
    for j in range(1, m + 1):
        if match[j]:
            out[match[j] - 1] = j - 1
    return out
