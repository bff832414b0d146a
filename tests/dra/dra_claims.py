"""ResourceClaims as the API server holds them once the scheduler allocated them (resource.k8s.io/v1),
for the DRA driver's prepare tests, and a ClaimReader that serves them.

``resource_claim`` builds one claim from its allocated devices (``Alloc``: the request, the device
name the driver published, consumedCapacity, shareID) and opaque configurations (the claim's and
its DeviceClass's, copied into ``status.allocation.devices.config`` as the allocator copies them:
class entries ``FromClass`` first, then the claim's ``FromClaim``). Every claim built is checked
against the strict OpenAPI schema of the API server's release (tests/kube_resource_validation.py),
so no test prepares a claim that no API server would hold.

``ClaimStore`` is the driver's ``ClaimReader`` without an API server: it answers a copy of the
stored claim, None for one it does not hold (the API server's 404), and ``ClaimReadError`` while
``down`` is set (an API server that cannot be reached).
"""

from __future__ import annotations

import copy
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from runtimekit.kube.dra.claims import ClaimReadError, ClaimRef
from tests.kube_resource_validation import schema_errors

DRIVER = "gpu.runtimekit.io"
NODE = "node-a"
API_VERSION = "v1.35.0"  # the release whose schema the claims are checked against
CLASS_OF = {"gpu": "gpu.runtimekit.io", "tdm": "tdm.runtimekit.io", "mig": "mig.runtimekit.io", "nic": "nic.runtimekit.io"}


def slice_config(**fields: Any) -> dict[str, Any]:
    """A SliceConfig's parameters (``compute=50, memory="2GiB"``; anything else to test refusals)."""
    return {"apiVersion": "runtimekit.io/v1", "kind": "SliceConfig", **fields}


@dataclass(frozen=True)
class Alloc:
    """One allocated device: request ``request`` got ``device`` of ``driver``'s pool ``pool``."""

    request: str
    device: str
    device_class: str = "gpu"  # a key of CLASS_OF
    driver: str = DRIVER
    pool: str = NODE
    consumed: dict[str, str] | None = None  # consumedCapacity (a share of a device with multiple allocations)
    admin_access: bool = False


@dataclass(frozen=True)
class Config:
    """One opaque configuration: ``parameters`` for ``driver``, for ``requests`` (empty: all of them)."""

    parameters: Any
    requests: tuple[str, ...] = ()
    driver: str = DRIVER


def resource_claim(name: str, allocs: Sequence[Alloc], *, configs: Sequence[Config] = (),
                   class_configs: Sequence[Config] = (), namespace: str = "default", uid: str | None = None,
                   allocated: bool = True) -> dict[str, Any]:
    """A ResourceClaim allocated on NODE (``allocated`` False: as created, no status yet)."""
    requests: dict[str, dict[str, Any]] = {}
    for alloc in allocs:
        base, _, sub = alloc.request.partition("/")
        exactly: dict[str, Any] = {"deviceClassName": CLASS_OF[alloc.device_class]}
        if alloc.admin_access:
            exactly["adminAccess"] = True
        if sub:  # a subrequest: one of the request's firstAvailable alternatives
            requests.setdefault(base, {"name": base, "firstAvailable": []})["firstAvailable"].append({"name": sub, **exactly})
        else:
            requests.setdefault(base, {"name": base, "exactly": exactly})
    spec_configs = [{"requests": list(c.requests), "opaque": {"driver": c.driver, "parameters": c.parameters}}
                    if c.requests else {"opaque": {"driver": c.driver, "parameters": c.parameters}} for c in configs]
    claim: dict[str, Any] = {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace, "uid": uid or str(uuid.uuid4()), "resourceVersion": "1"},
        "spec": {"devices": {"requests": list(requests.values()), **({"config": spec_configs} if spec_configs else {})}},
    }
    if allocated:
        results = []
        for alloc in allocs:
            result: dict[str, Any] = {"request": alloc.request, "driver": alloc.driver, "pool": alloc.pool, "device": alloc.device}
            if alloc.consumed is not None:
                result["consumedCapacity"] = dict(alloc.consumed)
                result["shareID"] = str(uuid.uuid4())
            if alloc.admin_access:
                result["adminAccess"] = True
            results.append(result)
        allocation_configs = [{"source": source, **({"requests": list(c.requests)} if c.requests else {}),
                               "opaque": {"driver": c.driver, "parameters": c.parameters}}
                              for source, group in (("FromClass", class_configs), ("FromClaim", configs)) for c in group]
        devices: dict[str, Any] = {"results": results}
        if allocation_configs:
            devices["config"] = allocation_configs
        claim["status"] = {"allocation": {"devices": devices, "nodeSelector": {"nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [NODE]}]}]}}}
    errors = schema_errors(claim, API_VERSION)
    if errors:
        raise ValueError(f"ResourceClaim {name}: {'; '.join(errors)}")
    return claim


def ref_of(claim: dict[str, Any]) -> ClaimRef:
    """The claim as the kubelet names it."""
    meta = claim["metadata"]
    return ClaimRef(namespace=meta["namespace"], uid=meta["uid"], name=meta["name"])


@dataclass
class ClaimStore:
    """A ClaimReader over stored claims (see the module doc); ``reads`` counts the GETs."""

    claims: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    down: bool = False
    reads: int = 0

    def add(self, claim: dict[str, Any]) -> ClaimRef:
        meta = claim["metadata"]
        self.claims[(meta["namespace"], meta["name"])] = copy.deepcopy(claim)
        return ref_of(claim)

    def remove(self, ref: ClaimRef) -> None:
        self.claims.pop((ref.namespace, ref.name), None)

    async def read(self, namespace: str, name: str) -> dict[str, Any] | None:
        self.reads += 1
        if self.down:
            raise ClaimReadError(f"GET ResourceClaim {namespace}/{name}: ConnectionRefusedError: the API server is down")
        found = self.claims.get((namespace, name))
        return copy.deepcopy(found) if found is not None else None
