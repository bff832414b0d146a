"""The network model: node labels name each tier, and the nodes form a tree of domains.

A **tier** is a node label key; tiers are listed from the widest (farthest from the node) to the
narrowest. Nodes that share the values of a tier's label *and of every wider tier's* share that
tier's domain: a domain is the path of label values from the top (a leaf named "s1" under two
different spines is two leaves). A node **missing a tier's label is its own domain at that tier**
(and so at every narrower tier): it is never assumed to share a switch it does not name.

Levels number the tree from the node up: level 0 is the node, level 1 the narrowest tier (the
leaf), ..., level T the widest tier, level T + 1 the whole cluster. "Tiers spanned" by a set of
nodes is the level of their lowest common domain: 0 = one node, 1 = one leaf, T + 1 = several
domains of the widest tier.

Label keys that providers write (widest first), the presets here:

- ``topograph`` (the default): NVIDIA Topograph's tree labels ``network.topology.nvidia.com/core``,
  ``/spine``, ``/leaf``; Topograph reads them from AWS, GCP, OCI, CoreWeave, Lambda and InfiniBand
  fabrics (https://docs.nvidia.com/topograph/reference/node-labels-and-annotations;
  https://github.com/NVIDIA/topograph docs/engines/k8s.md).
- ``topograph-fabric``: Topograph v1.1's variable-depth family ``fabric.topograph.run/tier-N``,
  tier 0 the switch nearest the node (https://docs.nvidia.com/topograph/v1.1.0/engines/kubernetes.md);
  three tiers here: tier-2, tier-1, tier-0.
- ``gke``: ``cloud.google.com/gce-topology-block``, ``-subblock``, ``-host`` (Google's guide to
  Kueue topology-aware scheduling, https://cloud.google.com/ai-hypercomputer/docs/workloads/schedule-gke-workloads-tas;
  kubernetes-sigs/kueue site/content/en/docs/concepts/topology_aware_scheduling.md).
- ``eks``: ``topology.k8s.aws/network-node-layer-1``, ``-2``, ``-3``, layer 1 the farthest
  (https://docs.aws.amazon.com/eks/latest/userguide/ml-workload-topology.html; EC2
  DescribeInstanceTopology lists network nodes from the top of the hierarchy down).

Kueue's Topology CRD takes any label keys the same way (``spec.levels[].nodeLabel``, coarsest
first, kubernetes-sigs/kueue site/content/en/docs/concepts/topology.md); so does ``tiers`` here.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

__all__ = ["DEFAULT_PRESET", "PRESETS", "Network", "Tiers", "label_key_problem"]

_PREFIX = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")

#: Preset -> ((label key, short name), ...), widest tier first.
PRESETS: Mapping[str, tuple[tuple[str, str], ...]] = {
    "topograph": (("network.topology.nvidia.com/core", "core"), ("network.topology.nvidia.com/spine", "spine"),
                  ("network.topology.nvidia.com/leaf", "leaf")),
    "topograph-fabric": (("fabric.topograph.run/tier-2", "tier-2"), ("fabric.topograph.run/tier-1", "tier-1"),
                         ("fabric.topograph.run/tier-0", "tier-0")),
    "gke": (("cloud.google.com/gce-topology-block", "block"), ("cloud.google.com/gce-topology-subblock", "subblock"),
            ("cloud.google.com/gce-topology-host", "host")),
    "eks": (("topology.k8s.aws/network-node-layer-1", "layer-1"), ("topology.k8s.aws/network-node-layer-2", "layer-2"),
            ("topology.k8s.aws/network-node-layer-3", "layer-3")),
}
DEFAULT_PRESET = "topograph"
NODE = "node"  # the name of level 0
CLUSTER = "cluster"  # the name of level T + 1


def label_key_problem(key: str) -> str | None:
    """Why ``key`` is not a Kubernetes label key (an optional DNS-subdomain prefix of at most 253
    characters and "/", then a name of 1-63 characters of ``[A-Za-z0-9._-]`` starting and ending
    alphanumeric: k8s.io/apimachinery validation.IsQualifiedName), or None when it is one."""
    prefix, slash, name = key.rpartition("/")
    if slash and (not prefix or len(prefix) > 253 or not _PREFIX.fullmatch(prefix)):
        return "its prefix must be a lower-case DNS subdomain (network.topology.nvidia.com)"
    if not name or len(name) > 63 or not _NAME.fullmatch(name):
        return "its name must be 1-63 characters of A-Z a-z 0-9 . _ - starting and ending alphanumeric"
    return None


@dataclass(frozen=True, slots=True)
class Tiers:
    """The label keys of the network tiers, widest first, and their short names for reports."""

    keys: tuple[str, ...]
    names: tuple[str, ...]

    def __post_init__(self) -> None:
        if not self.keys:
            raise ValueError("tiers: at least one label key is needed")
        if len(self.names) != len(self.keys):
            raise ValueError("tiers: one name per label key")
        for key in self.keys:
            problem = label_key_problem(key)
            if problem:
                raise ValueError(f"tiers: {key!r} is not a label key: {problem}")
        if len(set(self.keys)) != len(self.keys):
            raise ValueError("tiers: each label key may appear once")
        if len(set(self.names) | {NODE, CLUSTER}) != len(self.names) + 2:
            raise ValueError(f"tiers: the short names must differ from each other and from {NODE!r} and {CLUSTER!r}")

    @classmethod
    def preset(cls, name: str = DEFAULT_PRESET) -> Tiers:
        if name not in PRESETS:
            raise ValueError(f"tiers: unknown preset {name!r} (presets: {', '.join(sorted(PRESETS))})")
        keys, names = zip(*PRESETS[name], strict=True)
        return cls(tuple(keys), tuple(names))

    @classmethod
    def of_keys(cls, keys: Sequence[str]) -> Tiers:
        """Tiers from label keys, each named by its part after the last "/"."""
        return cls(tuple(keys), tuple(key.rpartition("/")[2] for key in keys))

    @property
    def depth(self) -> int:
        return len(self.keys)

    def level_name(self, level: int) -> str:
        """"node", a tier's short name, or "cluster" for ``level`` 0 .. depth + 1."""
        if level == 0:
            return NODE
        if level == self.depth + 1:
            return CLUSTER
        return self.names[self.depth - level]

    def level_of(self, name: str) -> int | None:
        """The level a tier's short name or label key (or "node", "cluster") stands for; None if none."""
        for level in range(self.depth + 2):
            if name == self.level_name(level) or (0 < level <= self.depth and name == self.keys[self.depth - level]):
                return level
        return None


