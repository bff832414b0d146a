"""Which pods form one gang, what each asks, and how many the gang has: read from pods as the API
server returns them (JSON mappings). Pure: data in, data out; a malformed pod raises ``GangError``
naming the pod, the field and the rule.

**A gang** is, in one namespace:

- the pods of one JobSet: label ``jobset.sigs.k8s.io/jobset-name`` (set by the JobSet controller on
  every pod, with ``jobset.sigs.k8s.io/replicatedjob-name``, ``jobset.sigs.k8s.io/job-index`` and
  ``jobset.sigs.k8s.io/restart-attempt``; kubernetes-sigs/jobset api/jobset/v1alpha2
  jobset_types.go, pkg/constants). Only the pods of the highest restart attempt count: a JobSet
  that restarts deletes the older attempt's pods and creates new ones, which are a new gang. The
  gang is keyed by the label ``jobset.sigs.k8s.io/jobset-uid`` too (``JobSetUIDKey``, set with the
  name), so a JobSet deleted and created again under the same name is another gang; pods without
  that label are keyed by the name alone.
  Its size is the annotation ``runtimekit.io/gang-size`` when the pod template carries one, else
  read from the JobSet object (``jobset_size``);
- the pods labelled ``runtimekit.io/gang: <name>`` (a pod group), whose size is required as the
  annotation (or label) ``runtimekit.io/gang-size`` and must be the same on every pod.

**A pod's demand**: GPUs are the ``nvidia.com/gpu`` (configurable) limit, else request, summed
over its containers, or the largest over its init containers when that is more (the scheduler's
effective request); NICs likewise an optional extended resource. With DRA, each entry of
``spec.resourceClaims`` adds the devices its ResourceClaim (or ResourceClaimTemplate) requests
from the GPU and NIC device classes: ``claim_devices``.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "CONDITION", "GANG_LABEL", "GANG_SIZE", "GATE", "JOBSET_NAME", "JOBSET_UID", "PLACED_ANNOTATION", "RESTART_ATTEMPT", "ClaimRef",
    "GangError",
    "GangPod", "GangRef", "claim_devices", "gang_pod", "group_gangs", "jobset_size", "pinned_terms",
]

GATE = "runtimekit.io/gang"  # the scheduling gate that holds a gang's pods
GANG_LABEL = "runtimekit.io/gang"  # a pod group's name
GANG_SIZE = "runtimekit.io/gang-size"  # the pods a gang has (annotation, or label)
PLACED_ANNOTATION = "runtimekit.io/gang-node"  # the node a pod was released to (written with the release)
CONDITION = "runtimekit.io/GangPlaced"  # the pod condition saying whether (and why not) its gang is placed
JOBSET_NAME = "jobset.sigs.k8s.io/jobset-name"
JOBSET_UID = "jobset.sigs.k8s.io/jobset-uid"
REPLICATED_JOB = "jobset.sigs.k8s.io/replicatedjob-name"
RESTART_ATTEMPT = "jobset.sigs.k8s.io/restart-attempt"
MAX_GANG = 100_000  # pods in one gang at most: a larger size is a typo


class GangError(ValueError):
    """A pod, claim or JobSet that cannot be read as part of a gang; the message names the field and rule."""


@dataclass(frozen=True, slots=True)
class GangRef:
    """The gang a pod belongs to: ``key`` "namespace/name", or "namespace/name@uid" for a JobSet
    whose pods carry its uid (``JOBSET_UID``); ``kind`` "JobSet" or "PodGroup"; ``attempt`` the
    JobSet's restart attempt (0 for a pod group); ``size`` from the pod's ``runtimekit.io/gang-size``
    (None: read it from the JobSet); ``uid`` the JobSet's uid ("" when unknown)."""

    key: str
    kind: str
    namespace: str
    name: str
    attempt: int = 0
    size: int | None = None
    uid: str = ""


@dataclass(frozen=True, slots=True)
class ClaimRef:
    """A ``spec.resourceClaims`` entry: a ResourceClaim by name, or the template one is made from."""

    namespace: str
    name: str
    template: bool


