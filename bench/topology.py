#!/usr/bin/env python3
"""GPU allocator benchmark: every built-in scenario, in one process, no agent and no driver.

Topologies come from the scenarios' data (``runtimekit.topology.offline``, what ``runtimekit topo
allocate --scenario`` uses): dgx-h100, dgx-a100, hgx-h200 (NVSwitch: every GPU pair NVLinked
alike), pcie-inference (8 PCIe GPUs, two per switch, two switches per socket) and dgx-2 (16 V100,
NVSwitch). Those present in runtimekit/sim/scenarios/ are run.

1. Optimality: ``allocate`` against ``brute_force`` (every subset; the same key: cost, then the
   tie-break, then indices), case by case. 8-GPU nodes: every free set (all 255) × every request
   size, once with no required GPU and once with a random required subset. 16-GPU nodes: a random
   sample of (free set, size, required) (``--sample``). Reported: cases equal / cases.
2. Latency: wall time of every ``allocate(..., with_nics=True)`` call of (1), p50 and p99 in ms per
   node size (8, 16). Pure Python, one core.
3. Fragmentation left behind, over random request/release traces (the same trace for every policy:
   sizes 1 (40 %), 2 (30 %), 4 (20 %), 8 (10 %), a request that does not fit is skipped, each step
   releases a random running job with probability 0.5, so the free count is the same whatever
   the policy). After every step, for each size s in 2, 4, 8 that fits the free GPUs: *fragmented*
   when the free GPUs' best s-set costs more than the best s-set of the empty node (the free GPUs
   can no longer give s GPUs as near as the node can). fragmentation = fragmented / checks.
   Policies: ours (``allocate``); first-fit (the lowest free indices); go-gpuallocator's besteffort
   (gpuallocator/besteffort_policy.go @1ef5d10, ../shared/reference/topology.md §1: pair score =
   PCIe path score — SingleSwitch 50 when the GPUs share their nearest switch, MultiSwitch 40 when
   they share one above, SameCPU 20 on the same NUMA node, CrossCPU 10 otherwise (no host-bridge
   level in our places) — plus 100·N for N direct NVLinks, 0 on NVSwitch machines as upstream
   sees them; the highest-scoring partition of the padded free list into sets of the request size,
   first found wins, then its highest-scoring set; size 1 takes the first free GPU). Where its
   pick holds padding (upstream panics, PR #80) the kubelet falls back to its own order: first-fit,
   counted as ``gpuallocator_padding``.

The last line is ``RESULT key=value ...``.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from itertools import combinations
from pathlib import Path

from runtimekit.sim import list_scenarios, load_scenario
from runtimekit.state.topology import GpuPlace, Topology
from runtimekit.topology.allocator import allocate, brute_force
from runtimekit.topology.offline import topology_from_scenario

sys.path.insert(0, str(Path(__file__).resolve().parent / "support"))  # the benchmarks' shared modules, not benchmarks
from ranks import nearest_rank  # noqa: E402

SCENARIOS = ("dgx-h100", "dgx-a100", "hgx-h200", "pcie-inference", "dgx-2")
SIZES = ((1, 0.4), (2, 0.3), (4, 0.2), (8, 0.1))
RELEASE = 0.5
CHECKED = (2, 4, 8)
Policy = Callable[[Topology, Sequence[int], int], tuple[int, ...]]


def optimality(topology: Topology, rng: random.Random, sample: int) -> tuple[int, int, list[float]]:
    """(cases, cases equal to brute force, allocate's latencies in seconds)."""
    n = len(topology.gpus)
    if n <= 8:
        cases: list[tuple[list[int], int, list[int]]] = [(list(free), k, []) for m in range(1, n + 1) for free in combinations(range(n), m) for k in range(1, m + 1)]
        cases += [(free, k, rng.sample(free, rng.randint(1, k))) for free, k, _ in list(cases)]
    else:
        cases = []
        for _ in range(sample):
            free = sorted(rng.sample(range(n), rng.randint(1, n)))
            k = rng.randint(1, len(free))
            cases.append((free, k, rng.sample(free, rng.randint(0, min(k, 2)))))
    answers, latencies = [], []
    for free, k, required in cases:  # timed apart from brute force, whose garbage would land in these timings
        start = time.perf_counter()
        answers.append(allocate(topology, free, k, required=required, with_nics=True))
        latencies.append(time.perf_counter() - start)
    equal = 0
    for (free, k, required), got in zip(cases, answers, strict=True):
        reference = brute_force(topology, free, k, required)
        equal += (got.gpus, got.cost) == (reference.gpus, reference.cost)
    return len(cases), equal, latencies


def ours(topology: Topology, free: Sequence[int], k: int) -> tuple[int, ...]:
    return allocate(topology, free, k).gpus


def first_fit(topology: Topology, free: Sequence[int], k: int) -> tuple[int, ...]:
    return tuple(sorted(free)[:k])


class GpuAllocator:
    """go-gpuallocator's besteffort policy over our places (see the module docstring)."""

    def __init__(self, topology: Topology) -> None:
        self.gpus = {gpu.ref.index: gpu for gpu in topology.gpus}
        self.memo: dict[tuple[tuple[int | None, ...], int], tuple[int, tuple[tuple[int | None, ...], ...]]] = {}
        self.padding_picks = 0

    def pair_score(self, a: int | None, b: int | None) -> int:
        if a is None or b is None:
            return 0
        ga, gb = self.gpus[a], self.gpus[b]
        return _pcie_score(ga, gb) + (0 if ga.nvswitch else 100 * ga.nvlinks.get(b, 0))

    def set_score(self, gpus: Sequence[int | None]) -> int:
        return sum(self.pair_score(a, b) for a, b in combinations(gpus, 2))

    def partition(self, devices: tuple[int | None, ...], size: int) -> tuple[int, tuple[tuple[int | None, ...], ...]]:
        """The best-scoring partition of ``devices`` into sets of ``size``, the first found in
        upstream's enumeration order (the first device fixed, the rest as iterateGPUSets)."""
        if len(devices) == size:
            return self.set_score(devices), (devices,)
        key = (devices, size)
        if key in self.memo:
            return self.memo[key]
        padding = devices.count(None)
        first, rest = devices[0], devices[1:]
        best: tuple[int, tuple[tuple[int | None, ...], ...]] | None = None
        for chosen in combinations(range(len(rest)), size - 1):
            group = (first, *(rest[i] for i in chosen))
            if group.count(None) not in (0, padding):
                continue
            score, others = self.partition(tuple(d for i, d in enumerate(rest) if i not in chosen), size)
            score += self.set_score(group)
            if best is None or score > best[0]:
                best = (score, (group, *others))
        assert best is not None
        self.memo[key] = best
        return best

    def __call__(self, topology: Topology, free: Sequence[int], k: int) -> tuple[int, ...]:
        ordered = sorted(free)
        if k == 1:
            return (ordered[0],)
        padded = tuple([*ordered, *[None] * (-len(ordered) % k)])
        _, sets = self.partition(padded, k)
        best = max(sets, key=self.set_score)  # max keeps the first of equals, as upstream's strict >
        if None in best:
            self.padding_picks += 1
            return first_fit(topology, free, k)
        return tuple(sorted(g for g in best if g is not None))


def _pcie_score(a: GpuPlace, b: GpuPlace) -> int:
    if a.pcie_switches and b.pcie_switches and a.pcie_switches[-1] == b.pcie_switches[-1]:
        return 50
    if set(a.pcie_switches) & set(b.pcie_switches):
        return 40
    return 20 if a.numa_node is not None and a.numa_node == b.numa_node else 10


def trace(rng: random.Random, n: int, steps: int) -> list[tuple[str, int, int]]:
    """("request", job, size) / ("release", job, 0) events whose free counts never go negative."""
    events: list[tuple[str, int, int]] = []
    running: dict[int, int] = {}
    free, job = n, 0
    for _ in range(steps):
        if running and rng.random() < RELEASE:
            gone = rng.choice(sorted(running))
            free += running.pop(gone)
            events.append(("release", gone, 0))
            continue
        size = rng.choices([s for s, _ in SIZES], weights=[w for _, w in SIZES])[0]
        if size <= free:
            job += 1
            running[job] = size
            free -= size
            events.append(("request", job, size))
    return events


def fragmentation(topology: Topology, policy: Policy, events: list[tuple[str, int, int]],
                  best: Callable[[tuple[int, ...], int], int]) -> tuple[int, int]:
    """(fragmented checks, checks) after each event of ``events`` placed by ``policy``."""
    free, jobs, fragmented, checks = set(range(len(topology.gpus))), {}, 0, 0
    ideal = {s: best(tuple(sorted(free)), s) for s in CHECKED if s <= len(free)}
    for kind, job, size in events:
        if kind == "request":
            jobs[job] = policy(topology, sorted(free), size)
            free -= set(jobs[job])
        else:
            free |= set(jobs.pop(job))
        for s in CHECKED:
            if s <= len(free):
                checks += 1
                fragmented += best(tuple(sorted(free)), s) > ideal[s]
    return fragmented, checks


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smaller run (under 30 s)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--sample", type=int, help="random cases on 16-GPU nodes (default 2000, quick 25)")
    parser.add_argument("--traces", type=int, help="traces per scenario (default 20, quick 2)")
    parser.add_argument("--steps", type=int, help="events drawn per trace (default 500, quick 120)")
    args = parser.parse_args(argv)
    sample = args.sample or (25 if args.quick else 2000)
    traces, steps = args.traces or (2 if args.quick else 20), args.steps or (120 if args.quick else 500)
    rng = random.Random(args.seed)
    present = [name for name in SCENARIOS if name in list_scenarios()]
    missing = sorted(set(SCENARIOS) - set(present))
    if missing:
        print(f"scenarios missing (skipped): {', '.join(missing)}", file=sys.stderr)
    cases = equal = 0
    latencies: dict[int, list[float]] = {}
    frag = {"ours": [0, 0], "firstfit": [0, 0], "gpuallocator": [0, 0]}
    padding_picks = 0
    print(f"{'scenario':<16}{'GPUs':>5}{'cases':>8}{'optimal':>9}{'p50 ms':>9}{'p99 ms':>9}   frag ours / first-fit / gpuallocator")
    for name in present:
        topology = topology_from_scenario(load_scenario(name))
        n = len(topology.gpus)
        done, same, times = optimality(topology, rng, sample)
        cases, equal = cases + done, equal + same
        latencies.setdefault(n, []).extend(times)
        costs: dict[tuple[tuple[int, ...], int], int] = {}

        def best(free: tuple[int, ...], s: int, topology: Topology = topology, costs: dict = costs) -> int:
            if (free, s) not in costs:
                costs[(free, s)] = allocate(topology, free, s).cost
            return costs[(free, s)]

        upstream = GpuAllocator(topology)
        here = {"ours": [0, 0], "firstfit": [0, 0], "gpuallocator": [0, 0]}
        for _ in range(traces):
            events = trace(rng, n, steps)
            for key, policy in (("ours", ours), ("firstfit", first_fit), ("gpuallocator", upstream)):
                got = fragmentation(topology, policy, events, best)
                here[key] = [here[key][0] + got[0], here[key][1] + got[1]]
        padding_picks += upstream.padding_picks
        for key, (bad, total) in here.items():
            frag[key] = [frag[key][0] + bad, frag[key][1] + total]
        ms = sorted(t * 1000 for t in times)
        shares = " / ".join(f"{bad / total:.3f}" for bad, total in here.values())
        print(f"{name:<16}{n:>5}{done:>8}{same / done:>9.3f}{statistics.median(ms):>9.3f}{_p99(ms):>9.3f}   {shares}")
    p99 = {size: _p99(sorted(t * 1000 for t in values)) for size, values in latencies.items()}
    result = [f"optimal={equal / cases:.3f}", f"cases={cases}", f"p99_ms_8={p99.get(8, float('nan')):.3f}",
              f"p99_ms_16={p99.get(16, float('nan')):.3f}"]
    result += [f"frag_{key}={bad / total:.3f}" for key, (bad, total) in frag.items()]
    print("RESULT " + " ".join([*result, f"gpuallocator_padding={padding_picks}"]))
    return 0


def _p99(sorted_values: list[float]) -> float:
    return nearest_rank(sorted_values, 0.99)


if __name__ == "__main__":
    sys.exit(main())
