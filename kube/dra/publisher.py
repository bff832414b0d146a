"""Publishes the node's devices as ResourceSlices and keeps them current.

At start it reads the API server's version (``GET /version``: it picks the slice layout,
resourceslices.py) and the Node's uid (the slices' owner), then publishes; after that it reads the
agent every ``publish_interval_seconds`` (or at once after ``wake()``) and writes only when what it
would publish changed, or every ``RESYNC_SECONDS`` to repair slices changed or deleted by others
(the kubelet wipes a driver's slices when it goes away), and at once after ``resync_now()`` (the
service calls it when the kubelet registers the driver again). The version and the Node's uid are read
again with every resync (and every retry after a failure): a control plane upgraded from 1.34 to
1.35 gets the split layout within a minute, not at the driver's next restart, and a Node deleted
and made again (the garbage collector deletes slices owned by the old uid) gets slices owned by
the new one. Writing, as the Kubernetes helper's
ResourceSlice controller does (k8s.io/dynamic-resource-allocation ``resourceslice``):

1. list the pool's slices (``fieldSelector spec.nodeName=<node>,spec.driver=<driver>``);
2. when they say what is wanted (quantities compared by value), nothing is written;
3. else the pool generation becomes one more than the highest seen (listed, or written by this
   process), obsolete slices are deleted first, the others replaced (PUT, at their
   resourceVersion: a 409 means someone else wrote; the next round lists again), new ones created.

A slice the API server stored without some of the fields sent (a feature gate off:
DRAConsumableCapacity drops ``allowMultipleAllocations`` and ``requestPolicy``,
DRAPartitionableDevices drops counters) is logged once as a warning, and not written again and
again: what the server answered to the last write stands for what was sent.

Errors of the agent or the API server never end ``run``: they are logged on the first failure
and on recovery, and retried after ``publish_interval_seconds`` doubled per failure in a row, up
to ``BACKOFF_MAX_SECONDS``. The ``kubernetes`` client is synchronous: its calls run in a thread,
each with a deadline (``REQUEST_TIMEOUT_SECONDS``: connect, read).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from runtimekit._proto.runtimekit.v1 import node_pb2, slice_pb2
from runtimekit.kube.kubeclient import error_line, one_line, status_message
from runtimekit.waiting import within

from .config import DraConfig
from .devices import inventory
from .resourceslices import Body, pair, same_spec, slice_body, slice_contents, split_layout, wanted_spec

__all__ = ["Publisher", "Snapshot"]

log = logging.getLogger(__name__)

RESYNC_SECONDS = 60.0  # how often the slices are listed even when the agent's answer did not change
#: Deadline of every request to the API server, in seconds: (to connect, to read the answer). A
#: connection left half-open (the server or a proxy gone without a reset) then fails the round,
#: which is retried, instead of stalling publishing for good (a GPU fallen off the bus stays published).
REQUEST_TIMEOUT_SECONDS = (5.0, 15.0)
BACKOFF_MAX_SECONDS = 60.0  # the longest wait between two tries after failures

Snapshot = Callable[[], Awaitable[tuple[node_pb2.Node, node_pb2.Topology, list[slice_pb2.Slice]]]]
GATE_FIELDS = (("allowMultipleAllocations", "DRAConsumableCapacity"), ("requestPolicy", "DRAConsumableCapacity"),
               ("sharedCounters", "DRAPartitionableDevices"), ("consumesCounters", "DRAPartitionableDevices"))


def _fields(value: Any) -> set[str]:
    """Every key used anywhere in ``value``."""
    if isinstance(value, dict):
        return set(value).union(*(_fields(item) for item in value.values()))
    if isinstance(value, list):
        return set().union(*(_fields(item) for item in value))
    return set()


class Publisher:
    """The node's pool of ResourceSlices, kept current from the agent (see the module doc)."""

    def __init__(self, api_client: Any, snapshot: Snapshot, config: DraConfig,
                 request_timeout: tuple[float, float] = REQUEST_TIMEOUT_SECONDS) -> None:
        from kubernetes import client

        self._resource = client.ResourceV1Api(api_client)
        self._core = client.CoreV1Api(api_client)
        self._version_api = client.VersionApi(api_client)
        self._snapshot = snapshot
        self._driver, self._node = config.driver_name, config.node_name
        self._interval = config.publish_interval_seconds
        self._request_timeout = request_timeout
        self._split: bool | None = None
        self._node_uid = ""
        self._generation = 0  # the highest pool generation this process wrote
        self._current: list[dict[str, Any]] | None = None  # the slice contents last found or made current
        self._synced_at = 0.0
        self._sent: dict[str, tuple[str, dict[str, Any]]] = {}  # slice name -> (resourceVersion answered, spec sent)
        self._withdrawn: dict[int, str] = {}
        self._warned: set[str] = set()
        self._wake = asyncio.Event()
        self.syncs = 0  # rounds that listed the pool
        self.writes = 0  # rounds that wrote to it

    def wake(self) -> None:
        """Read the agent now instead of at the next interval (the agent announced a change)."""
        self._wake.set()

    def resync_now(self) -> None:
        """List and repair the pool now, even when the agent's answer did not change (the kubelet
        registered the driver again: a restarted kubelet deletes its node's slices)."""
        self._synced_at = float("-inf")
        self._wake.set()

    async def run(self) -> None:
        """Publish now, then keep the slices current until cancelled."""
        failures = 0
        while True:
            try:
                await self.publish()
            except asyncio.CancelledError:
                raise
            except Exception as error:  # the agent, the API server, or an answer neither should give
                failures += 1
                if failures == 1:
                    log.warning("publishing ResourceSlices failed, will retry: %s", _describe(error))
                else:
                    log.debug("publishing ResourceSlices failed again (%d in a row): %s", failures, _describe(error))
                self._current = None  # list again next time
            else:
                if failures:
                    log.info("publishing ResourceSlices works again after %d failures", failures)
                failures = 0
            delay = min(self._interval * 2 ** failures, BACKOFF_MAX_SECONDS) if failures else self._interval
            await within(delay, self._wake.wait(), False)
            self._wake.clear()

    async def publish(self) -> None:
        """One round: read the agent, and make the pool say what it has (when it may not already)."""
        resync = time.monotonic() - self._synced_at >= RESYNC_SECONDS
        if self._split is None or resync:  # a control plane upgraded to 1.35 wants the split layout
            self._split = await self._layout()
        if not self._node_uid or resync:  # a Node deleted and made again has a new uid
            node = await self._call(self._core.read_node, self._node)
            uid = (node.get("metadata") or {}).get("uid")
            if not uid:
                raise ValueError(f"Node {self._node!r} has no metadata.uid: the API server's answer is not a Node")
            self._node_uid = str(uid)
        agent_node, topology, slices = await self._snapshot()
        found = inventory(agent_node, topology, slices)
        self._log_withdrawn(dict(found.withdrawn))
        contents = slice_contents(found, self._split)
        if contents == self._current and not resync:
            return
        await self._sync(contents)
        self._current, self._synced_at = contents, time.monotonic()

    async def _layout(self) -> bool:
        """Whether the API server (``GET /version``) wants the split layout; logged when that changes."""
        version = await asyncio.to_thread(self._version_api.get_code, _request_timeout=self._request_timeout)
        split = split_layout(version.git_version or "")
        if split != self._split:
            log.info("API server %s: %s ResourceSlice layout", version.git_version,
                     "split (counters in slices of their own)" if split else "combined")
        return split

    def _log_withdrawn(self, withdrawn: dict[int, str]) -> None:
        for index in sorted(withdrawn.keys() - self._withdrawn.keys()):
            log.warning("GPU %d withdrawn from the ResourceSlices: %s", index, withdrawn[index])
        for index in sorted(self._withdrawn.keys() - withdrawn.keys()):
            log.info("GPU %d published again", index)
        self._withdrawn = withdrawn

    async def _call(self, method: Callable[..., Any], *args: Any, **kwargs: Any) -> dict[str, Any]:
        """``method`` in a thread, its answer as JSON (not the client's models, which know only
        the fields of the client's release)."""
        response = await asyncio.to_thread(method, *args, _preload_content=False,
                                           _request_timeout=self._request_timeout, **kwargs)
        answer: dict[str, Any] = json.loads(response.data or b"{}")
        return answer

    async def _sync(self, contents: list[dict[str, Any]]) -> None:
        self.syncs += 1
        listed = await self._call(self._resource.list_resource_slice,
                                  field_selector=f"spec.nodeName={self._node},spec.driver={self._driver}")
        stored: list[Body] = sorted(listed.get("items") or [], key=lambda item: item["metadata"]["name"])
        pool = [item for item in stored if item["spec"].get("pool", {}).get("name") == self._node]
        paired, obsolete = pair(contents, pool)
        obsolete += [item for item in stored if item not in pool]
        generations = {item["spec"]["pool"].get("generation", 0) for item in stored}
        if not obsolete and None not in paired and len(generations) == 1:
            (generation,) = generations
            if all(self._says(item, wanted_spec(content, self._driver, self._node, generation, len(contents)))
                   for content, item in zip(contents, paired, strict=True) if item is not None):
                return
        generation = max(generations | {self._generation}) + 1
        self.writes += 1
        log.info("publishing %d ResourceSlice(s) of pool %s at generation %d (%d obsolete)",
                 len(contents), self._node, generation, len(obsolete))
        for stale in obsolete:
            await self._delete(stale)
        for index, (content, item) in enumerate(zip(contents, paired, strict=True)):
            spec = wanted_spec(content, self._driver, self._node, generation, len(contents))
            meta: dict[str, Any] = item["metadata"] if item is not None else {}
            body = slice_body(spec, index, self._node_uid, meta.get("name", ""), meta.get("resourceVersion", ""))
            if item is None:
                answer = await self._call(self._resource.create_resource_slice, body)
            else:
                answer = await self._call(self._resource.replace_resource_slice, meta["name"], body)
            self._remember(answer, spec)
        self._generation = generation

    def _says(self, item: Body, spec: dict[str, Any]) -> bool:
        """Whether the stored ``item`` says ``spec``: as the server answered our last write of
        exactly that spec, or equal by value."""
        sent = self._sent.get(item["metadata"]["name"])
        if sent is not None and sent[0] == item["metadata"].get("resourceVersion"):
            return sent[1] == spec
        return same_spec(item["spec"], spec)

    async def _delete(self, item: Body) -> None:
        from kubernetes.client.exceptions import ApiException

        name = item["metadata"]["name"]
        try:
            await self._call(self._resource.delete_resource_slice, name,
                             body={"preconditions": {"uid": item["metadata"].get("uid")}})
        except ApiException as error:
            if error.status != 404:  # gone already: what was wanted
                raise
        self._sent.pop(name, None)

    def _remember(self, answer: Body, spec: dict[str, Any]) -> None:
        name = answer["metadata"]["name"]
        self._sent[name] = (answer["metadata"].get("resourceVersion", ""), spec)
        dropped = _fields(spec) - _fields(answer.get("spec") or {})
        for field, gate in GATE_FIELDS:
            if field in dropped and gate not in self._warned:
                self._warned.add(gate)
                log.warning("the API server dropped %s from ResourceSlice %s: its feature gate %s is off; %s", field, name, gate,
                            "each GPU then goes to one claim (no TDM shares)" if gate == "DRAConsumableCapacity"
                            else "MIG placements are published without counters: the scheduler may pick overlapping ones")


def _describe(error: BaseException) -> str:
    """One line for a failure: an API error's status and message, else the error's text."""
    status, body = getattr(error, "status", None), getattr(error, "body", None)
    if status is not None:
        return f"the API server answered {status}: {one_line(status_message(body))}"
    return error_line(error)
