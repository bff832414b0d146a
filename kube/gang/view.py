"""The cluster as the gang controller sees it: the informers (kubeapi.py) of gang pods, nodes and,
when offers come from DRA, ResourceSlices and ResourceClaims, each object trimmed to the fields
read here (trim.py); each node's offer read from them.

A node's **offer** (offer.py) is None (it takes nothing) when the node is unusable
(``nodefit.node_unusable``) or its offer cannot be read (a malformed annotation or slice: logged
when it starts and when it ends). Otherwise it is the ``runtimekit.io/offer`` annotation (no
annotation: an empty offer, a node without GPUs), or the node's pool of the driver's
ResourceSlices less the devices allocated to ResourceClaims (``slices.offer_from_slices``).
``offer(node)`` is the offer last handed to the placer: the reservations compare it with the one
a reservation was made on, to know when it shows the reservation's pods allocated.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from .config import GangConfig
from .gangs import GANG_LABEL, GATE, JOBSET_NAME, GangError, GangPod, gang_pod
from .kubeapi import ClusterApi, Informer
from .nodefit import node_unusable
from .offer import OFFER_ANNOTATION, Offer, OfferError, parse_offer_annotation
from .placer import Placer
from .slices import allocated_devices, offer_from_slices
from .trim import trim_claim, trim_node, trim_pod, trim_slice

__all__ = ["ClusterView", "InvalidPod"]

log = logging.getLogger(__name__)


class InvalidPod:
    """A gated pod whose gang cannot be read: where it is, its conditions, and why."""

    def __init__(self, namespace: str, name: str, conditions: Mapping[str, Mapping[str, Any]], message: str) -> None:
        self.namespace, self.name, self.conditions, self.message = namespace, name, conditions, message


class ClusterView:
    """Informers and the offers derived from them (module doc)."""

    def __init__(self, api: ClusterApi, config: GangConfig, on_change: Callable[[], None]) -> None:
        self.config = config
        timeout = config.controller.watch_timeout_seconds
        self.pods: list[Informer] = []
        for namespace in config.namespaces or (None,):
            for label in (JOBSET_NAME, GANG_LABEL):
                where = f"namespace {namespace}" if namespace else "all namespaces"
                if namespace:
                    call, arguments = api.core.list_namespaced_pod, {"namespace": namespace, "label_selector": label}
                else:
                    call, arguments = api.core.list_pod_for_all_namespaces, {"label_selector": label}
                self.pods.append(Informer(f"pods with {label} in {where}", call, arguments, on_change, timeout, trim_pod))
        self.nodes = Informer("nodes", api.core.list_node, {}, on_change, timeout, trim_node)
        self.informers = [*self.pods, self.nodes]
        self.slices = self.claims = None
        if config.offers.source == "resourceslices":
            self.slices = Informer("resourceslices", api.resource.list_resource_slice,
                                   {"field_selector": f"spec.driver={config.offers.driver}"}, on_change, timeout, trim_slice)
            self.claims = Informer("resourceclaims", api.resource.list_resource_claim_for_all_namespaces, {}, on_change, timeout,
                                   trim_claim)
            self.informers += [self.slices, self.claims]
        self._known: dict[str, tuple[tuple[tuple[str, str], ...], Offer | None]] = {}  # what the placer was told
        self._problems: dict[str, str] = {}

    def start(self) -> None:
        for informer in self.informers:
            informer.start()

    def stop(self) -> None:
        for informer in self.informers:
            informer.stop()

    @property
    def synced(self) -> bool:
        return all(informer.synced for informer in self.informers)

    def node(self, name: str) -> Mapping[str, Any]:
        return self.nodes.objects.get(name) or {}

    def labels(self, name: str) -> Mapping[str, str]:
        return (self.node(name).get("metadata") or {}).get("labels") or {}

    def taints(self, name: str) -> list[Mapping[str, Any]]:
        return list((self.node(name).get("spec") or {}).get("taints") or [])

    def unusable(self, name: str) -> str | None:
        """Why node ``name`` takes no pods now (gone, NotReady, cordoned, ...), or None."""
        node = self.nodes.objects.get(name)
        return "gone" if node is None else node_unusable(node)

    def offer(self, name: str) -> Offer | None:
        """The offer of node ``name`` as the placer was last told (None: it takes nothing, or is unknown)."""
        known = self._known.get(name)
        return None if known is None else known[1]

    # ---- nodes and offers ----------------------------------------------------------------------

    def sync_nodes(self, placer: Placer) -> None:
        """Tell ``placer`` what changed in the nodes and their offers since the last call."""
        slices, claims = self._by_pool()
        for name, node in self.nodes.objects.items():
            labels = tuple(sorted(self.labels(name).items()))
            offer = self._offer(name, node, slices.get(name, ()), claims.get(name, ()))
            known = self._known.get(name)
            if known == (labels, offer):
                continue
            self._known[name] = (labels, offer)
            placer.set_node(name, dict(labels), offer)
        for name in [name for name in self._known if name not in self.nodes.objects]:
            placer.set_node(name, dict(self._known.pop(name)[0]), None)
            self._problems.pop(name, None)

    def _offer(self, name: str, node: Mapping[str, Any], slices: Iterable[Any], claims: Iterable[Any]) -> Offer | None:
        unusable = node_unusable(node)
        if unusable:
            self._problem(name, "", f"takes no gang pods: {unusable}")
            return None
        try:
            if self.slices is not None:
                offer = offer_from_slices(slices, name, allocated_devices(claims, name, self.config.offers.driver),
                                          self.config.offers.driver)
            else:
                text = ((node.get("metadata") or {}).get("annotations") or {}).get(OFFER_ANNOTATION)
                offer = Offer() if text is None else parse_offer_annotation(text)
        except OfferError as error:
            self._problem(name, f"offers nothing: {error}", "")
            return None
        self._problem(name, "", "")
        return offer

    def _problem(self, name: str, warning: str, info: str) -> None:
        """Log a node's problem when it starts or changes, and its end."""
        now = warning or info
        before = self._problems.get(name, "")
        if now == before:
            return
        if now:
            (log.warning if warning else log.info)("node %s %s", name, now)
            self._problems[name] = now
        else:
            log.info("node %s takes gang pods again", name)
            del self._problems[name]

    def _by_pool(self) -> tuple[dict[str, list[Any]], dict[str, list[Any]]]:
        """The driver's slices by pool (the node), and the claims holding devices of each pool."""
        slices: dict[str, list[Any]] = {}
        claims: dict[str, list[Any]] = {}
        if self.slices is None or self.claims is None:
            return slices, claims
        for item in self.slices.objects.values():
            spec = item.get("spec") or {}
            pool = (spec.get("pool") or {}).get("name") or spec.get("nodeName")
            if isinstance(pool, str):
                slices.setdefault(pool, []).append(item)
        driver = self.config.offers.driver
        for claim in self.claims.objects.values():
            results = ((((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}).get("results")) or []
            pools = {r.get("pool") for r in results if isinstance(r, Mapping) and r.get("driver") == driver}
            for pool in pools:
                if isinstance(pool, str):
                    claims.setdefault(pool, []).append(claim)
        return slices, claims

    # ---- pods ------------------------------------------------------------------------------------

    def gang_pods(self) -> tuple[list[GangPod], list[InvalidPod]]:
        """Every pod of a gang; and the gated pods whose gang labels cannot be read."""
        objects: dict[str, Mapping[str, Any]] = {}
        for informer in self.pods:
            objects.update(informer.objects)
        pods: list[GangPod] = []
        invalid: list[InvalidPod] = []
        demand = self.config.demand
        for obj in objects.values():
            try:
                pod = gang_pod(obj, demand.gpu_resource, demand.nic_resource)
            except GangError as error:
                meta, spec = obj.get("metadata") or {}, obj.get("spec") or {}
                gates = [g.get("name") for g in spec.get("schedulingGates") or () if isinstance(g, Mapping)]
                if GATE in gates:
                    conditions = {str(c.get("type")): c for c in (obj.get("status") or {}).get("conditions") or ()
                                  if isinstance(c, Mapping)}
                    invalid.append(InvalidPod(str(meta.get("namespace")), str(meta.get("name")), conditions, str(error)))
                continue
            if pod is not None:
                pods.append(pod)
        return pods, invalid
