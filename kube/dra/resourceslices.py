"""The driver's ResourceSlices: an ``Inventory`` (devices.py) laid out as resource.k8s.io/v1
ResourceSlice bodies (dicts in the API's JSON form) for the API server's release, and the
comparisons that decide what to write. Pure.

Layout (the pool is the node: one pool per node, named after it; kubernetes-sigs
dra-driver-nvidia-gpu ``driver.go`` picks its layout the same way):

- **1.35 and later** (``split``): counter sets only in their own slices first (at most 8 per
  slice, the API's limit), then one devices-only slice per GPU (its devices sorted by name; a
  GPU's devices fill several slices past 64 devices when they consume counters, 128 otherwise),
  then the NICs. Since 1.35 a slice holds devices or sharedCounters, never both, and counter-set
  names are unique in the pool (KEP-4815 "Rollout, Upgrade and Rollback Planning").
- **before 1.35** (``combined``): one slice per GPU holding its counter set and its devices (a
  device may consume only counters of its own slice then), then the NICs; a GPU's devices past
  64 are not published (its counter set cannot be split; real GPUs have at most 25 placements).

The order of slices and of devices in them is the scheduler's first-fit order. An empty pool is
one slice without devices, so that its generation stays visible.

Every body has ``spec.driver``, ``spec.nodeName``, ``spec.pool {name, generation,
resourceSliceCount}`` and ``metadata.generateName`` ``<index in hex>-<driver>-<node>-`` with an
ownerReference to the v1 Node (``controller: true``), so slices go with their node (as the
Kubernetes helper k8s.io/dynamic-resource-allocation ``resourceslice`` controller makes them).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Sequence
from decimal import Decimal
from typing import Any

from .devices import Inventory

__all__ = ["Body", "generate_name", "pair", "same_spec", "slice_body", "slice_contents", "split_layout", "wanted_spec"]

SPLIT_SINCE_MINOR = 35  # the first 1.x whose partitionable-devices layout splits counters from devices
MAX_DEVICES = 128  # ResourceSliceMaxDevices
MAX_DEVICES_WITH_COUNTERS = 64  # ResourceSliceMaxDevicesWithAdvancedFeatures
MAX_COUNTER_SETS = 8  # ResourceSliceMaxCounterSets (1.35+)
MAX_GENERATE_NAME = 248  # a name is a DNS subdomain of at most 253 characters; the server appends 5
QUANTITY_KEYS = frozenset({"value", "default", "min", "max", "step"})

Body = dict[str, Any]


def split_layout(git_version: str) -> bool:
    """Whether the API server of ``git_version`` ("v1.35.0", "v1.34.2-gke.100") wants the split
    layout. ValueError naming the version when it is no Kubernetes 1.x version."""
    match = re.match(r"v?1\.(\d+)(?:\D|$)", git_version.strip())
    if not match:
        raise ValueError(f"gitVersion {git_version!r}: not a Kubernetes 1.x version")
    return int(match[1]) >= SPLIT_SINCE_MINOR


def _chunks(devices: Sequence[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    limit = MAX_DEVICES_WITH_COUNTERS if any(device.get("consumesCounters") for device in devices) else MAX_DEVICES
    return [list(devices[start:start + limit]) for start in range(0, len(devices), limit)]


def slice_contents(inventory: Inventory, split: bool) -> list[dict[str, Any]]:
    """What each slice of the pool holds, in order: ``{"devices": [...]}``, ``{"sharedCounters":
    [...]}`` or (combined layout) both; at least one (empty) slice."""
    contents: list[dict[str, Any]] = []
    sets = [gpu.counter_set for gpu in inventory.gpus if gpu.counter_set is not None]
    if split:
        contents += [{"sharedCounters": sets[start:start + MAX_COUNTER_SETS]} for start in range(0, len(sets), MAX_COUNTER_SETS)]
        contents += [{"devices": chunk} for gpu in inventory.gpus for chunk in _chunks(gpu.devices)]
    else:
        for gpu in inventory.gpus:
            content: dict[str, Any] = {"devices": _chunks(gpu.devices)[0]}
            if gpu.counter_set is not None:
                content = {"sharedCounters": [gpu.counter_set], **content}
            contents.append(content)
    contents += [{"devices": chunk} for chunk in _chunks(inventory.nics)]
    return copy.deepcopy(contents) or [{"devices": []}]


def generate_name(index: int, driver: str, node: str) -> str:
    """``<index in hex>-<driver>-<node>-``, lower case, cut to leave room for the server's suffix."""
    prefix = f"{index:x}-{driver}-{node}-".lower()
    if len(prefix) > MAX_GENERATE_NAME:
        prefix = prefix[:MAX_GENERATE_NAME - 1].rstrip(".-") + "-"
    return prefix


