"""What a gang needs that its pods do not say themselves: its size from the JobSet, and the devices
its pods' ResourceClaims ask. Both are read from the API server once and kept: a JobSet's
``replicatedJobs`` and a ResourceClaim's or ResourceClaimTemplate's ``spec`` are immutable once
created (JobSet's webhook; resource.k8s.io/v1 validation). An object that does not exist yet is
not kept, so the next round reads it again. A JobSet deleted and created again under the same name
is another object: sizes are kept by the gang's key, which holds the JobSet's uid when its pods
carry the label ``jobset.sigs.k8s.io/jobset-uid``, and a JobSet read whose uid is not the pods'
counts as not found (the pods belong to the JobSet deleted before).
"""

from __future__ import annotations

from collections.abc import Collection

from .config import DemandConfig
from .gangs import ClaimRef, GangError, GangPod, GangRef, claim_devices, jobset_size
from .kubeapi import ClusterApi

__all__ = ["DemandReader"]


class DemandReader:
    """Gang sizes and claim devices, read through ``api`` and kept (module doc)."""

    def __init__(self, api: ClusterApi, settings: DemandConfig) -> None:
        self.api, self.settings = api, settings
        self._sizes: dict[tuple[str, int], int] = {}
        self._claims: dict[ClaimRef, tuple[int, int]] = {}

    async def size(self, gang: GangRef) -> int:
        """The pods ``gang`` has: its pods' annotation, else its JobSet's; GangError when unknown."""
        if gang.size is not None:
            return gang.size
        known = self._sizes.get((gang.key, gang.attempt))
        if known is not None:
            return known
        named = f"{gang.namespace}/{gang.name}"
        jobset = await self.api.read_jobset(gang.namespace, gang.name)
        if jobset is None:
            raise GangError(f"JobSet {named} not found (jobset.x-k8s.io/v1alpha2); its pods' size is unknown")
        uid = (jobset.get("metadata") or {}).get("uid")
        if gang.uid and uid != gang.uid:
            raise GangError(f"JobSet {named}: its uid is {uid}, not the pods' {gang.uid} (the JobSet was created again); "
                            "these pods belong to the one deleted before")
        try:
            size = jobset_size(jobset)
        except GangError as error:
            raise GangError(f"JobSet {named}: {error}") from None
        self._sizes[(gang.key, gang.attempt)] = size
        return size

    async def devices(self, pod: GangPod) -> tuple[int, int]:
        """(GPUs, NICs) ``pod`` asks: its container resources plus its claims' devices."""
        gpus, nics = pod.gpus, pod.nics
        for ref in pod.claims:
            counted = self._claims.get(ref)
            if counted is None:
                spec = await self.api.read_claim_spec(ref)
                kind = "ResourceClaimTemplate" if ref.template else "ResourceClaim"
                if spec is None:
                    raise GangError(f"pod {pod.name}: {kind} {ref.namespace}/{ref.name} not found")
                try:
                    counted = claim_devices(spec, self.settings.gpu_device_classes, self.settings.nic_device_classes)
                except GangError as error:
                    raise GangError(f"pod {pod.name}: {kind} {ref.namespace}/{ref.name}: {error}") from None
                self._claims[ref] = counted
            gpus, nics = gpus + counted[0], nics + counted[1]
        return gpus, nics

    def keep_only(self, gangs: Collection[str], claims: Collection[ClaimRef]) -> None:
        """Forget what no gang or claim in use needs any more."""
        self._sizes = {key: size for key, size in self._sizes.items() if key[0] in gangs}
        self._claims = {ref: counted for ref, counted in self._claims.items() if ref in claims}