class Network:
    """The tree of domains over the nodes, grown as nodes are added.

    ``parent[l][i]`` is the level-(l + 1) domain holding domain ``i`` of level ``l`` (level 0: the
    nodes); ``children[l][i]`` the level-(l - 1) domains inside domain ``i`` of level ``l``
    (l >= 1); ``paths[l][i]`` a domain's label values from the top (level T + 1 is one domain, the
    cluster, path ()). Domains are never removed: an empty one simply offers nothing."""

    def __init__(self, tiers: Tiers) -> None:
        self.tiers = tiers
        self.top = tiers.depth + 1
        self.node_names: list[str] = []
        self.parent: list[list[int]] = [[] for _ in range(self.top)]
        self.children: list[list[list[int]]] = [[] for _ in range(self.top + 1)]
        self.paths: list[list[tuple[str, ...]]] = [[] for _ in range(self.top + 1)]
        self._index: list[dict[tuple[str, ...], int]] = [{} for _ in range(self.top + 1)]
        self._domain(self.top, ())  # the cluster: domain 0 of the top level

    def path_of(self, name: str, labels: Mapping[str, str]) -> tuple[str, ...]:
        """The node's label values, widest tier first; a missing (or empty) label is "(<node>)",
        a value no label can hold (labels are at most 63 characters of [A-Za-z0-9._-])."""
        return tuple(labels.get(key) or f"({name})" for key in self.tiers.keys)

    def add_node(self, name: str, labels: Mapping[str, str]) -> int:
        """Add a node; its index (level 0). Names are the caller's to keep unique."""
        path = self.path_of(name, labels)
        node = len(self.node_names)
        self.node_names.append(name)
        self.parent[0].append(-1)
        below = node
        for level in range(1, self.top + 1):
            domain, created = self._domain(level, path[: self.top - level])
            self.parent[level - 1][below] = domain
            self.children[level][domain].append(below)
            if not created:
                break  # the domain existed: the levels above it hold it already
            below = domain
        return node

    def _domain(self, level: int, path: tuple[str, ...]) -> tuple[int, bool]:
        found = self._index[level].get(path)
        if found is not None:
            return found, False
        found = len(self.paths[level])
        self._index[level][path] = found
        self.paths[level].append(path)
        self.children[level].append([])
        if level < self.top:
            self.parent[level].append(-1)
        return found, True

    def count(self, level: int) -> int:
        """How many domains level ``level`` has (nodes at level 0)."""
        return len(self.node_names) if level == 0 else len(self.paths[level])

    def ancestor(self, node: int, level: int) -> int:
        """The level-``level`` domain holding ``node``."""
        index = node
        for step in range(level):
            index = self.parent[step][index]
        return index

    def describe(self, level: int, domain: int) -> str:
        """A domain in words: "node-7", "leaf s1/l3" (its path below the cluster), "cluster"."""
        if level == 0:
            return self.node_names[domain]
        if level == self.top:
            return CLUSTER
        return f"{self.tiers.level_name(level)} {'/'.join(self.paths[level][domain])}"
