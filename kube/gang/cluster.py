"""The files ``runtimekit gang plan`` reads: a cluster (nodes, their labels and offers) and the
gangs to place on it. YAML, or JSON when the name ends in ``.json``; every key is checked, and an
error names the file, the field and the rule (``cluster.yaml: nodes[3].offer.gpus_free: must
equal the sum of nvlink_groups (8), got 6``). Pure but for reading the files.

The cluster file::

    tiers: topograph              # a preset of network.py (topograph, topograph-fabric, gke, eks),
                                  # or the tier label keys, widest first; default topograph
    resourceslices: slices.json   # optional: ResourceSlices, a file (its path relative to this one;
                                  # a list, or a List as `kubectl get resourceslices -o json` prints) or inline
    resourceclaims: claims.json   # optional: ResourceClaims, likewise (their allocations hold devices)
    nodes:
      - name: dgx-000
        labels: {network.topology.nvidia.com/core: c0, ...}      # optional
        offer: {v: 1, gpus_free: 8, nvlink_groups: [8], nics_free_by_root: {"pci0000:15": 2}}
      - name: dgx-001
        offer: null               # the node takes nothing (NotReady, cordoned)
      - name: dgx-002             # no offer: read from resourceslices less resourceclaims (slices.py)

``offer`` is the node annotation ``runtimekit.io/offer`` as ``offer.py`` defines it.

The gangs file, placed in its order, each reserving what it gets::

    gangs:
      - key: team-a/llama         # unique; "namespace/name" as the controller names gangs
        pods:
          - {name: launcher, gpus: 0}
          - {name: worker, replicas: 64, gpus: 8, nics: 8}   # worker-0 .. worker-63

A pod entry with ``replicas`` stands for that many pods named ``<name>-0`` onwards; ``nics``
defaults to 0. Pod names must be unique in their gang.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runtimekit.documents import DocumentError, load_json_file, load_yaml_file
from runtimekit.kube.k8s_names import node_name_problem
from runtimekit.schema import REQUIRED, ConfigError, Key, at_least, between, check_shape

from .network import DEFAULT_PRESET, Tiers
from .offer import Offer, offer_from_mapping
from .placer import GangDemand, Placer, PodDemand
from .slices import allocated_devices, offer_from_slices

__all__ = ["MAX_FILE_BYTES", "Cluster", "ClusterNode", "load_cluster", "load_gangs"]

MAX_FILE_BYTES = 256 << 20  # 100,000 nodes in JSON take about 25 MiB
MAX_REPLICAS = 100_000
MAX_NODES = 200_000


def _named(value: str) -> str | None:
    return None if value.strip() else "must not be empty"


_NAME = Key(str, REQUIRED, "a name", _named)
_COUNT = Key(int, 0, "a count", at_least(0))
_NODE = {"name": Key(str, REQUIRED, "a Node's name", node_name_problem), "labels?": {"...": str}, "offer?": Any}
_CLUSTER = {"tiers?": (str, list), "resourceslices?": (str, list), "resourceclaims?": (str, list), "nodes": [_NODE]}
_POD = {"name": _NAME, "gpus": _COUNT, "nics?": _COUNT, "replicas?": Key(int, 1, "pods of this entry", between(1, MAX_REPLICAS))}
_GANGS = {"gangs": [{"key": _NAME, "pods": [_POD]}]}


@dataclass(frozen=True, slots=True)
class ClusterNode:
    name: str
    labels: Mapping[str, str]
    offer: Offer | None


@dataclass(frozen=True, slots=True)
class Cluster:
    tiers: Tiers
    nodes: tuple[ClusterNode, ...]

    def placer(self) -> Placer:
        """A placer that knows every node of the cluster, nothing reserved."""
        placer = Placer(self.tiers)
        for node in self.nodes:
            placer.set_node(node.name, node.labels, node.offer)
        return placer


def read_document(path: str | Path, what: str) -> Any:
    """The YAML (or, for a name ending in .json, JSON) document at ``path``; ConfigError when unreadable."""
    try:
        if str(path).endswith(".json"):
            return load_json_file(path, what=what, max_bytes=MAX_FILE_BYTES)
        return load_yaml_file(path, what=what, max_bytes=MAX_FILE_BYTES)
    except OSError as error:
        raise ConfigError(f"{what}: cannot read {path}: {error.strerror}") from None
    except DocumentError as error:
        raise ConfigError(str(error)) from None


def load_cluster(path: str | Path) -> Cluster:
    """The cluster file at ``path`` (module docstring)."""
    where = str(path)
    data = read_document(path, where)
    _check(data, _CLUSTER, where)
    if len(data["nodes"]) > MAX_NODES:
        raise ConfigError(f"{where}: nodes: at most {MAX_NODES} nodes, got {len(data['nodes'])}")
    tiers = _tiers(data.get("tiers", DEFAULT_PRESET), where)
    base = Path(path).parent
    slices = _items(data.get("resourceslices"), base, f"{where}: resourceslices")
    claims = _items(data.get("resourceclaims"), base, f"{where}: resourceclaims")
    nodes: list[ClusterNode] = []
    seen: set[str] = set()
    for i, entry in enumerate(data["nodes"]):
        at = f"nodes[{i}]"
        name = entry["name"]
        if name in seen:
            raise ConfigError(f"{where}: {at}.name: {name!r} appears twice")
        seen.add(name)
        try:
            if "offer" in entry:
                offer = None if entry["offer"] is None else offer_from_mapping(entry["offer"], f"{at}.offer")
            elif slices is None:
                raise ConfigError(f"{at}: no offer, and no resourceslices to read it from")
            else:
                offer = offer_from_slices(slices, name, allocated_devices(claims or [], name))
        except ConfigError as error:
            raise ConfigError(f"{where}: {error}") from None
        nodes.append(ClusterNode(name, dict(entry.get("labels") or {}), offer))
    return Cluster(tiers, tuple(nodes))


def _tiers(value: str | list[Any], where: str) -> Tiers:
    try:
        if isinstance(value, str):
            return Tiers.preset(value)
        for i, key in enumerate(value):
            if not isinstance(key, str):
                raise ValueError(f"tiers[{i}]: must be a string (a node label key), got {type(key).__name__}")
        return Tiers.of_keys(value)
    except ValueError as error:
        raise ConfigError(f"{where}: {error}") from None


def _items(value: str | list[Any] | None, base: Path, what: str) -> list[Any] | None:
    """A list of API objects given inline, or in a file holding a list or a List (``items``)."""
    if value is None or isinstance(value, list):
        return value
    data = read_document(base / value, f"{what} ({value})")
    if isinstance(data, dict) and isinstance(data.get("items"), list):
        return list(data["items"])
    if not isinstance(data, list):
        raise ConfigError(f"{what} ({value}): must hold a list, or a List with items, got {type(data).__name__}")
    return data


def load_gangs(path: str | Path) -> list[GangDemand]:
    """The gangs file at ``path`` (module docstring), in its order."""
    where = str(path)
    data = read_document(path, where)
    _check(data, _GANGS, where)
    gangs: list[GangDemand] = []
    keys: set[str] = set()
    for i, entry in enumerate(data["gangs"]):
        if entry["key"] in keys:
            raise ConfigError(f"{where}: gangs[{i}].key: {entry['key']!r} appears twice")
        keys.add(entry["key"])
        try:
            gangs.append(GangDemand(entry["key"], tuple(_pods(entry["pods"]))))
        except ValueError as error:
            raise ConfigError(f"{where}: gangs[{i}]: {error}") from None
    return gangs


def _pods(entries: Sequence[Mapping[str, Any]]) -> list[PodDemand]:
    pods: list[PodDemand] = []
    for entry in entries:
        gpus, nics = entry["gpus"], entry.get("nics", 0)
        if "replicas" in entry:
            pods.extend(PodDemand(f"{entry['name']}-{r}", gpus, nics) for r in range(entry["replicas"]))
        else:
            pods.append(PodDemand(entry["name"], gpus, nics))
    return pods


def _check(data: Any, shape: Any, where: str) -> None:
    """``check_shape``, its message starting with the file's name."""
    try:
        check_shape(data, shape, "")
    except ConfigError as error:
        raise ConfigError(f"{where}: {error}") from None