@dataclass(frozen=True, slots=True)
class GangPod:
    """One pod of a gang, as far as placing it goes."""

    namespace: str
    name: str
    uid: str
    gang: GangRef
    gated: bool  # our scheduling gate is on it
    node: str | None  # spec.nodeName: bound
    gpus: int  # from container resources (claims add theirs: ``claims``)
    nics: int
    claims: tuple[ClaimRef, ...] = ()
    deleting: bool = False  # metadata.deletionTimestamp is set
    finished: bool = False  # status.phase Succeeded or Failed: no longer one of the gang's running pods
    succeeded: bool = False  # status.phase Succeeded: its part of the gang's work is done (an Indexed Job does not run it again)
    owned: bool = False  # a controller (a Job) owns it and makes a new one when it is gone
    created: str = ""  # metadata.creationTimestamp (RFC 3339: orders as text)
    released_to: str | None = None  # the runtimekit.io/gang-node annotation
    gates: tuple[str, ...] = ()
    terms: tuple[Mapping[str, Any], ...] = ()  # required node affinity terms as the pod has them
    node_selector: Mapping[str, str] = field(default_factory=dict)
    tolerations: tuple[Mapping[str, Any], ...] = ()
    conditions: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)  # type -> condition


def _count(value: Any, where: str) -> int:
    """A non-negative whole count from an int or a quantity string ("2", not "2.5" or "1k")."""
    if isinstance(value, bool):
        raise GangError(f"{where}: must be a whole number, got {value!r}")
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if not isinstance(value, int) or value < 0:
        raise GangError(f"{where}: must be a whole number >= 0, got {str(value)[:40]!r}")
    return value


