"""A node's offer read from its ResourceSlices, where the DRA driver ``gpu.runtimekit.io`` publishes
its devices, less the devices that ResourceClaims hold. Pure: plain mappings in (the API's JSON
field names, as ``kubectl get resourceslices,resourceclaims -o json`` prints them), an ``Offer`` out.

The devices the driver publishes (names: ``runtimekit.kube.dra.names``; schema:
resource.k8s.io/v1 ``ResourceSlice``, kubernetes/api resource/v1/types.go):

- ``gpu-<i>``, attribute ``type`` = "gpu", ``nvlinkDomain`` (int: GPUs with the same value form
  one NVLink-connected group; ``offer.py``), ``resource.kubernetes.io/pcieRoot`` (string);
- ``nic-<name>``, ``type`` = "nic", ``resource.kubernetes.io/pcieRoot``;
- MIG placements ``gpu-<i>-mig-...`` (``type`` = "mig"): never offered to a gang, but one that a
  claim holds takes its whole GPU (the GPU's counters are spent).

Attribute keys may be short (``nvlinkDomain``: the driver's own domain) or qualified
(``gpu.runtimekit.io/nvlinkDomain``); a value is a one-key mapping ``{"int": 3}``.

Rules:

- The pool is the node's (one pool per node, named after it). Only the slices of the pool's
  highest ``generation`` count; when fewer of them exist than their ``resourceSliceCount``, the pool
  is being rewritten and the offer is refused (OfferError), to be read again.
- A device **absent** from the slices is not free: the driver withdraws unhealthy devices. A device
  with a taint of effect NoSchedule or NoExecute is not free either.
- A device named in a claim's ``status.allocation.devices.results`` (this driver, pool = the node)
  is not free.
- A NIC without ``pcieRoot`` is counted under the root "unknown".
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from runtimekit.kube.dra.names import parse_device_name

from .offer import Offer, OfferError

__all__ = ["DRIVER", "PCIE_ROOT", "allocated_devices", "offer_from_slices"]

DRIVER = "gpu.runtimekit.io"
PCIE_ROOT = "resource.kubernetes.io/pcieRoot"  # KEP-4381's standard attribute
UNKNOWN_ROOT = "unknown"
_BLOCKING_TAINTS = ("NoSchedule", "NoExecute")


def allocated_devices(claims: Iterable[Any], node: str, driver: str = DRIVER) -> frozenset[str]:
    """Names of the node's devices that claims hold: ``status.allocation.devices.results[]`` entries
    whose driver is ``driver`` and whose pool is ``node``. Claims not allocated are skipped."""
    held: set[str] = set()
    for i, claim in enumerate(claims):
        where = f"resourceclaims[{i}]"
        allocation = _mapping(_mapping(claim, where).get("status") or {}, f"{where}.status").get("allocation")
        if not allocation:
            continue
        devices = _mapping(_mapping(allocation, f"{where}.status.allocation").get("devices") or {}, f"{where}.status.allocation.devices")
        for j, result in enumerate(_list(devices.get("results") or [], f"{where}.status.allocation.devices.results")):
            at = f"{where}.status.allocation.devices.results[{j}]"
            result = _mapping(result, at)
            if result.get("driver") == driver and result.get("pool") == node:
                held.add(_string(result.get("device"), f"{at}.device"))
    return frozenset(held)


def offer_from_slices(slices: Iterable[Any], node: str, allocated: Iterable[str] = (), driver: str = DRIVER) -> Offer:
    """The node's offer from the driver's ResourceSlices (module docstring); OfferError naming the
    slice, device and field when the slices are malformed or the pool is incomplete."""
    pool = _current_pool(slices, node, driver)
    held = frozenset(allocated)
    held_cards = {parsed.gpu_index for name in held if (parsed := parse_device_name(name)) and parsed.kind == "mig"}
    groups: dict[str, int] = {}
    nics: dict[str, int] = {}
    for where, device in pool:
        name = _string(device.get("name"), f"{where}.name")
        attributes = _mapping(device.get("attributes") or {}, f"{where}.attributes")
        parsed = parse_device_name(name)
        kind = _attribute(attributes, "type", "string", where, driver) or (parsed.kind if parsed else None)
        if name in held or _tainted(device, where):
            continue
        if kind == "gpu":
            if parsed and parsed.gpu_index in held_cards:
                continue
            domain = _attribute(attributes, "nvlinkDomain", "int", where, driver)
            group = f"nvlink-{domain}" if domain is not None else f"alone-{name}"
            groups[group] = groups.get(group, 0) + 1
        elif kind == "nic":
            root = _attribute(attributes, PCIE_ROOT, "string", where, driver) or UNKNOWN_ROOT
            nics[root] = nics.get(root, 0) + 1
    return Offer.of(groups, nics)


def _current_pool(slices: Iterable[Any], node: str, driver: str) -> list[tuple[str, Mapping[str, Any]]]:
    """(where, device) of every device in the node's pool at its highest generation."""
    mine: list[tuple[str, int, int, list[Any]]] = []
    for i, item in enumerate(slices):
        where = f"resourceslices[{i}].spec"
        spec = _mapping(_mapping(item, f"resourceslices[{i}]").get("spec"), where)
        if spec.get("driver") != driver:
            continue
        pool = _mapping(spec.get("pool"), f"{where}.pool")
        if pool.get("name") != node and spec.get("nodeName") != node:
            continue
        generation = _integer(pool.get("generation", 0), f"{where}.pool.generation")
        count = _integer(pool.get("resourceSliceCount", 1), f"{where}.pool.resourceSliceCount")
        mine.append((where, generation, count, _list(spec.get("devices") or [], f"{where}.devices")))
    if not mine:
        return []
    newest = max(generation for _, generation, _, _ in mine)
    current = [entry for entry in mine if entry[1] == newest]
    expected = max(count for _, _, count, _ in current)
    if len(current) < expected:
        raise OfferError(f"resourceslices: pool {node} has {len(current)} of its {expected} slices at generation {newest} "
                         "(the driver is rewriting it; read it again)")
    return [(f"{where}.devices[{j}]", _mapping(device, f"{where}.devices[{j}]"))
            for where, _, _, devices in current for j, device in enumerate(devices)]


