"""Keeps the node annotation ``runtimekit.io/offer`` current: what this node offers the gang placer.

``OfferWriter.run()`` (with ``offer_annotation.enabled``) wakes when the advertised devices change
(``DeviceWatch.wait_newer``: a health verdict, a device appearing or going) and every
``offer_annotation.poll_seconds``, and then:

1. reads which devices pods hold from the kubelet's pod-resources API (List) on
   ``offer_annotation.pod_resources_socket``; while it cannot, the last answer stands (the kubelet
   keeps its pods' devices while it restarts);
2. computes the offer (``offer.node_offer``) once the agent's node and the pods' devices have
   each been read once: before that it writes nothing, as the placer then sees a node without the
   annotation, which offers no devices. The topology is read with the node (``DeviceWatch``); when
   GetTopology fails (the agent's ``topology.enabled`` false) the offer is made from an empty
   one: each GPU an NVLink group of its own, no RDMA NIC;
3. writes the annotation (``offer_annotation`` of kube/gang/offer.py, JSON version 1) when its
   text differs from the one this process last wrote; and every ``offer_annotation.resync_seconds``
   (the first time at start) reads it back and writes it again if someone changed or removed it.

Faults never stop the plugin serving the kubelet. The pod-resources API or the Kubernetes API
failing is logged once per kind of fault (and once when it answers again), and that source is
tried again after ``poll_seconds``, the wait doubling with each failure in a row up to
``resync_seconds``. A bug (an exception of any other kind) ends the task, and the process with it,
as the device watch's do.

``withdraw()`` (the process stopping) removes the annotation again, within
``WITHDRAW_TIMEOUT_SECONDS``: a plugin that is gone advertises nothing to the kubelet either.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from runtimekit._proto.runtimekit.v1 import node_pb2
from runtimekit.attribution.podresources import PodResourcesClient
from runtimekit.grpc_unix import UnixRpcError
from runtimekit.kube.gang.offer import offer_annotation
from runtimekit.schema import shown
from runtimekit.waiting import finished_within, within

from .config import DevicePluginConfig
from .nodeapi import NodeAnnotation, api_fault
from .offer import node_offer
from .watch import DeviceWatch

log = logging.getLogger(__name__)

#: How long a stopping plugin waits for its annotation to be removed, in seconds.
WITHDRAW_TIMEOUT_SECONDS = 5.0


@dataclass
class _Backoff:
    """One source's failures in a row: when to try it again, and the fault last logged."""

    source: str
    first_seconds: float
    longest_seconds: float
    failures: int = 0
    retry_at: float = 0.0
    fault: str = ""

    def due(self, now: float) -> bool:
        return now >= self.retry_at

    def failed(self, now: float, fault: str, detail: str) -> None:
        self.failures += 1
        delay = min(self.first_seconds * 2 ** (self.failures - 1), self.longest_seconds)
        self.retry_at = now + delay
        if fault != self.fault:
            log.warning("offer annotation: %s: %s (trying again with backoff, up to every %gs; the device "
                        "plugin serves on)", self.source, detail, self.longest_seconds)
        self.fault = fault

    def recovered(self) -> None:
        if self.fault:
            log.info("offer annotation: %s answers again", self.source)
        self.failures, self.retry_at, self.fault = 0, 0.0, ""


class OfferWriter:
    """The annotation of one node (``annotation``), kept to what ``watch`` and the kubelet's pods say."""

    def __init__(self, watch: DeviceWatch, config: DevicePluginConfig, annotation: NodeAnnotation) -> None:
        self.watch = watch
        self.config = config
        self.settings = config.offer_annotation
        self.annotation = annotation
        self.pods = PodResourcesClient(self.settings.pod_resources_socket, config.agent_timeout_seconds)
        self.written: str | None = None  # the text the Node carries as far as this process knows
        self._pod_devices: frozenset[str] | None = None  # every device id pods hold (None: never read)
        self._resync_at = 0.0
        self._writing: asyncio.Future[None] | None = None  # the newest write (it may outlive a cancelled step)
        first, longest = self.settings.poll_seconds, max(self.settings.poll_seconds, self.settings.resync_seconds)
        self._kubelet = _Backoff("the kubelet's pod-resources API", first, longest)
        self._api = _Backoff("the Kubernetes API", first, longest)

    async def run(self) -> None:
        version = self.watch.version
        while True:
            await self.step()
            version = await within(self.settings.poll_seconds, self.watch.wait_newer(version), version)

    def desired(self) -> str | None:
        """The annotation's text now; None until the node and the pods' devices are known. A node
        known without a topology (GetTopology failed: the agent's ``topology.enabled`` false) is
        offered with an empty one: each GPU a group of its own, no NIC."""
        if not self.watch.node_known or self._pod_devices is None:
            return None
        topology = self.watch.topology if self.watch.topology is not None else node_pb2.Topology()
        return offer_annotation(node_offer(self.watch.units, self.config.resource_name, topology, self._pod_devices))

    async def step(self) -> None:
        """One pass: read the pods' devices when due, then write the annotation when it must be."""
        now = asyncio.get_running_loop().time()
        if self._kubelet.due(now):
            await self._read_pods(now)
        text = self.desired()
        if text is None or not self._api.due(now):
            return
        resync = now >= self._resync_at
        if text != self.written or resync:
            await self._publish(text, resync, now)

    async def _read_pods(self, now: float) -> None:
        try:
            rows = await self.pods.list()
        except UnixRpcError as error:
            self._kubelet.failed(now, error.code or error.reason, str(error))
            return
        self._kubelet.recovered()
        self._pod_devices = frozenset(device for row in rows for device in row.device_ids)

    async def _publish(self, text: str, resync: bool, now: float) -> None:
        try:
            found = await self.annotation.read() if resync else self.written
            if found != text:
                if resync and self.written is not None:
                    log.warning("offer annotation: the Node's was changed to %s; writing it again", shown(found))
                self._writing = asyncio.ensure_future(self.annotation.write(text))
                await asyncio.shield(self._writing)  # cancelled (stopping): it finishes, then withdraw runs
                log.info("offer annotation: %s", text)
        except Exception as error:  # any failure on the Kubernetes side (the client raises many kinds)
            self._api.failed(now, api_fault(error), f"{api_fault(error)}: {' '.join(str(error).split())[:300]}")
            return
        self._api.recovered()
        self.written = text
        self._resync_at = now + self.settings.resync_seconds  # known current now: read back a period later

    async def withdraw(self) -> None:
        """Remove the annotation when this process wrote it, or found it current, or was writing it
        when stopped (after that write ends: it must not land after the removal); failures are logged."""
        interrupted = False
        if self._writing is not None and not self._writing.done():
            interrupted = True
            await asyncio.wait([self._writing], timeout=WITHDRAW_TIMEOUT_SECONDS)
            if self._writing.done() and not self._writing.cancelled():
                self._writing.exception()  # retrieved: its failure, if any, changes nothing now
        if self.written is None and not interrupted:
            return
        try:
            removed = await finished_within(WITHDRAW_TIMEOUT_SECONDS, self.annotation.write(None))
        except Exception as error:  # stopping: whatever went wrong, log it and stop
            log.warning("offer annotation: could not remove it: %s", api_fault(error))
            return
        if not removed:
            log.warning("offer annotation: could not remove it: no answer within %.0f s", WITHDRAW_TIMEOUT_SECONDS)
            return
        self.written = None
        log.info("offer annotation: removed (the plugin stops)")

    async def close(self) -> None:
        await self.pods.close()
