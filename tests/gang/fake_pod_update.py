"""The API server's rules for an update of a pod's spec (k8s.io/kubernetes pkg/apis/core/validation
``ValidatePodUpdate``, with KEP-3838's mutable scheduling directives), for the fake API server
(fake_cluster_api.py): only scheduling gates, ``nodeSelector`` and ``affinity`` may change here;
gates may only be removed; while the old pod is gated, ``nodeSelector`` may only gain entries and
the required node affinity may only narrow (empty terms may be set; otherwise the same number of
terms, each keeping its requirements in order and adding more); once ungated, neither may change.
A refusal is ``Refused`` (422 Invalid) with the server's wording."""

from __future__ import annotations

MUTABLE_SPEC = ("schedulingGates", "nodeSelector", "affinity")


class Refused(Exception):
    """A request the API server answers with ``code`` (and ``reason``, the Status reason)."""

    def __init__(self, code: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.code, self.reason = code, reason


def _requirements_kept(old: list, new: list, where: str) -> None:
    if new[:len(old)] != old:
        raise Refused(422, "Invalid", f"{where}: Invalid value: only additions of node selector requirements are allowed; "
                                      "existing ones may not change")


def check_pod_update(old: dict, new: dict) -> None:
    """Refused when ``new`` is not a valid update of the pod spec ``old`` (module doc)."""
    changed = sorted(key for key in set(old) | set(new) if key not in MUTABLE_SPEC and old.get(key) != new.get(key))
    if changed:
        raise Refused(422, "Invalid", f"spec: Forbidden: pod updates may not change fields other than the image, "
                                      f"activeDeadlineSeconds, tolerations (additions) and, while gated, scheduling "
                                      f"directives (changed: {', '.join(changed)})")
    old_gates = [g["name"] for g in old.get("schedulingGates") or ()]
    new_gates = [g["name"] for g in new.get("schedulingGates") or ()]
    added = [g for g in new_gates if g not in old_gates]
    if added:
        raise Refused(422, "Invalid", f"spec.schedulingGates: Forbidden: only deletion is allowed, but found new scheduling "
                                      f"gate '{added[0]}'")
    gated = bool(old_gates)
    old_selector, new_selector = old.get("nodeSelector") or {}, new.get("nodeSelector") or {}
    if old_selector != new_selector and (not gated or any(new_selector.get(k) != v for k, v in old_selector.items())):
        raise Refused(422, "Invalid", "spec.nodeSelector: Invalid value: only additions to spec.nodeSelector are allowed, "
                                      "and only while the pod has scheduling gates")
    old_affinity, new_affinity = old.get("affinity") or {}, new.get("affinity") or {}
    if old_affinity == new_affinity:
        return
    if not gated:
        raise Refused(422, "Invalid", "spec.affinity: Forbidden: pod updates may not change the affinity of a pod "
                                      "without scheduling gates")
    old_node, new_node = old_affinity.get("nodeAffinity") or {}, new_affinity.get("nodeAffinity") or {}
    if {k: v for k, v in old_affinity.items() if k != "nodeAffinity"} != {k: v for k, v in new_affinity.items() if k != "nodeAffinity"}:
        raise Refused(422, "Invalid", "spec.affinity: Forbidden: only node affinity may change while gated")
    required = "requiredDuringSchedulingIgnoredDuringExecution"
    old_terms = (old_node.get(required) or {}).get("nodeSelectorTerms") or []
    new_terms = (new_node.get(required) or {}).get("nodeSelectorTerms") or []
    if old_terms:
        if len(new_terms) != len(old_terms):
            raise Refused(422, "Invalid", f"spec.affinity.nodeAffinity.{required}.nodeSelectorTerms: Invalid value: "
                                          "the number of terms may not change (that would widen the selection)")
        for i, (before, after) in enumerate(zip(old_terms, new_terms, strict=True)):
            for field in ("matchExpressions", "matchFields"):
                _requirements_kept(before.get(field) or [], after.get(field) or [],
                                   f"spec.affinity.nodeAffinity.{required}.nodeSelectorTerms[{i}].{field}")