def _mapping(value: Any, where: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise GangError(f"{where}: must be a mapping, got {type(value).__name__}")
    return value


def _list(value: Any, where: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise GangError(f"{where}: must be a list, got {type(value).__name__}")
    return value


def _size(text: str, where: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= MAX_GANG:
        raise GangError(f"{where}: must be a whole number of pods between 1 and {MAX_GANG}, got {text[:40]!r}")
    return int(text)


def gang_of(meta: Mapping[str, Any]) -> GangRef | None:
    """The gang of a pod's metadata, None when the pod belongs to none; GangError when its labels
    name a gang badly."""
    namespace = str(meta.get("namespace") or "default")
    labels = _mapping(meta.get("labels"), "metadata.labels")
    annotations = _mapping(meta.get("annotations"), "metadata.annotations")
    size_text = annotations.get(GANG_SIZE, labels.get(GANG_SIZE))
    size = None if size_text is None else _size(str(size_text), f"metadata.annotations[{GANG_SIZE}]")
    jobset = labels.get(JOBSET_NAME)
    if jobset:
        attempt_text = str(labels.get(RESTART_ATTEMPT, "0"))
        if not attempt_text.isdigit():
            raise GangError(f"metadata.labels[{RESTART_ATTEMPT}]: must be a whole number, got {attempt_text[:40]!r}")
        uid = str(labels.get(JOBSET_UID) or "")
        key = f"{namespace}/{jobset}" + (f"@{uid}" if uid else "")
        return GangRef(key, "JobSet", namespace, str(jobset), int(attempt_text), size, uid)
    group = labels.get(GANG_LABEL)
    if group:
        if size is None:
            raise GangError(f"metadata.annotations[{GANG_SIZE}]: required on a pod labelled {GANG_LABEL} "
                            "(the number of pods the gang has)")
        return GangRef(f"{namespace}/{group}", "PodGroup", namespace, str(group), 0, size)
    return None


def _resource(resources: Mapping[str, Any], name: str, where: str) -> int:
    limits = _mapping(resources.get("limits"), f"{where}.limits")
    requests = _mapping(resources.get("requests"), f"{where}.requests")
    if name in limits:
        return _count(limits[name], f"{where}.limits[{name}]")
    return _count(requests.get(name, 0), f"{where}.requests[{name}]")


def _effective(spec: Mapping[str, Any], name: str | None) -> int:
    """The pod's effective request of extended resource ``name``: the sum over its containers, or the
    largest over its init containers when that is more (kube-scheduler's computePodResourceRequest)."""
    if not name:
        return 0
    total = sum(_resource(_mapping(c, f"spec.containers[{i}]").get("resources") or {}, name, f"spec.containers[{i}].resources")
                for i, c in enumerate(_list(spec.get("containers"), "spec.containers")))
    init = max((_resource(_mapping(c, f"spec.initContainers[{i}]").get("resources") or {}, name, f"spec.initContainers[{i}].resources")
                for i, c in enumerate(_list(spec.get("initContainers"), "spec.initContainers"))), default=0)
    return max(total, init)


def gang_pod(pod: Mapping[str, Any], gpu_resource: str, nic_resource: str | None) -> GangPod | None:
    """The pod as a gang member, None when it names no gang; GangError naming the pod and field."""
    meta = _mapping(pod.get("metadata"), "metadata")
    name = str(meta.get("name") or "")
    try:
        gang = gang_of(meta)
        if gang is None:
            return None
        spec = _mapping(pod.get("spec"), "spec")
        gates = tuple(str(_mapping(g, "spec.schedulingGates[]").get("name")) for g in _list(spec.get("schedulingGates"), "spec.schedulingGates"))
        claims = tuple(_claim_ref(entry, gang.namespace, i) for i, entry in enumerate(_list(spec.get("resourceClaims"), "spec.resourceClaims")))
        affinity = _mapping(_mapping(spec.get("affinity"), "spec.affinity").get("nodeAffinity"), "spec.affinity.nodeAffinity")
        required = _mapping(affinity.get("requiredDuringSchedulingIgnoredDuringExecution"),
                            "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution")
        terms = tuple(_mapping(t, "nodeSelectorTerms[]") for t in _list(required.get("nodeSelectorTerms"), "nodeSelectorTerms"))
        status = _mapping(pod.get("status"), "status")
        conditions = {str(c.get("type")): c for c in (_mapping(c, "status.conditions[]") for c in _list(status.get("conditions"), "status.conditions"))}
        owners = _list(meta.get("ownerReferences"), "metadata.ownerReferences")
        annotations = _mapping(meta.get("annotations"), "metadata.annotations")
        return GangPod(
            namespace=gang.namespace, name=name, uid=str(meta.get("uid") or ""), gang=gang, gated=GATE in gates,
            node=spec.get("nodeName") or None, gpus=_effective(spec, gpu_resource), nics=_effective(spec, nic_resource),
            claims=claims, deleting=bool(meta.get("deletionTimestamp")), finished=status.get("phase") in ("Succeeded", "Failed"),
            succeeded=status.get("phase") == "Succeeded",
            owned=any(_mapping(o, "ownerReferences[]").get("controller") for o in owners),
            created=str(meta.get("creationTimestamp") or ""), released_to=annotations.get(PLACED_ANNOTATION),
            gates=gates, terms=terms, node_selector={str(k): str(v) for k, v in _mapping(spec.get("nodeSelector"), "spec.nodeSelector").items()},
            tolerations=tuple(_mapping(t, "spec.tolerations[]") for t in _list(spec.get("tolerations"), "spec.tolerations")),
            conditions=conditions,
        )
    except GangError as error:
        raise GangError(f"pod {meta.get('namespace', 'default')}/{name}: {error}") from None


def _claim_ref(entry: Any, namespace: str, i: int) -> ClaimRef:
    where = f"spec.resourceClaims[{i}]"
    entry = _mapping(entry, where)
    if entry.get("resourceClaimName"):
        return ClaimRef(namespace, str(entry["resourceClaimName"]), False)
    if entry.get("resourceClaimTemplateName"):
        return ClaimRef(namespace, str(entry["resourceClaimTemplateName"]), True)
    raise GangError(f"{where}: names neither resourceClaimName nor resourceClaimTemplateName")


def claim_devices(spec: Mapping[str, Any], gpu_classes: Collection[str], nic_classes: Collection[str],
                  where: str = "spec") -> tuple[int, int]:
    """(GPUs, NICs) a ResourceClaim spec (``spec.devices.requests``, resource.k8s.io/v1) asks from the
    GPU and NIC device classes: ``exactly`` requests with ``allocationMode`` ExactCount (``count``,
    default 1). ``allocationMode: All`` and ``firstAvailable`` of such a class say no fixed count:
    GangError. Requests of other classes (TDM shares, MIG slices) count nothing."""
    gpus = nics = 0
    devices = _mapping(_mapping(spec, where).get("devices"), f"{where}.devices")
    for i, request in enumerate(_list(devices.get("requests"), f"{where}.devices.requests")):
        at = f"{where}.devices.requests[{i}]"
        request = _mapping(request, at)
        for j, option in enumerate(_list(request.get("firstAvailable"), f"{at}.firstAvailable")):
            if _mapping(option, f"{at}.firstAvailable[{j}]").get("deviceClassName") in {*gpu_classes, *nic_classes}:
                raise GangError(f"{at}.firstAvailable: a prioritized list of GPUs or NICs has no fixed count to place a gang by")
        exactly = _mapping(request.get("exactly"), f"{at}.exactly")
        device_class = exactly.get("deviceClassName")
        if device_class not in gpu_classes and device_class not in nic_classes:
            continue
        if exactly.get("allocationMode", "ExactCount") != "ExactCount":
            raise GangError(f"{at}.exactly.allocationMode: {exactly.get('allocationMode')} has no fixed count to place a gang by "
                            "(use ExactCount)")
        count = _count(exactly.get("count", 1), f"{at}.exactly.count")
        if device_class in gpu_classes:
            gpus += count
        else:
            nics += count
    return gpus, nics


def jobset_size(jobset: Mapping[str, Any]) -> int:
    """The pods a JobSet (jobset.x-k8s.io/v1alpha2) runs at once: over ``spec.replicatedJobs``,
    ``replicas`` (default 1) times each Job's pods, ``parallelism`` (default 1) capped by
    ``completions`` when set. GangError for a JobSet whose pods start in stages (``startupPolicy``
    InOrder, or a replicated job with ``dependsOn``: later jobs are created only once earlier ones
    are Ready or Complete, which a gang held whole would never let happen)."""
    spec = _mapping(jobset.get("spec"), "spec")
    order = _mapping(spec.get("startupPolicy"), "spec.startupPolicy").get("startupPolicyOrder")
    if order == "InOrder":
        raise GangError("spec.startupPolicy.startupPolicyOrder: InOrder starts each replicated job after the one before runs; "
                        "a gang is placed whole, so use AnyOrder")
    total = 0
    for i, replicated in enumerate(_list(spec.get("replicatedJobs"), "spec.replicatedJobs")):
        at = f"spec.replicatedJobs[{i}]"
        replicated = _mapping(replicated, at)
        if _list(replicated.get("dependsOn"), f"{at}.dependsOn"):
            raise GangError(f"{at}.dependsOn: the JobSet creates this replicated job only after the ones it depends on are "
                            "Ready or Complete; a gang is placed whole, so its pods would wait for each other forever")
        job = _mapping(_mapping(replicated.get("template"), f"{at}.template").get("spec"), f"{at}.template.spec")
        per_job = _count(job.get("parallelism", 1), f"{at}.template.spec.parallelism")
        if job.get("completions") is not None:
            per_job = min(per_job, _count(job["completions"], f"{at}.template.spec.completions"))
        total += _count(replicated.get("replicas", 1), f"{at}.replicas") * per_job
    if not 1 <= total <= MAX_GANG:
        raise GangError(f"spec.replicatedJobs: the JobSet runs {total} pods at once; a gang has 1 to {MAX_GANG}")
    return total


def group_gangs(pods: Iterable[GangPod]) -> dict[str, list[GangPod]]:
    """Pods by gang key, each gang's pods of its highest restart attempt only, by name."""
    gangs: dict[str, list[GangPod]] = {}
    for pod in pods:
        gangs.setdefault(pod.gang.key, []).append(pod)
    for key, members in gangs.items():
        newest = max(pod.gang.attempt for pod in members)
        gangs[key] = sorted((pod for pod in members if pod.gang.attempt == newest), key=lambda pod: pod.name)
    return gangs


def pinned_terms(terms: Iterable[Mapping[str, Any]], node: str) -> list[dict[str, Any]]:
    """The required node affinity terms that pin a pod to ``node``: each existing term with the
    field requirement ``metadata.name In [node]`` added to its ``matchFields`` (terms are ORed,
    requirements inside one ANDed, so every term then selects ``node`` at most), or one term of that
    requirement alone when there were none. Only additions: what the API server allows on a gated
    pod (KEP-3838, pod mutable scheduling directives)."""
    pin = {"key": "metadata.name", "operator": "In", "values": [node]}
    pinned = [{**term, "matchFields": [*term.get("matchFields", []), pin]} for term in terms]
    return pinned or [{"matchFields": [pin]}]

