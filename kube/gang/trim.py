"""The fields of each watched object the gang service reads, and nothing else: the informers
(kubeapi.py) keep objects trimmed to these, in their own threads, so that a large cluster's nodes
and pods fit in the service's memory. A Node as the API server returns it is mostly
``status.images`` (every image on the node, with sizes), ``managedFields`` and capacity tables;
the service reads its labels, the offer annotation, its taints, ``unschedulable`` and the Ready
condition (view.py, nodefit.py). A Pod keeps what ``gangs.gang_pod`` reads. A ResourceSlice keeps
its ``spec`` (slices.py reads its devices); a ResourceClaim its ``status.allocation`` (the devices
it holds). Every kind keeps ``metadata`` name, namespace, uid, resourceVersion, creation and
deletion timestamps.

A field of an unexpected type is kept as it is (``gang_pod`` and the offer readers then name it
in their errors); a field that is absent stays absent.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from .gangs import CONDITION, GANG_SIZE, PLACED_ANNOTATION
from .offer import OFFER_ANNOTATION

__all__ = ["trim_claim", "trim_node", "trim_pod", "trim_slice"]

Json = dict[str, Any]
_IDENTITY = ("name", "namespace", "uid", "resourceVersion", "creationTimestamp", "deletionTimestamp")


def _pick(value: Any, keys: Collection[str]) -> Any:
    """``value`` with only ``keys`` when it is a mapping; as it is otherwise."""
    return {k: v for k, v in value.items() if k in keys} if isinstance(value, Mapping) else value


def _metadata(obj: Mapping[str, Any], extra: Collection[str] = (), annotations: Collection[str] = ()) -> Any:
    meta = _pick(obj.get("metadata"), (*_IDENTITY, *extra, "annotations"))
    if isinstance(meta, dict) and "annotations" in meta:
        kept = _pick(meta["annotations"], annotations)
        if kept:
            meta["annotations"] = kept
        else:
            del meta["annotations"]
    return meta


def _set(into: Json, key: str, value: Any) -> None:
    if value is not None and value != {}:
        into[key] = value


def trim_node(node: Json) -> Json:
    """A core/v1 Node with its labels, offer annotation, taints, ``unschedulable`` and Ready condition."""
    out: Json = {}
    _set(out, "metadata", _metadata(node, ("labels",), (OFFER_ANNOTATION,)))
    _set(out, "spec", _pick(node.get("spec"), ("taints", "unschedulable")))
    status = node.get("status")
    if isinstance(status, Mapping):
        conditions = status.get("conditions")
        if isinstance(conditions, list):
            conditions = [c for c in conditions if not isinstance(c, Mapping) or c.get("type") == "Ready"]
        _set(out, "status", {"conditions": conditions} if conditions is not None else None)
    return out


def _container(container: Any) -> Any:
    return _pick(container, ("name", "resources"))


def trim_pod(pod: Json) -> Json:
    """A core/v1 Pod with what ``gangs.gang_pod`` reads (gates, demand, placement constraints,
    phase, the GangPlaced condition)."""
    out: Json = {}
    _set(out, "metadata", _metadata(pod, ("labels", "ownerReferences"), (GANG_SIZE, PLACED_ANNOTATION)))
    spec = pod.get("spec")
    if isinstance(spec, Mapping):
        kept = _pick(spec, ("schedulingGates", "resourceClaims", "nodeName", "nodeSelector", "tolerations"))
        for key in ("containers", "initContainers"):
            containers = spec.get(key)
            _set(kept, key, [_container(c) for c in containers] if isinstance(containers, list) else containers)
        affinity = spec.get("affinity")
        if isinstance(affinity, Mapping):
            _set(kept, "affinity", {"nodeAffinity": _pick(affinity.get("nodeAffinity"),
                                                          ("requiredDuringSchedulingIgnoredDuringExecution",))}
                 if affinity.get("nodeAffinity") is not None else None)
        _set(out, "spec", kept)
    elif spec is not None:
        out["spec"] = spec
    status = pod.get("status")
    if isinstance(status, Mapping):
        kept = _pick(status, ("phase",))
        conditions = status.get("conditions")
        if isinstance(conditions, list):
            conditions = [c for c in conditions if not isinstance(c, Mapping) or c.get("type") == CONDITION]
        _set(kept, "conditions", conditions or None)
        _set(out, "status", kept)
    return out


def trim_slice(item: Json) -> Json:
    """A resource.k8s.io/v1 ResourceSlice with its ``spec``."""
    out: Json = {}
    _set(out, "metadata", _metadata(item))
    _set(out, "spec", item.get("spec"))
    return out


def trim_claim(claim: Json) -> Json:
    """A resource.k8s.io/v1 ResourceClaim with its ``status.allocation``."""
    out: Json = {}
    _set(out, "metadata", _metadata(claim))
    _set(out, "status", _pick(claim.get("status"), ("allocation",)))
    return out
