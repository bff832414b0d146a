"""Whether a node may take a gang's pods at all, and whether it admits one pod: the checks the
scheduler makes that the placer does not (it counts GPUs and NICs only). Pure: node and pod data
in, a verdict out.

- **A node takes nothing** (its offer is withheld from the placer) when it is being deleted, is
  cordoned (``spec.unschedulable``), its ``Ready`` condition is not True, or it carries one of the
  node lifecycle controller's taints ``node.kubernetes.io/not-ready``, ``unreachable`` or
  ``unschedulable`` (k8s.io/api core/v1 well_known_taints.go).
- **A node admits a pod** when the pod's ``nodeSelector`` and required node affinity select it
  (operators In, NotIn, Exists, DoesNotExist, Gt, Lt on labels; In, NotIn on the field
  ``metadata.name``: k8s.io/component-helpers scheduling/corev1/nodeaffinity) and the pod tolerates
  each of its NoSchedule and NoExecute taints (k8s.io/api core/v1 toleration.go ``ToleratesTaint``).

The controller refuses a placement that puts a pod on a node that does not admit it, naming both,
rather than pin the pod where the scheduler would leave it Pending.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from .gangs import GangPod

__all__ = ["LIFECYCLE_TAINTS", "node_admits", "node_unusable", "term_matches", "tolerates"]

LIFECYCLE_TAINTS = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable", "node.kubernetes.io/unschedulable")
_BLOCKING = ("NoSchedule", "NoExecute")


def node_unusable(node: Mapping[str, Any]) -> str | None:
    """Why ``node`` (a core/v1 Node as JSON) takes no gang pod now, or None when it may."""
    meta, spec, status = node.get("metadata") or {}, node.get("spec") or {}, node.get("status") or {}
    if meta.get("deletionTimestamp"):
        return "being deleted"
    if spec.get("unschedulable"):
        return "cordoned"
    ready = next((c for c in status.get("conditions") or () if isinstance(c, Mapping) and c.get("type") == "Ready"), None)
    if ready is None or ready.get("status") != "True":
        return "NotReady"
    for taint in spec.get("taints") or ():
        if isinstance(taint, Mapping) and taint.get("key") in LIFECYCLE_TAINTS and taint.get("effect") in _BLOCKING:
            return f"tainted {taint.get('key')}"
    return None


def _requirement(requirement: Mapping[str, Any], value: str | None) -> bool:
    operator, values = requirement.get("operator"), [str(v) for v in requirement.get("values") or ()]
    if operator == "In":
        return value is not None and value in values
    if operator == "NotIn":
        return value is None or value not in values
    if operator == "Exists":
        return value is not None
    if operator == "DoesNotExist":
        return value is None
    if operator in ("Gt", "Lt") and value is not None and len(values) == 1:
        try:
            have, bound = int(value), int(values[0])
        except ValueError:
            return False
        return have > bound if operator == "Gt" else have < bound
    return False


def term_matches(term: Mapping[str, Any], node: str, labels: Mapping[str, str]) -> bool:
    """Whether one node selector term selects the node (every requirement holds; an empty term
    selects nothing, as the scheduler has it)."""
    expressions = term.get("matchExpressions") or []
    fields = term.get("matchFields") or []
    if not expressions and not fields:
        return False
    return (all(_requirement(r, labels.get(str(r.get("key")))) for r in expressions)
            and all(r.get("key") == "metadata.name" and _requirement(r, node) for r in fields))


def tolerates(tolerations: Iterable[Mapping[str, Any]], taint: Mapping[str, Any]) -> bool:
    """Whether one of ``tolerations`` tolerates ``taint`` (an empty key with Exists tolerates all)."""
    for toleration in tolerations:
        effect = toleration.get("effect")
        if effect and effect != taint.get("effect"):
            continue
        key = toleration.get("key")
        if key and key != taint.get("key"):
            continue
        operator = toleration.get("operator") or "Equal"
        if operator == "Exists" or (operator == "Equal" and (toleration.get("value") or "") == (taint.get("value") or "")):
            return True
    return False


def node_admits(pod: GangPod, node: str, labels: Mapping[str, str], taints: Iterable[Mapping[str, Any]]) -> str | None:
    """Why ``node`` does not admit ``pod`` (its nodeSelector, its required node affinity, a taint it
    does not tolerate), or None when it does."""
    for key, value in pod.node_selector.items():
        if labels.get(key) != value:
            return f"its nodeSelector {key}={value} does not select the node"
    if pod.terms and not any(term_matches(term, node, labels) for term in pod.terms):
        return "its required node affinity does not select the node"
    for taint in taints:
        if taint.get("effect") in _BLOCKING and not tolerates(pod.tolerations, taint):
            return f"it does not tolerate the taint {taint.get('key')}={taint.get('value', '')}:{taint.get('effect')}"
    return None