def _attribute(attributes: Mapping[str, Any], name: str, kind: str, where: str, driver: str) -> Any:
    """The value of attribute ``name`` (short or qualified by ``driver``) of type ``kind``; None when absent."""
    for key in (name, f"{driver}/{name}"):
        if key in attributes:
            value = _mapping(attributes[key], f"{where}.attributes.{key}")
            if kind not in value or len(value) != 1:
                raise OfferError(f"{where}.attributes.{key}: must be {{{kind}: ...}}, got keys {sorted(value)}")
            return _integer(value[kind], f"{where}.attributes.{key}.int") if kind == "int" else _string(value[kind], f"{where}.attributes.{key}.{kind}")
    return None


def _tainted(device: Mapping[str, Any], where: str) -> bool:
    taints = _list(device.get("taints") or [], f"{where}.taints")
    return any(_mapping(taint, f"{where}.taints[{k}]").get("effect") in _BLOCKING_TAINTS for k, taint in enumerate(taints))


def _mapping(value: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise OfferError(f"{where}: must be a mapping, got {type(value).__name__}")
    return value


def _list(value: Any, where: str) -> list[Any]:
    if not isinstance(value, list):
        raise OfferError(f"{where}: must be a list, got {type(value).__name__}")
    return value


def _string(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value:
        raise OfferError(f"{where}: must be a non-empty string, got {type(value).__name__}")
    return value


def _integer(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise OfferError(f"{where}: must be an integer, got {type(value).__name__}")
    return value