def wanted_spec(content: dict[str, Any], driver: str, node: str, generation: int, count: int) -> dict[str, Any]:
    """The spec of a slice holding ``content`` in the pool ``node`` at ``generation`` of ``count`` slices."""
    return {"driver": driver, "nodeName": node, "pool": {"name": node, "generation": generation, "resourceSliceCount": count},
            **copy.deepcopy(content)}


def slice_body(spec: dict[str, Any], index: int, node_uid: str, name: str = "", resource_version: str = "") -> Body:
    """A ResourceSlice body for ``spec``: new (``generateName``) or replacing ``name`` at
    ``resource_version``; owned by its node (``spec.nodeName``, uid ``node_uid``)."""
    meta: dict[str, Any] = {"ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": spec["nodeName"],
                                                 "uid": node_uid, "controller": True}]}
    if name:
        meta |= {"name": name, "resourceVersion": resource_version}
    else:
        meta["generateName"] = generate_name(index, spec["driver"], spec["nodeName"])
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": meta, "spec": spec}


def _quantity(text: str) -> Decimal | str:
    """A quantity's value ("128Mi" -> 134217728), as kubernetes.utils.parse_quantity reads it; the
    text itself when it is none."""
    from kubernetes.utils import parse_quantity

    try:
        return Decimal(parse_quantity(text))
    except ValueError:
        return text


def _normal(value: Any, key: str = "") -> Any:
    """``value`` with quantities as numbers and empty or null fields dropped, as the API server's
    semantic equality treats them (a quantity "1Gi" is "1073741824"; an omitted list is empty)."""
    if isinstance(value, dict):
        return {k: _normal(v, k) for k, v in value.items() if v is not None and v != [] and v != {}}
    if isinstance(value, list):
        return [_normal(item, key) for item in value]
    if key in QUANTITY_KEYS and isinstance(value, str):
        return _quantity(value)
    return value


def same_spec(stored: dict[str, Any], wanted: dict[str, Any]) -> bool:
    """Whether a stored slice's spec says what ``wanted`` says (quantities by value)."""
    return bool(_normal(stored) == _normal(wanted))


def _names(spec: dict[str, Any]) -> set[str]:
    return {device.get("name", "") for device in spec.get("devices") or []} | {
        "counter-set/" + counter_set.get("name", "") for counter_set in spec.get("sharedCounters") or []}


def pair(contents: Sequence[dict[str, Any]], stored: Sequence[Body]) -> tuple[list[Body | None], list[Body]]:
    """Each wanted slice's stored counterpart (the unpaired stored slice that shares the most
    device and counter-set names with it, or None: to create) and the stored slices left over
    (obsolete: to delete). An empty wanted slice pairs with an empty stored one."""
    left = list(stored)
    paired: list[Body | None] = []
    for content in contents:
        names = _names(content)
        scores = [len(names & _names(item["spec"])) for item in left]
        best = max(scores, default=0)
        if best:
            chosen: int | None = scores.index(best)
        else:  # an empty slice pairs with an empty one
            chosen = next((n for n, item in enumerate(left) if not names and not _names(item["spec"])), None)
        paired.append(left.pop(chosen) if chosen is not None else None)
    return paired, left
