#!/usr/bin/env python3
"""Gang placement benchmark: the placer (kube/gang/placer.py) against independent per-pod
first-fit and a Kueue-style BestFit, on clusters of 4,096 and 16,384 nodes, in one process.

Clusters (bench/support/gang_cluster.py): nodes of 8 GPUs and 8 RDMA NICs (2 on each of 4 PCIe roots);
three tiers, blocks of 1,024 nodes, spines of 128, leaves of 16 (``--block``, ``--spine``,
``--leaf``), under Topograph's labels; nodes listed leaf by leaf (first-fit's order). Every node
is an HGX server (one NVLink group of 8), so counting a node's free GPUs as one number, as the
baselines do, is exact here; what NVLink groups and NIC roots change is tested against brute
force in tests/gang, not measured here.

Trace (seeded, one per cluster, the same for every policy): gangs arrive and leave at random. A
gang has 2^k pods, k drawn evenly from 1..9 (2-512 pods); its pods ask 8 GPUs + 8 NICs (55 %),
4 + 4 (15 %), 2 + 2 (15 %) or 1 + 1 (15 %); 30 % of gangs add a launcher pod asking no device (a
JobSet's). The **offered load** is the GPUs of the gangs present had every arrival been placed;
while it is below ``--load`` (0.9) a gang arrives with probability 0.75, else a random present
gang leaves; at or above it, one leaves. Everything is measured after the warm-up (the first time
the offered load reaches ``--load``). A gang refused is lost (no queue); its departure is a no-op.

Policies:
- **ours**: ``Placer.place`` then ``reserve``; ``release`` when the gang leaves.
- **first-fit**: each pod on the first node in list order with room, independently (no gang, no
  topology): a gang that does not fit whole is left partly placed, holding what it got.
- **kueue-bestfit**: Kueue TAS's BestFit as ``pkg/cache/tas_flavor_snapshot.go`` computes a
  PodSet's assignment (``podset-preferred-topology`` at the hostname level, so it climbs to the
  lowest level where one domain fits): pods per node from free GPUs and NICs as scalar counts,
  summed up the tree; at the lowest level where the largest domain fits, the fitting domain with
  the least capacity (``findBestFitDomainIdx``); then, level by level down, the children of the
  chosen domains sorted by capacity, most first, taken whole until the rest fits one, which is the
  tightest that does (``updateCountsToMinimum``); at the top, with no domain fitting, the same
  greedy across blocks; ties in capacity go by position. All or nothing. Launchers go with the
  first worker (baselines; ours places them itself, on its workers' nodes).

Measured per cluster and policy:
- **violations**, found by replaying each policy's output (pod -> node) against the nodes'
  devices, independently of the policy: gangs split or partly placed, pods given devices already
  taken, and for ours a tiers spanned or lower bound that disagrees with the replay's own count;
- **at lower bound**: the share of gangs placed whose tiers spanned (the level of the lowest common
  domain of their workers' nodes: 0 node, 1 leaf, 2 spine, 3 block, 4 cluster) equals the lower
  bound (the lowest level one domain of which holds the gang on the empty cluster);
- **leaves**: per gang placed, leaves used / the fewest leaves that could hold it (1 is best);
- **placed**: gangs placed whole / arrivals;
- **fragmentation**, sampled every 10 events: ``frag_node``, the share of free GPUs on partly
  used nodes (an 8-GPU pod cannot use them); ``frag_leaf``, the share of free GPUs outside
  wholly free leaves (a leaf-sized gang cannot use them);
- **latency** of each placement decision (place and reserve; refusals too), p50 / p99 per gang
  size band (2-8, 16-64, 128-512 pods); and ``place`` of a 512-pod gang of 8 GPUs probed every
  ``--probe-every`` events on the loaded cluster (not reserved), p99 with the trace's 512-pod
  gangs, on the largest cluster. Pure Python, one core.

The last line is ``RESULT key=value ...``: ours over every cluster, then kueue_ and firstfit_.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "support"))  # the benchmarks' shared modules, not benchmarks
from gang_cluster import ClusterShape, FirstFit, Gang, KueueBestFit, Mapping_, Replay  # noqa: E402
from ranks import nearest_rank  # noqa: E402

from runtimekit.kube.gang.network import PRESETS, Tiers
from runtimekit.kube.gang.offer import Offer
from runtimekit.kube.gang.placer import GangDemand, Placement, Placer, PodDemand

SHAPES = ((8, 0.55), (4, 0.15), (2, 0.15), (1, 0.15))  # GPUs (= NICs) per pod, weight
LAUNCHER = 0.3
ARRIVE = 0.75
BANDS = ((2, 8), (16, 64), (128, 512))
Event = tuple[str, Gang]  # ("arrive" | "leave", gang)


def make_trace(rng: random.Random, cluster: ClusterShape, events: int, load: float, max_pods: int) -> tuple[list[Event], int]:
    """The events and the index of the first one after the warm-up (module docstring)."""
    trace: list[Event] = []
    present: dict[str, Gang] = {}
    offered, capacity, warm = 0, cluster.nodes * cluster.gpus, -1
    sizes = [2 ** k for k in range(1, max_pods.bit_length())]
    for step in range(events):
        if present and (offered >= load * capacity or rng.random() >= ARRIVE):
            gang = present.pop(rng.choice(sorted(present)))
            trace.append(("leave", gang))
            offered -= gang.pods * gang.gpus
            continue
        gpus = rng.choices([s for s, _ in SHAPES], [w for _, w in SHAPES])[0]
        gang = Gang(f"ns/g{step}", rng.choice(sizes), gpus, rng.random() < LAUNCHER)
        present[gang.key] = gang
        trace.append(("arrive", gang))
        offered += gang.pods * gang.gpus
        if warm < 0 and offered >= load * capacity:
            warm = step + 1
    return trace, max(warm, 0)


class Ours:
    name = "ours"

    def __init__(self, cluster: ClusterShape) -> None:
        keys = tuple(key for key, _ in PRESETS["topograph"])
        self.placer = Placer(Tiers(keys, ("block", "spine", "leaf")))
        self.index: dict[str, int] = {}
        roots = {f"pci{r}": cluster.nics // cluster.roots for r in range(cluster.roots)}
        for node in range(cluster.nodes):
            name = f"node-{node:05}"
            values = (f"b{cluster.domain(node, 3)}", f"s{cluster.domain(node, 2)}", f"l{cluster.domain(node, 1)}")
            self.placer.set_node(name, dict(zip(keys, values, strict=True)), Offer.of([cluster.gpus], roots))
            self.index[name] = node
        self.reported: tuple[int, int] | None = None

    def place(self, gang: Gang) -> Mapping_ | None:
        result = self.placer.place(demand_of(gang))
        if not isinstance(result, Placement):
            return None
        self.placer.reserve(result)
        self.reported = (result.tiers_spanned, result.lower_bound)
        return {pod: self.index[node] for pod, node in result.nodes.items()}

    def leave(self, key: str) -> None:
        self.placer.release(key)


def demand_of(gang: Gang) -> GangDemand:
    return GangDemand(gang.key, tuple(PodDemand(pod, gang.need(pod), gang.need(pod)) for pod in gang.names()))


Policy = type[Ours] | type[KueueBestFit] | type[FirstFit]


@dataclass
class Tally:
    arrivals: int = 0
    placed: int = 0
    at_bound: int = 0
    leaves: list[float] = field(default_factory=list)
    violations: int = 0
    latencies: dict[tuple[int, int], list[float]] = field(default_factory=lambda: {band: [] for band in BANDS})
    frag: list[tuple[float, float]] = field(default_factory=list)
    probes: list[float] = field(default_factory=list)


def run(policy_of: Policy, cluster: ClusterShape, trace: list[Event], warm: int, probe_every: int) -> Tally:
    """Replay the trace through one policy (module docstring)."""
    policy, replay, tally = policy_of(cluster), Replay(cluster), Tally()
    probe = demand_of(Gang("ns/probe", 512, 8, False))
    for step, (kind, gang) in enumerate(trace):
        measured = step >= warm
        if measured and step % 10 == 0:
            tally.frag.append(replay.fragmentation())
        if kind == "leave":
            policy.leave(gang.key)
            replay.leave(gang.key)
            continue
        started = time.perf_counter()
        mapping = policy.place(gang)
        elapsed = time.perf_counter() - started
        if mapping is not None:
            replay.apply(gang, mapping)
        if not measured:
            continue
        tally.arrivals += 1
        tally.latencies[next(band for band in BANDS if band[0] <= gang.pods <= band[1])].append(elapsed)
        if mapping is not None and set(mapping) == set(gang.names()):
            workers = {node for pod, node in mapping.items() if pod != "launcher"}
            spanned, bound = cluster.spanned(workers), cluster.lower_bound(gang.pods, gang.gpus)
            tally.placed += 1
            tally.at_bound += spanned == bound
            tally.leaves.append(len({cluster.domain(n, 1) for n in workers}) / cluster.fewest_leaves(gang.pods, gang.gpus))
            if isinstance(policy, Ours) and policy.reported != (spanned, bound):
                tally.violations += 1
        if isinstance(policy, Ours):
            if gang.pods == 512:
                tally.probes.append(elapsed)
            if step % probe_every == 0:
                started = time.perf_counter()
                policy.placer.place(probe)
                tally.probes.append(time.perf_counter() - started)
    tally.violations += replay.split + replay.double_booked
    return tally


def ms(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return nearest_rank(ordered, q) * 1000 if ordered else float("nan")


def mean(values: Sequence[float]) -> float:
    return statistics.mean(values) if values else float("nan")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smaller run (under 30 s): 1,024 nodes, gangs of 2-128 pods")
    parser.add_argument("--nodes", type=int, nargs="+", help="sizes of the HGX clusters (default 4096 16384)")
    parser.add_argument("--block", type=int, default=1024, help="nodes per block (default 1024)")
    parser.add_argument("--spine", type=int, default=128, help="nodes per spine (default 128)")
    parser.add_argument("--leaf", type=int, default=16, help="nodes per leaf (default 16)")
    parser.add_argument("--events", type=int, help="events per cluster (default 2500, quick 400)")
    parser.add_argument("--load", type=float, default=0.9, help="offered load kept (default 0.9)")
    parser.add_argument("--probe-every", type=int, default=25, help="events between two 512-pod probes (default 25)")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    quick = args.quick
    sizes = args.nodes or ([1024] if quick else [4096, 16384])
    block, spine = (256, 64) if quick else (args.block, args.spine)
    events, max_pods = args.events or (400 if quick else 2500), 128 if quick else 512
    rng = random.Random(args.seed)
    clusters = [ClusterShape(n, min(block, n), min(spine, n), args.leaf) for n in sizes]
    tallies: dict[str, list[Tally]] = {"ours": [], "kueue-bestfit": [], "first-fit": []}
    largest_probes: list[float] = []
    print(f"{'nodes':>6} {'policy':<14}{'gangs':>6}{'placed':>8}{'at LB':>7}{'leaves':>7}{'viol.':>6}"
          f"{'frag node':>10}{'frag leaf':>10}   " + "  ".join(f"p50/p99 ms {lo}-{hi}" for lo, hi in BANDS))
    for cluster in clusters:
        trace, warm = make_trace(random.Random(rng.randrange(1 << 30)), cluster, events, args.load, max_pods)
        for policy_of in (Ours, KueueBestFit, FirstFit):
            tally = run(policy_of, cluster, trace, warm, args.probe_every)
            tallies[policy_of.name].append(tally)
            bands = "  ".join(f"{ms(tally.latencies[band], 0.5):>8.1f}/{ms(tally.latencies[band], 0.99):<8.1f}" for band in BANDS)
            print(f"{cluster.nodes:>6} {policy_of.name:<14}{tally.arrivals:>6}{tally.placed / max(tally.arrivals, 1):>8.3f}"
                  f"{tally.at_bound / max(tally.placed, 1):>7.3f}{mean(tally.leaves):>7.3f}{tally.violations:>6}"
                  f"{mean([f[0] for f in tally.frag]):>10.3f}{mean([f[1] for f in tally.frag]):>10.3f}   {bands}")
            if policy_of is Ours and cluster.nodes == max(sizes):
                largest_probes = tally.probes
    print(f"ours, place() of a 512-pod gang of 8 GPUs on {max(sizes)} nodes, {len(largest_probes)} calls: "
          f"p50 {ms(largest_probes, 0.5):.1f} ms, p99 {ms(largest_probes, 0.99):.1f} ms, max {ms(largest_probes, 1.0):.1f} ms")
    result = []
    for name, prefix in (("ours", ""), ("kueue-bestfit", "kueue_"), ("first-fit", "firstfit_")):
        runs = tallies[name]
        placed = sum(t.placed for t in runs)
        result += [f"{prefix}violations={sum(t.violations for t in runs)}",
                   f"{prefix}at_lower_bound={sum(t.at_bound for t in runs) / max(placed, 1):.4f}",
                   f"{prefix}placed={placed / max(sum(t.arrivals for t in runs), 1):.4f}",
                   f"{prefix}leaves={mean([x for t in runs for x in t.leaves]):.4f}",
                   f"{prefix}frag_leaf={mean([f[1] for t in runs for f in t.frag]):.4f}"]
        if name == "ours":
            latencies = [x for t in runs for values in t.latencies.values() for x in values]
            result += [f"p50_ms={ms(latencies, 0.5):.2f}", f"p99_ms={ms(latencies, 0.99):.2f}",
                       f"p99_ms_512={ms(largest_probes, 0.99):.2f}", f"largest_nodes={max(sizes)}",
                       f"frag_node={mean([f[0] for t in runs for f in t.frag]):.4f}"]
    print("RESULT " + " ".join(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
